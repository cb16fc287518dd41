"""The event queue: deterministic order, no events in the past, cancellation."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulations.events import PRIORITY_CLUSTER, PRIORITY_REQUEST, EventQueue


def test_equal_times_run_by_priority_then_insertion() -> None:
    """Infrastructure before requests at the same instant; ties keep insertion order."""
    q = EventQueue()
    seen: list[str] = []
    q.schedule(5.0, PRIORITY_REQUEST, lambda t: seen.append("request-a"))
    q.schedule(5.0, PRIORITY_CLUSTER, lambda t: seen.append("pod-ready"))
    q.schedule(5.0, PRIORITY_REQUEST, lambda t: seen.append("request-b"))
    q.schedule(1.0, PRIORITY_REQUEST, lambda t: seen.append("early"))
    q.run_until(10.0)
    assert seen == ["early", "pod-ready", "request-a", "request-b"]
    assert q.now == 10.0


def test_scheduling_in_the_past_is_refused() -> None:
    """An event before now would silently reorder cause and effect."""
    q = EventQueue(start_s=10.0)
    with pytest.raises(ValueError, match="before now"):
        q.schedule(9.0, PRIORITY_REQUEST, lambda t: None)
    with pytest.raises(ValueError, match="finite"):
        q.schedule(math.nan, PRIORITY_REQUEST, lambda t: None)


def test_cancelled_events_never_run() -> None:
    """A replica's stale engine event is cancelled when its batch changes."""
    q = EventQueue()
    seen: list[float] = []
    handle = q.schedule(2.0, PRIORITY_REQUEST, seen.append)
    q.schedule(3.0, PRIORITY_REQUEST, seen.append)
    handle.cancel()
    assert q.peek_time() == 3.0
    q.run_until(5.0)
    assert seen == [3.0]
    assert q.processed == 1


def test_events_scheduled_while_running_keep_order() -> None:
    """An action may schedule more work at its own instant; it runs next."""
    q = EventQueue()
    seen: list[str] = []

    def first(t: float) -> None:
        seen.append("first")
        q.schedule(t, PRIORITY_REQUEST, lambda _: seen.append("chained"))

    q.schedule(1.0, PRIORITY_CLUSTER, first)
    q.schedule(1.5, PRIORITY_CLUSTER, lambda _: seen.append("later"))
    q.run_until(2.0)
    assert seen == ["first", "chained", "later"]


@given(st.lists(st.tuples(st.floats(0, 1e6), st.integers(0, 4)), max_size=60))
def test_time_never_goes_backwards(events: list[tuple[float, int]]) -> None:
    """Whatever the insertion order, actions see non-decreasing (time, priority)."""
    q = EventQueue()
    seen: list[tuple[float, int]] = []

    def record(priority: int) -> Callable[[float], None]:
        return lambda now: seen.append((now, priority))

    for t, p in events:
        q.schedule(t, p, record(p))
    q.run_until(2e6)
    assert seen == sorted(seen)
    assert len(seen) == len(events)
