"""ScalerState with an in-memory source: answers from memory, holds on bad
data, falls back after the bound, pushes bursts, backfills and forecasts."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

from decision.reading import Reading
from decision.settings import ScalerSettings, parse_settings
from scaler.backfill import BACKFILL_BATCH
from scaler.sources import History, Selection, SourceError, SourceSpec
from scaler.state import ScalerState
from scaler.telemetry import ScalerTelemetry

ReadingFn = Callable[[Selection, float], Reading]


@dataclass
class FakeSource:
    """Readings from a function of (selection, time); ``fail`` makes reads raise."""

    spec: SourceSpec
    reading: ReadingFn
    fail: bool = False
    history: bool = True
    reads: list[tuple[int, float]] = field(default_factory=list)
    ranges: list[tuple[int, float, float]] = field(default_factory=list)

    async def read(self, selections: Sequence[Selection], at_s: float) -> dict[Selection, Reading]:
        self.reads.append((len(selections), at_s))
        if self.fail:
            raise SourceError("down on purpose")
        return {s: self.reading(s, at_s) for s in selections}

    async def read_range(
        self, selections: Sequence[Selection], start_s: float, end_s: float, step_s: float
    ) -> dict[Selection, list[Reading]]:
        self.ranges.append((len(selections), start_s, end_s))
        if not self.history or self.fail:
            return {}
        times = [start_s + i * step_s for i in range(round((end_s - start_s) / step_s) + 1)]
        return {s: [self.reading(s, t) for t in times] for s in selections}

    async def read_history(
        self, selections: Sequence[Selection], start_s: float, end_s: float, step_s: float
    ) -> dict[Selection, History]:
        if not self.history or self.fail:
            return {}
        times = np.arange(start_s, end_s + step_s / 2, step_s)
        out = {}
        for s in selections:
            # one pass per selection, a row of columns per reading: a 100-object
            # backfill reads about two million of them
            cols = np.array([_history_row(self.reading(s, t)) for t in times.tolist()], dtype=float)
            cols = cols.reshape(len(times), 5)
            out[s] = History(
                times=times,
                requests_per_s=cols[:, 0],
                tokens_per_s=cols[:, 1],
                ready=cols[:, 2],
                waiting=cols[:, 3],
                completions_per_s=cols[:, 4],
            )
        return out

    async def close(self) -> None:
        pass


def _history_row(r: Reading) -> tuple[float, float, float, float, float]:
    """A reading as the history's columns (NaN where it has no value)."""

    def v(x: float | None) -> float:
        return math.nan if x is None else x

    return (
        v(r.arrival_rate_rps),
        (r.prompt_tokens_per_s or 0) + (r.generation_tokens_per_s or 0),
        v(r.ready_replicas),
        v(r.waiting),
        v(r.completion_rate_rps),
    )


def queue_of(waiting: float, ready: int = 2, arrival: float = 1.0) -> ReadingFn:
    def reading(_selection: Selection, t: float) -> Reading:
        return Reading(
            time_s=t,
            ready_replicas=ready,
            waiting=waiting,
            running=ready * 2.0,
            kv_usage=0.3,
            arrival_rate_rps=arrival,
            completion_rate_rps=arrival,
            prompt_tokens_per_s=100.0,
            generation_tokens_per_s=50.0,
            preemptions_per_s=0.0,
        )

    return reading


def empty_fleet(_selection: Selection, t: float) -> Reading:
    """No pod and no demand: what Prometheus shows for a fleet at zero."""
    return Reading(
        time_s=t,
        ready_replicas=0,
        waiting=0.0,
        running=0.0,
        arrival_rate_rps=0.0,
        completion_rate_rps=0.0,
        prompt_tokens_per_s=0.0,
        generation_tokens_per_s=0.0,
        preemptions_per_s=0.0,
    )


def meta(**extra: str) -> ScalerSettings:
    base = {
        "prometheusAddress": "http://prom:9090",
        "forecast": "off",
        "scaleDownStabilizationSeconds": "0",
        "staleAfterSeconds": "1",
        "fallbackAfterSeconds": "1.5",
        "fallbackReplicas": "9",
        "maxReplicas": "20",
    }
    base.update(extra)
    return parse_settings(base)


def make_state(
    source: FakeSource, telemetry: ScalerTelemetry | None = None, **kwargs: float
) -> ScalerState:
    params: dict[str, float] = {
        "refresh_interval_s": 0.1,
        "refit_interval_s": 1.0,
        "forecast_step_s": 0.1,
        "fit_window_s": 10.0,
        "query_delay_s": 0.0,
    }
    params.update(kwargs)
    return ScalerState(
        telemetry=telemetry or ScalerTelemetry(), source_factory=lambda spec: source, **params
    )  # type: ignore[arg-type]


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


