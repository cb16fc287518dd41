"""decision.tracker: the pure per-ScaledObject path from a reading to a Decision.

The live ``ScalerState`` and a bare ``Tracker`` fed the same readings must
decide identically (the simulator runs the tracker and its results must
transfer to production); the tracker's own rules are pinned through its
public API.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decision.policy import Decision
from decision.prediction import ForecasterBackend
from decision.queue_hold import STARTING_PATIENCE
from decision.reading import Reading
from decision.settings import ScalerSettings, parse_settings
from decision.tracker import DEFAULT_LEAD_TIME_S, Tracker
from decision.tracker_data import TrackerConfig
from scaler.sources import History, Selection, SourceError
from scaler.state import ScalerState
from scaler.telemetry import ScalerTelemetry

Script = Callable[[float], Reading | None]


@dataclass
class ScriptedSource:
    """A source whose reading at grid time t is ``script(t)``; None = the read
    fails (an outage). No history, so a backfill starts from nothing."""

    script: Script
    reads: list[float] = field(default_factory=list)

    async def read(self, selections: Sequence[Selection], at_s: float) -> dict[Selection, Reading]:
        self.reads.append(at_s)
        reading = self.script(at_s)
        if reading is None:
            raise SourceError("down on purpose")
        return {s: reading for s in selections}

    async def read_range(
        self, selections: Sequence[Selection], start_s: float, end_s: float, step_s: float
    ) -> dict[Selection, list[Reading]]:
        return {}

    async def read_history(
        self, selections: Sequence[Selection], start_s: float, end_s: float, step_s: float
    ) -> dict[Selection, History]:
        return {}

    async def close(self) -> None:
        pass


class FakeBalloons:
    """Stands in for the balloon Deployment's scale API (prewarm)."""

    def __init__(self) -> None:
        self.applied: list[int] = []

    def apply(self, namespace: str, deployment: str, replicas: int) -> None:
        self.applied.append(replicas)


T0 = 100_000.0
DT = 5.0


def scenario(t: float) -> Reading | None:
    """A day-like wave with bursts, an outage, a vanished fleet, then measured starts."""
    i = round((t - T0) / DT)
    if 60 <= i < 72:
        return None  # the source is down
    samples = (30.0, 45.0, 60.0, 90.0) if i >= 100 else ()
    if 120 <= i < 140:  # every series gone: zero pods, zero demand
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
            lead_time_samples_s=samples,
        )
    rate = 6.0 + 4.0 * math.sin(i / 15.0) + (8.0 if i % 50 in range(40, 46) else 0.0)
    ready = 3 if i < 150 else 2
    waiting = max(0.0, (rate - 3.0 * ready) * 2.0)
    return Reading(
        time_s=t,
        ready_replicas=ready,
        waiting=waiting,
        running=min(rate, 3.0 * ready) * 2.0,
        kv_usage=min(1.0, 0.1 * rate),
        arrival_rate_rps=rate,
        completion_rate_rps=min(rate, 3.0 * ready),
        prompt_tokens_per_s=rate * 300.0,
        generation_tokens_per_s=rate * 80.0,
        preemptions_per_s=0.0,
        lead_time_samples_s=samples,
    )


def settings_for(**extra: str) -> ScalerSettings:
    base = {
        "prometheusAddress": "http://prom:9090",
        "scaleDownStabilizationSeconds": "30",
        "staleAfterSeconds": "10",
        "fallbackAfterSeconds": "40",
        "maxReplicas": "30",
    }
    base.update(extra)
    return parse_settings(base)


CONFIG = TrackerConfig(
    refresh_interval_s=DT,
    refit_interval_s=120.0,
    forecast_step_s=15.0,
    fit_window_s=900.0,
    capacity_window_s=600.0,
)


