"""How far the queue term may ask while replicas already asked for will
serve the queue: the cold-start stampede's cure, apart from the rest of the
policy because it reads the decision history rather than one observation."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from decision.policy import Decision

__all__ = ["STARTING_PATIENCE", "queue_hold"]

STARTING_PATIENCE = 2.0
"""Lead times the queue term waits for replicas it asked for while none of
them arrives (see :func:`queue_hold`)."""


def _finite(x: float) -> bool:
    return math.isfinite(x)


def queue_hold(
    history: Sequence[Decision], ready: int, waiting: float, now: float, lead_s: float
) -> tuple[int, str] | None:
    """What the queue term may ask at most, and why, when replicas already
    asked for will serve the queue (None: nothing holds it).

    ``starting_hold``: the last fresh answer is above ``ready`` and the fleet
    made progress towards it (the answer rose, or a replica became ready)
    within the last ``STARTING_PATIENCE`` lead times. Replicas that stop
    arriving for that long may never come (no capacity, a crash loop); one
    lead time is too short, since ``ready`` is read a scrape late and starts
    spread around their quantile.

    ``draining_hold``: the fleet is all there and the queue is falling fast
    enough to be gone within a lead time, before any replica asked for now
    could start: asking for the backlog as the fleet that just arrived drains
    it only pays for replicas that come to an empty queue.

    Answers never made on an observation (``no_data``, warming up) or held
    on stale data are not requests.
    """
    if not (lead_s > 0 and math.isfinite(lead_s)):
        return None
    fresh = [d for d in history if not d.data_stale and d.time_s <= now]
    if not fresh:
        return None
    requested = fresh[-1].replicas
    if requested > ready:
        return (requested, "starting_hold") if _arriving(fresh, ready, now, lead_s) else None
    if _drains_within(fresh, waiting, now, lead_s):
        return requested, "draining_hold"
    return None


def _arriving(fresh: Sequence[Decision], ready: int, now: float, lead_s: float) -> bool:
    """The answer rose, or a replica became ready, within the patience."""
    since = now - STARTING_PATIENCE * lead_s
    later_ready = ready
    for i in range(len(fresh) - 1, -1, -1):
        d = fresh[i]
        if d.time_s <= since:
            return False
        if d.ready_replicas >= 0 and later_ready > d.ready_replicas:
            return True
        if i == 0 or d.replicas > fresh[i - 1].replicas:
            return True  # the answer rose here (or nothing older is kept: a cold start)
        if d.ready_replicas >= 0:
            later_ready = d.ready_replicas
    return False


def _drains_within(fresh: Sequence[Decision], waiting: float, now: float, lead_s: float) -> bool:
    """The queue fell since the last different reading of it (within a lead
    time: a scrape repeats a value between samples) at a rate that empties
    it within ``lead_s``."""
    if not (_finite(waiting) and waiting > 0):
        return False
    for d in reversed(fresh):
        if now - d.time_s > lead_s:
            return False
        if _finite(d.waiting) and d.waiting != waiting and now > d.time_s:
            fall = (d.waiting - waiting) / (now - d.time_s)
            return fall > 0 and waiting / fall <= lead_s
    return False
