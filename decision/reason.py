"""Why a decision says what it says, as a name of its own: the doctor's pure
checks read these strings without the settings parser ``decision.answer``
pulls in."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Reason"]


class Reason(StrEnum):
    """Why a decision says what it says (the ``reason`` label of
    ``prescaler_decisions_total``); a member equals its string."""

    QUEUE = "queue"
    KV_CACHE = "kv_cache"
    LOAD = "load"
    FORECAST = "forecast"
    IDLE = "idle"
    MIN_REPLICAS = "min_replicas"
    MAX_REPLICAS = "max_replicas"
    SCALE_DOWN_HOLD = "scale_down_hold"
    PARTIAL_HOLD = "partial_hold"
    STALE_HOLD = "stale_hold"
    FALLBACK = "fallback"
    NO_DATA = "no_data"
    WAKE = "wake"
    STARTING_HOLD = "starting_hold"
    DRAINING_HOLD = "draining_hold"
    WARMING_UP = "warming_up"