@pytest.mark.parametrize(
    ("extra", "steps"),
    [
        ({"forecast": "off"}, 220),
        (
            {
                "forecast": "holt_winters",
                "profile": "llama-3-8b-fp8@g6.xlarge",
                "prewarm": "true",
                "nodeLeadTimeSeconds": "90",
            },
            220,
        ),
        ({"forecast": "auto", "capacityTokensPerSecond": "2000"}, 160),
    ],
    ids=["off-learned-capacity", "holt_winters-profile-prewarm", "prescaler-token-capacity"],
)
async def test_the_live_state_and_a_bare_tracker_decide_identically(
    extra: dict[str, str], steps: int
) -> None:
    """Same readings in, same decisions out: the live ScalerState (sources,
    batching, telemetry) adds I/O around the tracker and nothing else, step
    by step through a source outage, a vanished fleet and ``leadTimeSeconds:
    auto`` from measured starts."""
    so_settings = settings_for(**extra)
    clock = [T0]
    state = ScalerState(
        telemetry=ScalerTelemetry(),
        refresh_interval_s=CONFIG.refresh_interval_s,
        refit_interval_s=CONFIG.refit_interval_s,
        forecast_step_s=CONFIG.forecast_step_s,
        fit_window_s=CONFIG.fit_window_s,
        capacity_window_s=CONFIG.capacity_window_s,
        query_delay_s=0.0,
        clock=lambda: clock[0],
        source_factory=lambda spec: ScriptedSource(scenario),  # type: ignore[arg-type,return-value]
        balloon_controller=FakeBalloons(),
    )
    state.register("ns", "so", so_settings)
    pushes = state.subscribe_active("ns", "so")
    tracker = Tracker(("ns", "so"), so_settings, CONFIG)
    reasons: set[str] = set()
    leads: set[float] = set()
    forecasts = held_empty = 0
    try:
        for i in range(steps):
            t = T0 + i * DT
            clock[0] = t
            if i == 0:
                await state.loop.backfill(t)  # the first step of a newly registered object
            else:
                await state.refresh(t)
            reading = scenario(t)
            step = tracker.step(t, reading, t)
            live = state.decision("ns", "so")
            assert live == step.decision, (i, live, step.decision)
            assert state.is_active("ns", "so") == step.active, i
            pushed = not pushes.empty()
            while not pushes.empty():
                pushes.get_nowait()
            assert pushed == step.burst, i
            reasons.add(step.decision.reason)
            leads.add(step.lead_s)
            forecasts += "forecast" in step.decision.proposals
            held_empty += reading is not None and step.observation is None
    finally:
        await state.stop()
    assert "stale_hold" in reasons and reasons & {"queue", "starting_hold"}, reasons
    assert held_empty == 40 / DT  # the vanished fleet, held for fallbackAfterSeconds
    assert len(leads) == 2 or extra.get("leadTimeSeconds")  # default/profile, then measured
    if extra["forecast"] != "off":
        assert forecasts > steps // 3
        assert tracker.fitted


def _fresh(t: float, *, ready: int = 2, waiting: float = 9.0) -> Reading:
    return Reading(
        time_s=t,
        ready_replicas=ready,
        waiting=waiting,
        running=2.0 * ready,
        kv_usage=0.3,
        arrival_rate_rps=2.0,
        prompt_tokens_per_s=100.0,
        generation_tokens_per_s=50.0,
        completion_rate_rps=2.0,
    )


def _empty(t: float) -> Reading:
    return Reading(
        time_s=t, ready_replicas=0, waiting=0.0, running=0.0, kv_usage=None, arrival_rate_rps=0.0
    )


def test_trimming_keeps_the_stabilization_window_and_the_last_fresh_decision() -> None:
    """The policy's scale-down window needs the last scaleDownStabilizationSeconds
    of decisions, its start-up credit the last STARTING_PATIENCE lead times, and
    its staleness clock the last decision made on fresh data, however old
    (HPA-like stabilization: kubernetes/kubernetes
    pkg/controller/podautoscaler/horizontal.go, stabilizeRecommendation)."""
    so = settings_for(forecast="off", fallbackAfterSeconds="100", fallbackReplicas="1")
    tracker = Tracker(("ns", "so"), so, TrackerConfig(refresh_interval_s=DT))
    for i in range(20):
        tracker.step(T0 + i * DT, _fresh(T0 + i * DT), T0 + i * DT)
    last_fresh = tracker.decision
    window = max(so.scale_down_stabilization_seconds, STARTING_PATIENCE * tracker.lead_time()) + DT
    for i in range(20, 60):  # a long outage
        t = T0 + i * DT
        step = tracker.step(t, None, t)
        kept = tracker.decisions
        assert last_fresh in kept
        assert all(t - d.time_s <= window for d in kept if d is not last_fresh)
        expected = "fallback" if t - last_fresh.time_s >= 100 else "stale_hold"
        assert step.decision.reason == expected, (i, step.decision)
    assert len(tracker.decisions) <= window / DT + 2


