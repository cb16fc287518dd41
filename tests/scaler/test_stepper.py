"""scaler.stepper: one object's reading into its tracker and each live
result to the sink; a refresh of many objects equals stepping each."""

from __future__ import annotations

import math

from decision.reading import Reading
from decision.tracker_data import TrackerConfig, TrackerStep
from scaler.registry import Entry, ObjectRegistry
from scaler.sources import Selection
from scaler.stepper import Stepper
from tests.scaler.test_state import meta, queue_of

CONFIG = TrackerConfig(
    refresh_interval_s=1.0, refit_interval_s=20.0, forecast_step_s=2.0, fit_window_s=60.0
)


class Sink:
    """What a stepper handed out, in order."""

    def __init__(self) -> None:
        self.settled_keys: list[tuple[str, str]] = []
        self.steps: list[tuple[tuple[str, str], float, int, str]] = []

    def settled(self, entry: Entry) -> None:
        self.settled_keys.append(entry.key)

    def stepped(self, entry: Entry, step: TrackerStep, t: float) -> None:
        self.steps.append((entry.key, t, step.decision.replicas, step.decision.reason))


def wave(_s: Selection, t: float) -> Reading:
    """Requests around 5/s in a 7-s sine, with a queue when they peak."""
    rate = 5.0 + 4.0 * math.sin(t / 7.0)
    return queue_of(waiting=max(0.0, rate - 7.0), arrival=rate)(_s, t)


def tracked(n: int, **extra: str) -> tuple[ObjectRegistry, list[Entry]]:
    objects = ObjectRegistry(CONFIG, clock=lambda: 0.0)
    for i in range(n):
        objects.register("ns", f"so-{i}", meta(**extra))
    return objects, list(objects)


def test_a_live_step_reaches_the_sink_and_a_replayed_one_does_not() -> None:
    objects, (entry,) = tracked(1, maxReplicas="20")
    sink = Sink()
    stepper = Stepper(sink, is_current=objects.is_current)
    reading = queue_of(waiting=12)
    stepper.step(entry, 10.0, reading(Selection(), 10.0), 10.0, live=False)
    assert sink.steps == []
    assert entry.decision.time_s == 10.0  # decided all the same
    stepper.step(entry, 11.0, reading(Selection(), 11.0), 11.0, live=True)
    assert sink.steps == [(("ns", "so-0"), 11.0, entry.decision.replicas, entry.decision.reason)]
    assert entry.decision.reason == "queue"
    # an old grid time changes nothing
    assert stepper.step(entry, 11.0, reading(Selection(), 11.0), 11.0, live=True) is False
    assert len(sink.steps) == 1


def test_a_burst_is_reported() -> None:
    objects, (entry,) = tracked(1, minReplicas="0")
    stepper = Stepper(Sink(), is_current=objects.is_current)
    idle = queue_of(waiting=0, ready=0, arrival=0.0)
    busy = queue_of(waiting=5, ready=0, arrival=3.0)
    assert stepper.step(entry, 1.0, idle(Selection(), 1.0), 1.0, live=True) is False
    assert stepper.step(entry, 2.0, busy(Selection(), 2.0), 2.0, live=True) is True
    assert entry.active


def test_advance_forecasts_and_settles_across_bins_and_refits() -> None:
    """Forecasts on, across bins and refits: ``advance`` (live ``step`` on
    each current object) makes forecasts and settles them against what came,
    exactly as calling ``step`` on each object by hand does."""
    runs = []
    for batched in (False, True):
        objects, objs = tracked(3, forecast="auto", leadTimeSeconds="6")
        sink = Sink()
        stepper = Stepper(sink, is_current=objects.is_current)
        for tick in range(1, 90):
            t = float(tick)
            if batched:
                work = [(e, wave(e.selection, t), e.generation) for e in objs]
                stepper.advance(work, t, t)
            else:
                for e in objs:
                    stepper.step(e, t, wave(e.selection, t), t, live=True)
        assert all(e.tracker.fitted for e in objs)
        runs.append(
            (
                sink.steps,
                sink.settled_keys,
                [(d.time_s, d.replicas, d.reason) for e in objs for d in e.decisions],
                [(e.forecast.upper_requests_per_s if e.forecast else None) for e in objs],
            )
        )
    assert any(f is not None for f in runs[0][3])  # forecasts were made
    assert runs[0][1]  # and settled against what came
    assert runs[1] == runs[0]


def test_a_refresh_skips_objects_replaced_meanwhile() -> None:
    objects, (entry,) = tracked(1)
    sink = Sink()
    stepper = Stepper(sink, is_current=objects.is_current)
    objects.register("ns", "so-0", meta(model="other"))  # a new generation
    reading = queue_of(waiting=12)(Selection(), 5.0)
    assert stepper.advance([(entry, reading, entry.generation)], 5.0, 5.0) == []
    assert sink.steps == [] and entry.tracker.last_time_s is None