def source_up(telemetry: ScalerTelemetry) -> float:
    for line in telemetry.render().decode().splitlines():
        if line.startswith("prescaler_source_up{"):
            return float(line.rsplit(" ", 1)[1])
    return math.nan


async def test_first_answer_is_warming_up_then_the_queue_decides() -> None:
    """Before any data: a safe 'warming_up' answer; then waiting / target."""
    source = FakeSource(SourceSpec("prometheus", "http://prom:9090"), queue_of(waiting=12))
    state = make_state(source)
    state.register("ns", "so", meta())
    first = state.decision("ns", "so")
    assert first.reason == "warming_up" and first.data_stale
    await state.start()
    try:
        await wait_until(lambda: state.decision("ns", "so").reason == "queue")
        assert state.decision("ns", "so").replicas == 4  # ceil(12 / 3)
        assert state.is_active("ns", "so")
    finally:
        await state.stop()


async def test_one_read_per_source_per_refresh_for_all_objects() -> None:
    """100 ScaledObjects on one Prometheus: one read call with 100 selections
    per refresh."""
    source = FakeSource(SourceSpec("prometheus", "http://prom:9090"), queue_of(waiting=3))
    state = make_state(source)
    for i in range(100):
        state.register("ns", f"so-{i}", meta(model=f"m{i}"))
    await state.start()
    try:
        # the backfill of 100 trackers takes seconds on a busy machine
        await wait_until(lambda: len(source.reads) >= 4, timeout_s=120.0)
    finally:
        await state.stop()
    # the backfill's range reads, in batches of BACKFILL_BATCH (bounded memory
    # after a restart); a later one, for all of them, only if a tick was missed
    batches = [min(BACKFILL_BATCH, 100 - i) for i in range(0, 100, BACKFILL_BATCH)]
    assert [n for n, _, _ in source.ranges[: len(batches)]] == batches
    assert all(n == 100 for n, _ in source.reads)
    assert all(n == 100 for n, _, _ in source.ranges[len(batches) :])


async def test_register_is_idempotent_and_new_settings_replace_old() -> None:
    # All 4 replicas asked for are ready, so the new target's answer is not
    # held for replicas still starting (decision.policy.queue_hold).
    source = FakeSource(SourceSpec("prometheus", "http://prom:9090"), queue_of(waiting=12, ready=4))
    state = make_state(source)
    await state.start()
    try:
        state.register("ns", "so", meta())
        await wait_until(lambda: state.decision("ns", "so").replicas == 4)
        for _ in range(3):
            state.register("ns", "so", meta())
        state.register("ns", "so", meta(targetWaitingPerReplica="1"))
        await wait_until(lambda: state.decision("ns", "so").replicas == 12)
    finally:
        await state.stop()


async def test_source_failure_holds_then_falls_back() -> None:
    """Source down: source_up 0, the answer never drops, then the fallback."""
    telemetry = ScalerTelemetry()
    source = FakeSource(SourceSpec("prometheus", "http://prom:9090"), queue_of(waiting=12))
    state = make_state(source, telemetry)
    state.register("ns", "so", meta(fallbackReplicas="2", fallbackAfterSeconds="1"))
    await state.start()
    try:
        await wait_until(lambda: state.decision("ns", "so").replicas == 4)
        assert source_up(telemetry) == 1.0
        source.fail = True
        failed_at = time.monotonic()
        await wait_until(lambda: source_up(telemetry) == 0.0)
        seen: list[int] = []
        latencies: list[float] = []
        while time.monotonic() - failed_at < 0.8:
            started = time.perf_counter()
            decision = state.decision("ns", "so")
            latencies.append(time.perf_counter() - started)
            seen.append(decision.replicas)
            await asyncio.sleep(0.01)
        latencies.sort()
        assert latencies[int(len(latencies) * 0.99)] < 0.010
        assert min(seen) == 4  # held: never lower because data went missing
        assert state.decision("ns", "so").reason == "stale_hold"
        await wait_until(lambda: state.decision("ns", "so").reason == "fallback")
        assert state.decision("ns", "so").replicas == 2
        assert time.monotonic() - failed_at >= 0.9
        source.fail = False
        await wait_until(lambda: state.decision("ns", "so").reason == "queue")
        assert source_up(telemetry) == 1.0
    finally:
        await state.stop()


