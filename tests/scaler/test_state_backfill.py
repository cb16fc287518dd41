"""Statelessness: a scaler started later backfills from Prometheus and then
answers exactly like one that ran all along (two replicas behind one Service)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from decision.policy import Decision
from decision.settings import parse_settings
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


@pytest.fixture
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


@pytest.fixture
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
