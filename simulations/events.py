"""The simulator's event queue: a heap keyed ``(time, priority, seq)``.

Why a module of its own: every component (cluster, control plane, router,
policies) schedules its work here, and nothing else keeps time. Ties at the
same instant are broken by priority (infrastructure before requests, so a
pod that turns Ready at t serves a request arriving at t) and then by a
per-queue sequence number, so runs are deterministic and two simulations in
one process share nothing.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "PRIORITY_CLUSTER",
    "PRIORITY_CONTROL",
    "PRIORITY_REPLICA",
    "PRIORITY_REQUEST",
    "PRIORITY_SCRAPE",
    "EventHandle",
    "EventQueue",
]

# Lower runs first at equal times.
PRIORITY_CLUSTER = 0
"""Node and pod lifecycle (launch, Ready, interruption, termination)."""
PRIORITY_CONTROL = 1
"""KEDA polls, HPA syncs, Karpenter batches, policy decisions."""
PRIORITY_SCRAPE = 2
"""Prometheus scrapes: after the control plane acted at the same instant."""
PRIORITY_REPLICA = 3
"""Replica engine events (a batch changes, requests finish)."""
PRIORITY_REQUEST = 4
"""Request arrivals, client time-outs, retries."""


@dataclass(order=True)
class _Entry:
    time_s: float
    priority: int
    seq: int
    action: Callable[[float], None] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)


class EventHandle:
    """What :meth:`EventQueue.schedule` returns: lets the owner cancel it."""

    __slots__ = ("_entry",)

    def __init__(self, entry: _Entry) -> None:
        self._entry = entry

    @property
    def time_s(self) -> float:
        return self._entry.time_s

    @property
    def cancelled(self) -> bool:
        return self._entry.cancelled

    def cancel(self) -> None:
        self._entry.cancelled = True


class EventQueue:
    """A virtual clock and the heap of what happens next.

    ``schedule(t, priority, action)`` runs ``action(t)`` when the clock
    reaches ``t``; ``run_until(t_end)`` pops events in key order. Scheduling
    in the past is an error: it would silently reorder cause and effect.
    """

    def __init__(self, start_s: float = 0.0) -> None:
        if not math.isfinite(start_s):
            raise ValueError(f"start_s must be finite, got {start_s}")
        self._now = float(start_s)
        self._heap: list[_Entry] = []
        self._seq = 0
        self.processed = 0

    @property
    def now(self) -> float:
        return self._now

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(
        self, time_s: float, priority: int, action: Callable[[float], None]
    ) -> EventHandle:
        if not math.isfinite(time_s):
            raise ValueError(f"event time must be finite, got {time_s}")
        if time_s < self._now - 1e-9:
            raise ValueError(f"event at {time_s} is before now ({self._now})")
        entry = _Entry(max(time_s, self._now), priority, self._seq, action)
        self._seq += 1
        heapq.heappush(self._heap, entry)
        return EventHandle(entry)

    def peek_time(self) -> float | None:
        """Time of the next live event, None when none is left."""
        while self._heap and self._heap[0].cancelled:
            heapq.heappop(self._heap)
        return self._heap[0].time_s if self._heap else None

    def step(self) -> bool:
        """Run the next live event; False when the heap is empty."""
        while self._heap:
            entry = heapq.heappop(self._heap)
            if entry.cancelled:
                continue
            self._now = entry.time_s
            self.processed += 1
            entry.action(entry.time_s)
            return True
        return False

    def run_until(self, end_s: float) -> None:
        """Run every event at or before ``end_s``, then set the clock there."""
        while True:
            t = self.peek_time()
            if t is None or t > end_s:
                break
            self.step()
        self._now = max(self._now, end_s)
