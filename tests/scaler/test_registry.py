"""scaler.registry: registering, re-registering, forgetting, expiring, the
backfill queue and the IsActive subscribers of the tracked objects."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decision.tracker_data import TrackerConfig
from scaler.registry import SUBSCRIBER_QUEUE, ObjectRegistry
from tests.scaler.test_state import meta

CONFIG = TrackerConfig(refresh_interval_s=1.0, refit_interval_s=60.0, fit_window_s=60.0)


class Clocks:
    """A wall clock and a monotonic clock a test moves by hand."""

    def __init__(self) -> None:
        self.wall = 1000.0
        self.mono = 50.0


def registry(
    clocks: Clocks | None = None, forgotten: list[tuple[str, str]] | None = None
) -> ObjectRegistry:
    c = clocks or Clocks()
    return ObjectRegistry(
        CONFIG,
        clock=lambda: c.wall,
        monotonic=lambda: c.mono,
        on_forget=None if forgotten is None else (lambda ns, name: forgotten.append((ns, name))),
    )


def test_a_new_object_warms_up_and_waits_for_its_backfill() -> None:
    objects = registry()
    assert objects.register("ns", "a", meta()) is True
    entry = objects[("ns", "a")]
    assert (entry.decision.reason, entry.decision.time_s) == ("warming_up", 1000.0)
    assert not entry.ready and objects.ready() == []
    assert objects.has_pending
    assert objects.take_pending(10) == [entry]
    assert not objects.has_pending
    with pytest.raises(KeyError):
        objects[("ns", "unknown")]


def test_the_same_settings_only_mark_the_object_polled() -> None:
    clocks = Clocks()
    objects = registry(clocks)
    settings = meta()
    objects.register("ns", "a", settings)
    objects.take_pending(10)
    entry = objects[("ns", "a")]
    clocks.mono = 80.0
    assert objects.register("ns", "a", meta()) is False  # equal, not the same object
    assert objects[("ns", "a")] is entry
    assert entry.last_seen_s == 80.0
    assert not objects.has_pending


def test_new_policy_settings_update_the_tracker_in_place() -> None:
    objects = registry()
    objects.register("ns", "a", meta())
    objects.take_pending(10)
    entry = objects[("ns", "a")]
    assert objects.register("ns", "a", meta(maxReplicas="12")) is False
    assert objects[("ns", "a")] is entry
    assert entry.settings.max_replicas == 12
    assert not objects.has_pending


def test_settings_reading_other_series_start_a_new_generation() -> None:
    """Its answer and subscribers carry over; the old entry is no longer current."""
    objects = registry()
    objects.register("ns", "a", meta())
    objects.take_pending(10)
    old = objects[("ns", "a")]
    queue = objects.subscribe("ns", "a")
    assert objects.register("ns", "a", meta(model="other")) is True
    new = objects[("ns", "a")]
    assert new is not old and new.generation == old.generation + 1
    assert new.decision is old.decision
    assert queue in new.subscribers
    assert objects.is_current(new, new.generation)
    assert not objects.is_current(old, old.generation)
    assert not objects.is_current(new, old.generation)
    assert objects.take_pending(10) == [new]


def test_forgetting_drops_the_object_and_its_backfill() -> None:
    forgotten: list[tuple[str, str]] = []
    objects = registry(forgotten=forgotten)
    objects.register("ns", "a", meta())
    objects.register("ns", "b", meta())
    objects.forget("ns", "a")
    assert forgotten == [("ns", "a")]
    assert ("ns", "a") not in objects and objects.keys() == [("ns", "b")]
    assert [e.key for e in objects.take_pending(10)] == [("ns", "b")]


def test_pending_objects_are_taken_in_chunks() -> None:
    objects = registry()
    for i in range(5):
        objects.register("ns", f"so-{i}", meta())
    first = objects.take_pending(2)
    assert len(first) == 2 and objects.has_pending
    rest = objects.take_pending(10)
    assert len(rest) == 3 and not objects.has_pending
    assert {e.key for e in first + rest} == set(objects.keys())


def test_objects_not_polled_expire() -> None:
    clocks = Clocks()
    forgotten: list[tuple[str, str]] = []
    objects = registry(clocks, forgotten)
    objects.register("ns", "old", meta())
    clocks.mono += 100.0
    objects.register("ns", "new", meta())
    assert objects.expire(idle_s=50.0) == [("ns", "old")]
    assert forgotten == [("ns", "old")] and objects.keys() == [("ns", "new")]


async def test_subscribers_hear_bursts_until_their_queue_is_full() -> None:
    objects = registry()
    objects.register("ns", "a", meta())
    queue = objects.subscribe("ns", "a")
    objects.notify([("ns", "a"), ("ns", "unknown")])
    assert await asyncio.wait_for(queue.get(), 1.0) is True
    for _ in range(SUBSCRIBER_QUEUE + 5):
        objects.notify([("ns", "a")])
    assert queue.qsize() == SUBSCRIBER_QUEUE  # the rest dropped, nothing raised
    objects.unsubscribe("ns", "a", queue)
    objects.unsubscribe("ns", "unknown", queue)
    assert objects[("ns", "a")].subscribers == set()
    with pytest.raises(KeyError):
        objects.subscribe("ns", "unknown")


_ops = st.lists(
    st.tuples(st.sampled_from(["register", "reregister", "forget", "take"]), st.integers(0, 3)),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(_ops)
def test_keys_and_backfill_queue_follow_the_calls(ops: list[tuple[str, int]]) -> None:
    """Whatever the order of calls: the tracked keys are those registered and
    not forgotten, and an object waits for a backfill iff it (re)started
    after its last take."""
    objects = registry()
    tracked: set[tuple[str, str]] = set()
    waiting: set[tuple[str, str]] = set()
    for n, (op, i) in enumerate(ops):
        key = ("ns", f"so-{i}")
        if op == "register":
            if objects.register(*key, meta()):
                waiting.add(key)
            tracked.add(key)
        elif op == "reregister":  # other series: a new generation
            objects.register(*key, meta(model=f"m{n}"))
            tracked.add(key)
            waiting.add(key)
        elif op == "forget":
            objects.forget(*key)
            tracked.discard(key)
            waiting.discard(key)
        else:
            taken = {e.key for e in objects.take_pending(2)}
            assert taken <= waiting and len(taken) == min(2, len(waiting))
            waiting -= taken
        assert set(objects.keys()) == tracked
        assert objects.has_pending == bool(waiting)
