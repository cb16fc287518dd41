"""The timing keys' search ranges: searched only wider than the trigger
says (the seasonal wander, a fixed lead time).

Apart from :mod:`simulations.tune.search` because it is one rule about
where a range starts, read from the written trigger and the fleet's cold
start, not how a trial is run or scored.
"""

from __future__ import annotations

import math
from dataclasses import replace

from decision.settings import ScalerSettings
from simulations.tune.search import LEAD_MODE, Param

__all__ = ["FIXED_LEAD_KEY", "MAX_LEAD_S", "WANDER_KEY", "timing_floors"]

WANDER_KEY = "seasonalWanderSeconds"
FIXED_LEAD_KEY = f"{LEAD_MODE}:fixed"
MAX_LEAD_S = 86_400.0
"""The longest ``leadTimeSeconds`` the trigger's parser takes."""


def timing_floors(
    space: tuple[Param, ...], settings: ScalerSettings, start_s: float
) -> tuple[Param, ...]:
    """``space`` with the timing keys searched only wider than written, on a
    grid from the written value (so the first trial, the trigger as written,
    is on it): the wander from the trigger's own (its default when
    unwritten); a fixed lead time from the trigger's fixed value, or with
    ``auto`` from the fleet's stated cold start ``start_s``, up to the space's
    top or twice the floor, whichever is higher. One tuning day shows what a
    narrower window saves on that day, not how far the next day's sessions
    move nor how long its pods take, so narrowing is left to whoever writes
    the trigger. A key whose floor leaves no room is dropped (held as
    written), the lead time's mode with its fixed value."""
    floors = {
        WANDER_KEY: settings.seasonal_wander_seconds,
        FIXED_LEAD_KEY: start_s
        if settings.lead_time_seconds is None
        else settings.lead_time_seconds,
    }
    out: list[Param] = []
    for p in space:
        if p.key not in floors:
            out.append(p)
            continue
        step = p.step or 1.0
        low = float(math.ceil(floors[p.key]))
        top = min(max(p.high, 2 * low), MAX_LEAD_S) if p.key == FIXED_LEAD_KEY else p.high
        high = low + step * math.floor((top - low) / step)
        if high > low:
            out.append(replace(p, low=low, high=high))
    if not any(p.key == FIXED_LEAD_KEY for p in out):
        # no fixed value left to pick: the lead time is held as written
        out = [p for p in out if p.key != LEAD_MODE]
    return tuple(out)
