"""The simulator's event queue: a heap keyed ``(time, priority, seq)``.

Why a module of its own: every component (cluster, control plane, router,
policies) schedules its work here, and nothing else keeps time. Ties at the
same instant are broken by priority (infrastructure before requests, so a
pod that turns Ready at t serves a request arriving at t) and then by a
per-queue sequence number, so runs are deterministic and two simulations in
one process share nothing. mypyc compiles it with the router
(``engine.native``): the heap loop runs once per arrival.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from heapq import heappop, heappush
from typing import Any

from simulations.event_handle import EventHandle

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


class EventQueue:
    """A virtual clock and the heap of what happens next.

    ``schedule(t, priority, action)`` runs ``action(t)`` when the clock
    reaches ``t``; ``run_until(t_end)`` pops events in key order. Scheduling
    in the past is an error: it would silently reorder cause and effect.
    """

    def __init__(self, start_s: float = 0.0) -> None:
        if not math.isfinite(start_s):
            raise ValueError(f"start_s must be finite, got {start_s}")
        self._now: float = float(start_s)
        # EventHandle entries, typed as lists so compiled code indexes them directly
        self._heap: list[list[Any]] = []
        self._seq: int = 0
        self.processed: int = 0

    @property
    def now(self) -> float:
        return self._now

    def __len__(self) -> int:
        return len(self._heap)

    def schedule(
        self, time_s: float, priority: int, action: Callable[[float], None]
    ) -> EventHandle:
        now = self._now
        if not now - 1e-9 <= time_s < math.inf:  # NaN, an infinity or the past
            if not math.isfinite(time_s):
                raise ValueError(f"event time must be finite, got {time_s}")
            raise ValueError(f"event at {time_s} is before now ({now})")
        seq = self._seq
        self._seq = seq + 1
        entry = EventHandle((time_s if not now > time_s else now, priority, seq, action))
        heappush(self._heap, entry)
        return entry

    def peek_time(self) -> float | None:
        """Time of the next live event, None when none is left."""
        heap = self._heap
        while heap and heap[0][3] is None:
            heappop(heap)
        return heap[0][0] if heap else None

    def step(self) -> bool:
        """Run the next live event; False when the heap is empty."""
        heap = self._heap
        while heap:
            time_s, _, _, action = heappop(heap)
            if action is None:
                continue
            self._now = time_s
            self.processed += 1
            action(time_s)
            return True
        return False

    def run_until(self, end_s: float) -> None:
        """Run every event at or before ``end_s``, then set the clock there."""
        heap = self._heap
        while heap:
            entry = heap[0]
            action = entry[3]
            if action is None:
                heappop(heap)
                continue
            time_s: float = entry[0]
            if time_s > end_s:
                break
            heappop(heap)
            self._now = time_s
            self.processed += 1
            action(time_s)
        if end_s > self._now:
            self._now = end_s