async def test_burst_is_pushed_to_subscribers() -> None:
    """StreamIsActive: True arrives when traffic appears after none."""
    level = {"waiting": 0.0, "arrival": 0.0}

    def reading(_s: Selection, t: float) -> Reading:
        return Reading(
            time_s=t,
            ready_replicas=0,
            waiting=level["waiting"],
            running=0.0,
            kv_usage=None,
            arrival_rate_rps=level["arrival"],
        )

    source = FakeSource(SourceSpec("prometheus", "http://prom:9090"), reading)
    state = make_state(source)
    state.register("ns", "so", meta())
    await state.start()
    try:
        await wait_until(lambda: state.decision("ns", "so").reason != "warming_up")
        queue = state.subscribe_active("ns", "so")
        assert not state.is_active("ns", "so")
        level.update(waiting=5.0, arrival=2.0)
        assert await asyncio.wait_for(queue.get(), timeout=3) is True
        assert state.is_active("ns", "so")
        state.unsubscribe_active("ns", "so", queue)
    finally:
        await state.stop()


async def test_backfill_gives_a_forecast_at_once() -> None:
    """A restarted scaler reads history with one range query and forecasts immediately."""

    def reading(_s: Selection, t: float) -> Reading:
        rate = 5.0 + 4.0 * math.sin(t / 3.0)
        return Reading(
            time_s=t,
            ready_replicas=2,
            waiting=0.0,
            running=3.0,
            kv_usage=0.2,
            arrival_rate_rps=rate,
            completion_rate_rps=rate,
            prompt_tokens_per_s=rate * 100,
            generation_tokens_per_s=rate * 50,
        )

    telemetry = ScalerTelemetry()
    source = FakeSource(SourceSpec("prometheus", "http://prom:9090"), reading)
    state = make_state(
        source,
        telemetry,
        refresh_interval_s=0.5,
        forecast_step_s=0.5,
        refit_interval_s=5.0,
        fit_window_s=60.0,
    )
    state.register(
        "ns", "so", meta(forecast="auto", leadTimeSeconds="3", capacityTokensPerSecond="300")
    )
    await state.start()
    try:
        await wait_until(lambda: state.decision("ns", "so").reason != "warming_up", 5)
        decision = state.decision("ns", "so")
        assert "forecast" in decision.proposals
        assert decision.proposals["forecast"] >= 1
        text = telemetry.render().decode()
        assert 'prescaler_forecast{horizon_seconds="3",namespace="ns",quantile="0.9"' in text
        assert source.ranges  # the replay window was read as a range
    finally:
        await state.stop()


