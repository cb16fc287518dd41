"""How far the queue term may ask while replicas already asked for will
serve the queue: the cold-start stampede's cure, apart from the rest of the
policy because it reads the decision history rather than one observation."""

from __future__ import annotations

import math
from collections.abc import Sequence

from decision.answer import Decision, Reason

__all__ = ["STARTING_PATIENCE", "queue_hold"]

STARTING_PATIENCE = 2.0
"""Lead times the queue term waits for replicas it asked for while none of
them arrives (see :func:`queue_hold`)."""


def queue_hold(
    history: Sequence[Decision], ready: int, waiting: float, now: float, lead_s: float
) -> tuple[int, Reason] | None:
    """What the queue term may ask at most, and why, when replicas already
    asked for will serve the queue (None: nothing holds it).

    ``starting_hold``: the last fresh answer is above ``ready`` and the fleet
    made progress towards it (the answer rose, or the ready count reached a
    new high) within ``STARTING_PATIENCE`` lead times; replicas that stop
    arriving that long may never come, and one lead time is too short (``ready``
    is read a scrape late). ``draining_hold``: the fleet is all there and the
    queue falls fast enough to be gone within a lead time, before any replica
    asked for now could start. Answers not made on fresh data are not requests.
    """
    if not (lead_s > 0 and math.isfinite(lead_s)):
        return None
    fresh = [d for d in history if not d.data_stale and d.time_s <= now]
    if not fresh:
        return None
    requested = fresh[-1].replicas
    if requested > ready:
        return (requested, Reason.STARTING_HOLD) if _arriving(fresh, ready, now, lead_s) else None
    if _drains_within(fresh, waiting, now, lead_s):
        # never below the ready fleet whose pace the fall was measured at
        return max(requested, ready), Reason.DRAINING_HOLD
    return None


def _arriving(fresh: Sequence[Decision], ready: int, now: float, lead_s: float) -> bool:
    """The answer rose, or the ready count reached a new high, within the
    patience. Only a new high is an arrival: a count that flaps back (a
    scrape missed, a crash-looping pod passing its probe again) would
    otherwise re-arm the hold for ever. The oldest decision kept counts as a
    rise: with a short history (a cold start, a restart) nothing says the
    replicas asked for are not on their way."""
    since = now - STARTING_PATIENCE * lead_s
    last_event = -math.inf
    high = -1
    for i, d in enumerate(fresh):
        if i == 0 or d.replicas > fresh[i - 1].replicas:
            last_event = d.time_s
        if d.ready_replicas > high:
            if high >= 0:
                last_event = d.time_s
            high = d.ready_replicas
    if high >= 0 and ready > high:
        last_event = now
    return last_event > since


def _drains_within(fresh: Sequence[Decision], waiting: float, now: float, lead_s: float) -> bool:
    """The queue fell since the last different reading of it (within a lead
    time: a scrape repeats a value between samples) at a rate that empties
    it within ``lead_s``."""
    if not (math.isfinite(waiting) and waiting > 0):
        return False
    for d in reversed(fresh):
        if now - d.time_s > lead_s:
            return False
        if math.isfinite(d.waiting) and d.waiting != waiting and now > d.time_s:
            fall = (d.waiting - waiting) / (now - d.time_s)
            return fall > 0 and waiting / fall <= lead_s
    return False