def test_a_vanished_fleet_is_held_for_fallback_after_seconds_then_believed() -> None:
    """Zero pods and zero demand right after a serving fleet is an outage
    (every pod crashed, a spot reclaim, the scrape job deleted) until
    fallbackAfterSeconds have passed; then believed, so it reads idle."""
    so = settings_for(forecast="off", scaleDownStabilizationSeconds="0")
    tracker = Tracker(("ns", "so"), so, TrackerConfig(refresh_interval_s=DT))
    for i in range(5):
        serving = tracker.step(T0 + i * DT, _fresh(T0 + i * DT), T0 + i * DT)
    assert serving.decision.replicas == 3 and serving.active
    vanished_at = T0 + 5 * DT
    for i in range(5, 30):
        t = T0 + i * DT
        step = tracker.step(t, _empty(t), t)
        if t - vanished_at < so.fallback_after_seconds:
            assert step.observation is None, i
            assert step.decision.replicas == 3 and step.active, (i, step)
            assert step.decision.reason in ("stale_hold", "fallback")
        else:
            assert step.observation is not None, i
            assert (step.decision.replicas, step.decision.reason, step.active) == (0, "idle", False)


def test_a_fleet_at_zero_with_nothing_wanted_is_idle_at_once() -> None:
    """The hold is only for a fleet we still ask replicas for."""
    so = settings_for(forecast="off", fallbackReplicas="0")
    tracker = Tracker(("ns", "so"), so, TrackerConfig(refresh_interval_s=DT))
    step = tracker.step(T0, _empty(T0), T0)
    assert (step.decision.reason, step.decision.replicas, step.active) == ("idle", 0, False)


class RecordingForecaster:
    """A forecaster that predicts the mean of what it saw and records its calls."""

    def __init__(self, log: list[tuple[str, int]]) -> None:
        self.log = log
        self.level = 0.0

    def fit(self, y: np.ndarray, step_s: float) -> None:
        self.log.append(("fit", len(y)))
        self.level = float(np.mean(y))

    def update(self, y: np.ndarray) -> None:
        self.log.append(("update", len(y)))

    def predict(self, horizon_steps: int, quantiles: Sequence[float] = (0.5, 0.9)) -> Any:
        level = self.level

        class Result:
            def quantile(self, q: float) -> np.ndarray:
                return np.full(horizon_steps, level * (1.0 + q))

        return Result()


def test_refits_happen_at_staggered_boundaries_and_updates_in_between() -> None:
    """Each object refits every refit_interval_s at a boundary offset by a hash
    of its name (so many objects do not refit in the same refresh), on the
    bins up to that boundary; every other closed bin only updates."""
    config = TrackerConfig(refresh_interval_s=5.0, refit_interval_s=60.0, forecast_step_s=15.0)
    offsets = set()
    for name in ("a", "b", "c", "d"):
        calls: list[tuple[str, int]] = []
        fits_at: list[float] = []

        def factory(method: str, calls: list[tuple[str, int]] = calls) -> ForecasterBackend:
            assert method == "holt_winters"
            return RecordingForecaster(calls)

        tracker = Tracker(("ns", name), settings_for(forecast="holt_winters"), config, factory)
        assert 0 <= tracker.offset_s < 60 and tracker.offset_s % 15 == 0
        offsets.add(tracker.offset_s)
        for i in range(120):
            t = i * 5.0
            before = sum(1 for c in calls if c[0] == "fit")
            tracker.step(t, _fresh(t, waiting=0.0), t)
            if sum(1 for c in calls if c[0] == "fit") > before:
                fits_at.append(t)
        assert len(fits_at) >= 4
        assert all((t - tracker.offset_s) % 60 < 15 for t in fits_at), (name, fits_at)
        assert all(b - a == 60 for a, b in itertools.pairwise(fits_at)), fits_at
        updates = sum(1 for c in calls if c[0] == "update")
        assert updates >= 3 * len(fits_at)  # 4 bins per refit interval, one of them refits
        assert tracker.fitted and tracker.forecast is not None
    assert len(offsets) > 1  # staggered