async def test_decision_latency_is_memory_speed_under_refresh() -> None:
    """decision() and is_active() answer in microseconds, even with 500 objects refreshing."""
    source = FakeSource(SourceSpec("prometheus", "http://prom:9090"), queue_of(waiting=6))
    state = make_state(source, refresh_interval_s=0.2, forecast_step_s=0.2)
    for i in range(500):
        state.register("ns", f"so-{i}", meta())
    await state.start()
    try:
        await wait_until(lambda: state.decision("ns", "so-499").reason == "queue", 10)
        latencies = []
        for i in range(5000):
            started = time.perf_counter()
            state.decision("ns", f"so-{i % 500}")
            state.is_active("ns", f"so-{i % 500}")
            latencies.append(time.perf_counter() - started)
            if i % 100 == 0:
                await asyncio.sleep(0)
        latencies.sort()
        # a dict lookup: any outlier is the OS or the GIL on a shared machine,
        # so the bound is on the 99th percentile
        assert latencies[len(latencies) // 2] < 0.001
        assert latencies[int(len(latencies) * 0.99)] < 0.010
    finally:
        await state.stop()


@pytest.mark.parametrize("bad", [math.nan, math.inf])
async def test_unknown_object_raises_key_error(bad: float) -> None:
    del bad
    state = make_state(FakeSource(SourceSpec("prometheus", "x"), queue_of(1)))
    with pytest.raises(KeyError):
        state.decision("ns", "nope")


async def test_prewarm_sizes_the_balloon_deployment_from_the_forecast() -> None:
    """prewarm: the forecast one node lead time ahead sets balloon replicas via the API."""
    import kubernetes

    from scaler.sources.balloon import BalloonController
    from tests.scaler.fake_kube_api import FakeKubeApi

    api = FakeKubeApi(deployments={("ns", "prescaler-balloon"): 0}).start()
    try:
        configuration = kubernetes.client.Configuration()
        configuration.host = api.url
        controller = BalloonController(kubernetes.client.ApiClient(configuration))

        def reading(_s: Selection, t: float) -> Reading:
            rate = 20.0 + 10.0 * math.sin(t / 2.0)  # far above what 1 replica carries
            return Reading(
                time_s=t,
                ready_replicas=1,
                waiting=0.0,
                running=1.0,
                kv_usage=0.1,
                arrival_rate_rps=rate,
                completion_rate_rps=rate,
                prompt_tokens_per_s=rate * 100,
                generation_tokens_per_s=rate * 20,
            )

        source = FakeSource(SourceSpec("prometheus", "http://prom:9090"), reading)
        state = ScalerState(
            telemetry=ScalerTelemetry(),
            refresh_interval_s=0.5,
            forecast_step_s=0.5,
            refit_interval_s=5.0,
            fit_window_s=60.0,
            query_delay_s=0.0,
            source_factory=lambda spec: source,
            balloon_controller=controller,
        )
        state.register(
            "ns",
            "so",
            meta(
                forecast="auto",
                prewarm="true",
                leadTimeSeconds="2",
                nodeLeadTimeSeconds="6",
                capacityTokensPerSecond="600",
                maxReplicas="20",
                minReplicas="1",
            ),
        )
        await state.start()
        try:
            await wait_until(lambda: bool(api.patches()), 10)
        finally:
            await state.stop()
        patch = api.patches()[0]
        assert patch.path == "/apis/apps/v1/namespaces/ns/deployments/prescaler-balloon/scale"
        assert patch.content_type == "application/merge-patch+json"
        assert patch.body["spec"]["replicas"] > 0
    finally:
        api.stop()


async def test_measured_pod_start_times_set_the_lead_time() -> None:
    """leadTimeSeconds: auto uses the p90 of pod creation -> Ready from discovery."""

    def reading(_s: Selection, t: float) -> Reading:
        return Reading(
            time_s=t,
            ready_replicas=1,
            waiting=0.0,
            running=0.0,
            lead_time_samples_s=(100.0, 100.0, 100.0, 200.0),
        )

    telemetry = ScalerTelemetry()
    source = FakeSource(SourceSpec("kubernetes"), reading)
    state = make_state(source, telemetry)
    state.register("ns", "so", parse_settings({"podSelector": "app=vllm", "forecast": "off"}))
    await state.start()
    try:
        await wait_until(lambda: "prescaler_lead_time_seconds{" in telemetry.render().decode())
        await asyncio.sleep(0.3)
        lines = [
            x
            for x in telemetry.render().decode().splitlines()
            if x.startswith("prescaler_lead_time_seconds{")
        ]
        assert float(lines[0].rsplit(" ", 1)[1]) == pytest.approx(170.0)
    finally:
        await state.stop()


async def test_a_vanished_fleet_is_held_until_the_fallback_bound_then_believed() -> None:
    """Series gone while replicas are wanted (crash, spot reclaim, scrape job
    deleted): hold, never idle; after fallbackAfterSeconds the empty fleet is
    believed, so a fleet really at zero can still be woken by the forecast."""
    serving = queue_of(waiting=12, ready=2)

    current: list[ReadingFn] = [serving]
    source = FakeSource(SourceSpec("prometheus", "http://prom:9090"), lambda s, t: current[0](s, t))
    state = make_state(source)
    settings = parse_settings(
        {
            "prometheusAddress": "http://prom:9090",
            "forecast": "off",
            "scaleDownStabilizationSeconds": "0",
            "staleAfterSeconds": "0.5",
            "fallbackAfterSeconds": "1.5",
            "maxReplicas": "20",
        }
    )
    state.register("ns", "so", settings)
    await state.start()
    try:
        await wait_until(lambda: state.decision("ns", "so").replicas == 4)
        current[0] = empty_fleet
        vanished_at = time.monotonic()
        seen: list[tuple[float, int, str, bool]] = []
        while time.monotonic() - vanished_at < 1.0:
            d = state.decision("ns", "so")
            seen.append(
                (time.monotonic() - vanished_at, d.replicas, d.reason, state.is_active("ns", "so"))
            )
            await asyncio.sleep(0.05)
        assert all(replicas == 4 and active for _, replicas, _, active in seen), seen
        assert {"stale_hold"} & {reason for _, _, reason, _ in seen}, seen
        await wait_until(lambda: state.decision("ns", "so").replicas == 0, 5.0)
        assert time.monotonic() - vanished_at >= 1.4
        assert state.decision("ns", "so").reason == "idle"
    finally:
        await state.stop()


async def test_a_fleet_already_at_zero_reads_as_idle_at_once() -> None:
    """No pods and nothing wanted: an empty reading is plain zero demand."""

    source = FakeSource(SourceSpec("prometheus", "http://prom:9090"), empty_fleet)
    state = make_state(source)
    state.register("ns", "so", meta(fallbackReplicas="0"))
    await state.start()
    try:
        await wait_until(lambda: state.decision("ns", "so").reason == "idle")
        assert state.decision("ns", "so").replicas == 0
        assert not state.is_active("ns", "so")
    finally:
        await state.stop()
