"""Statelessness: a scaler started later backfills from Prometheus and then
answers exactly like one that ran all along (two replicas behind one Service),
also for an object whose demand is its gatewayRateQuery."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence

import numpy as np
import pytest

from decision.policy import Decision
from decision.reading import Reading
from decision.settings import LabelMatcher, parse_settings
from decision.tracker import Tracker
from decision.tracker_data import TrackerConfig
from scaler.sources import History, Selection
from scaler.sources.prometheus import PrometheusSource
from scaler.state import ScalerState
from scaler.telemetry import ScalerTelemetry
from tests.scaler.conftest import Engine, FakeVllm
from tests.support.prometheus import PrometheusServer, Target, running_prometheus

pytestmark = pytest.mark.integration


class RecordingTelemetry(ScalerTelemetry):
    """Keeps every live decision, keyed by its grid time."""

    def __init__(self) -> None:
        super().__init__()
        self.decisions: dict[float, Decision] = {}

    def record_decision(
        self, namespace: str, name: str, decision: Decision, ready_replicas: int
    ) -> None:
        super().record_decision(namespace, name, decision, ready_replicas)
        self.decisions[decision.time_s] = decision


@pytest.fixture(scope="module")
def replica() -> Iterator[FakeVllm]:
    fake = FakeVllm(
        model="llama",
        engines=[
            Engine(
                waiting=12,
                running=4,
                kv=0.6,
                per_second={"success": 3.0, "prompt": 600.0, "generation": 90.0},
            ),
        ],
    ).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def prom(replica: FakeVllm) -> Iterator[PrometheusServer]:
    with running_prometheus([Target(replica.address, {"namespace": "llm"})]) as server:
        server.wait_for("vllm:num_requests_waiting", min_series=1)
        yield server


def make_state(url: str, telemetry: ScalerTelemetry) -> ScalerState:
    state = ScalerState(
        telemetry=telemetry,
        refresh_interval_s=1.0,
        forecast_step_s=1.0,
        refit_interval_s=4.0,
        fit_window_s=40.0,
        query_delay_s=1.0,
        source_factory=lambda spec: PrometheusSource(spec.address, timeout_s=2.0, rate_window_s=4),
    )
    state.register(
        "llm",
        "so",
        parse_settings(
            {
                "prometheusAddress": url,
                "model": "llama",
                "forecast": "auto",
                "leadTimeSeconds": "5",
                "capacityTokensPerSecond": "150",
                "scaleDownStabilizationSeconds": "4",
            }
        ),
    )
    return state


async def test_a_late_replica_answers_like_one_that_ran_all_along(
    prom: PrometheusServer, replica: FakeVllm
) -> None:
    first, second = RecordingTelemetry(), RecordingTelemetry()
    a = make_state(prom.url, first)
    await a.start()
    b = make_state(prom.url, second)
    try:
        await asyncio.sleep(12)  # history for A's forecaster, and for B's backfill
        replica.engines[0].waiting = 3  # load falls: scale-in waits for stabilization
        await asyncio.sleep(2)
        await b.start()
        await asyncio.sleep(6)
    finally:
        await a.stop()
        await b.stop()
    common = sorted(set(first.decisions) & set(second.decisions))
    assert len(common) >= 4, (sorted(first.decisions), sorted(second.decisions))
    # B's very first answer, right after its backfill, is already A's answer
    assert min(second.decisions) in first.decisions
    for t in common:
        assert first.decisions[t] == second.decisions[t], t
    # ... including the forecast term (B forecasts at once from backfilled history)
    assert any("forecast" in second.decisions[t].proposals for t in common)
    replicas = [first.decisions[t].replicas for t in sorted(first.decisions)]
    assert max(replicas) >= 4 and "scale_down_hold" in {d.reason for d in first.decisions.values()}


GATEWAY = 'sum(rate(vllm:request_success_total{namespace="llm"}[4s]))'


def gateway_selection(model: str, gateway_query: str) -> Selection:
    return Selection((LabelMatcher("model_name", "=", model),), gateway_query=gateway_query)


def tracker_demand(url: str, fill: History | Sequence[tuple[float, Reading | None]]) -> list[float]:
    """The request-rate bins of a tracker given a backfilled ``History`` or
    live ``(time, reading)`` refreshes."""
    tracker = Tracker(
        ("llm", "so"),
        parse_settings({"prometheusAddress": url, "gatewayRateQuery": GATEWAY}),
        TrackerConfig(refresh_interval_s=1.0, forecast_step_s=1.0, fit_window_s=60.0),
    )
    if isinstance(fill, History):
        tracker.load_history(
            fill.times,
            fill.requests_per_s,
            fill.tokens_per_s,
            fill.ready,
            fill.waiting,
            fill.completions_per_s,
        )
    else:
        for t, reading in fill:
            tracker.step(t, reading, t, decide=False)
    return tracker.series.requests().tolist()


async def test_the_backfill_feeds_the_gateway_rate_as_live_refreshes_do(
    prom: PrometheusServer,
) -> None:
    """An object with gatewayRateQuery backfills the gateway's rate (a range
    query of the same text, paged on the same grid) as its demand: a tracker
    loaded from it holds the bins a tracker fed the live readings holds; at
    zero replicas (no vLLM series at all) that is the gateway's rate, not
    vLLM's zero; a failing query is unknown and vLLM's arrivals stand in."""
    # the gateway's rate over the whole grid (a fresh server needs ~10 s of scrapes)
    await asyncio.to_thread(prom.wait_for, f"count_over_time(({GATEWAY})[10s:1s]) >= 10")
    llama, at_zero = gateway_selection("llama", GATEWAY), gateway_selection("absent", GATEWAY)
    broken, plain = gateway_selection("llama", "sum(rate("), gateway_selection("llama", "")
    chosen = [llama, at_zero, broken, plain]
    source = PrometheusSource(prom.url, rate_window_s=4, max_range_points=4)
    try:
        end = float(int(time.time()) - 2)
        grid = [end - 8 + k for k in range(9)]
        histories = await source.read_history(chosen, grid[0], end, 1.0)
        replay = await source.read_range(chosen, grid[0], end, 1.0)
        live = {t: await source.read(chosen, t) for t in grid}
    finally:
        await source.close()
    for selection in chosen:
        history = histories[selection]
        assert history.times.tolist() == grid
        # the replay window's readings are the live ones, gateway rate included
        assert replay[selection] == [live[t][selection] for t in grid]
        fed = [(t, live[t].get(selection)) for t in grid]
        assert tracker_demand(prom.url, history) == tracker_demand(prom.url, fed), selection
    gateway = [live[t][at_zero].gateway_rate_rps for t in grid]
    assert gateway[-1] is not None and gateway[-1] > 0
    assert all(live[t][at_zero].ready_replicas == 0 for t in grid)
    assert histories[at_zero].requests_per_s[-1] == gateway[-1]
    assert np.array_equal(
        histories[broken].requests_per_s, histories[plain].requests_per_s, equal_nan=True
    )