def test_a_failed_forecast_is_dropped_and_refit_at_the_next_bin() -> None:
    """A forecaster error never reaches the decision: the prediction is
    dropped and the next closed bin refits from scratch."""
    calls: list[tuple[str, int]] = []
    failing = [False]

    class Flaky(RecordingForecaster):
        def predict(self, horizon_steps: int, quantiles: Sequence[float] = (0.5, 0.9)) -> Any:
            if failing[0]:
                failing[0] = False
                raise RuntimeError("forecaster broke")
            return super().predict(horizon_steps, quantiles)

    config = TrackerConfig(refresh_interval_s=5.0, refit_interval_s=600.0, forecast_step_s=15.0)
    tracker = Tracker(
        ("ns", "so"), settings_for(forecast="holt_winters"), config, lambda method: Flaky(calls)
    )
    t = 0.0
    while not tracker.fitted:
        t += 5.0
        tracker.step(t, _fresh(t), t)
    fits = sum(1 for c in calls if c[0] == "fit")
    failing[0] = True
    while failing[0]:  # the next closed bin, with a failing forecast
        t += 5.0
        step = tracker.step(t, _fresh(t), t)
    assert calls[-1][0] == "update"  # between refits: update only
    assert step.forecast is None and not tracker.fitted
    assert "forecast" not in step.decision.proposals
    while not tracker.fitted:
        t += 5.0
        tracker.step(t, _fresh(t), t)
    assert sum(1 for c in calls if c[0] == "fit") == fits + 1


def test_lead_time_auto_uses_measured_starts_then_the_profile_then_the_default() -> None:
    """leadTimeSeconds auto: the p90 of measured pod creation -> Ready (a high
    quantile: planning for the typical start is late half the time), else the
    profile's cold start, else DEFAULT_LEAD_TIME_S."""
    bare = Tracker(("ns", "so"), settings_for(forecast="off"), CONFIG)
    assert bare.step(T0, _fresh(T0), T0).lead_s == DEFAULT_LEAD_TIME_S
    measured = Reading(
        time_s=T0 + DT,
        ready_replicas=1,
        waiting=0.0,
        running=0.0,
        lead_time_samples_s=(100.0, 100.0, 100.0, 200.0),
    )
    bare.step(T0 + DT, measured, T0 + DT)  # samples count from the next step
    assert bare.step(T0 + 2 * DT, _fresh(T0 + 2 * DT), T0 + 2 * DT).lead_s == pytest.approx(170.0)
    fixed = Tracker(("ns", "so"), settings_for(forecast="off", leadTimeSeconds="42"), CONFIG)
    assert fixed.step(T0, _fresh(T0), T0).lead_s == 42.0


def test_config_and_steps_are_validated() -> None:
    """Bad cadences fail at construction with the parameter named; a step
    back in time is a caller bug, not a silent no-op."""
    with pytest.raises(ValueError, match="refresh_interval_s"):
        TrackerConfig(refresh_interval_s=0.0)
    with pytest.raises(ValueError, match="positive multiple"):
        TrackerConfig(refresh_interval_s=5.0, forecast_step_s=12.0)
    with pytest.raises(ValueError, match="refit_interval_s"):
        TrackerConfig(refit_interval_s=-1.0)
    tracker = Tracker(("ns", "so"), settings_for(forecast="off"), CONFIG)
    tracker.step(T0, _fresh(T0), T0)
    with pytest.raises(ValueError, match="not after"):
        tracker.step(T0, _fresh(T0), T0)
    with pytest.raises(ValueError, match="not after"):
        tracker.step(T0 - DT, _fresh(T0 - DT), T0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(0.0, 60.0)), min_size=1, max_size=60))
def test_missing_data_never_lowers_the_answer(waiting: list[float | None]) -> None:
    """Without fallbackReplicas a missing reading holds the last answer: never
    a scale-down on bad data (the rule KEDA's own fallback follows:
    keda.sh docs, ScaledObject spec, fallback)."""
    so = settings_for(forecast="off", fallbackAfterSeconds="20")
    tracker = Tracker(("ns", "so"), so, TrackerConfig(refresh_interval_s=DT))
    previous: Decision | None = None
    for i, w in enumerate(waiting):
        t = T0 + i * DT
        step = tracker.step(t, None if w is None else _fresh(t, waiting=w), t)
        if w is None and previous is not None:
            assert step.decision.replicas >= previous.replicas
        previous = step.decision
