"""A decision as data: the answer, its reason, and how long one made without
fresh data may stand (the rule the policy and the serving table share)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from decision.reason import Reason
from decision.settings import ScalerSettings

__all__ = [
    "NO_ANSWER_REASONS",
    "REASONS",
    "Decision",
    "Reason",
    "fresh_at_s",
    "past_fallback",
]

NAN = float("nan")


REASONS: tuple[str, ...] = tuple(r.value for r in Reason if r is not Reason.WARMING_UP)
"""The reasons ``decide`` gives (``warming_up`` is the answer before any step)."""

NO_ANSWER_REASONS = frozenset({Reason.WARMING_UP, Reason.NO_DATA})
"""Reasons that mean "nothing was ever observed" for this object: the scaler
answers KEDA UNAVAILABLE (KEDA keeps the current count, and the HPA holds),
never these decisions' replica numbers."""


@dataclass(frozen=True)
class Decision:
    """The answer plus its explanation.

    ``proposals`` holds each component's own proposal (``queue``,
    ``kv_cache``, ``load``, ``forecast``, ``reactive`` = max of the live
    terms, ``recommendation`` = clamped pre-stabilization value; unknown
    components are absent).
    """

    time_s: float
    replicas: int
    reason: Reason
    proposals: Mapping[str, float] = field(default_factory=dict)
    data_stale: bool = False
    ready_replicas: int = -1
    """Replicas ready in the observation decided on (-1: not observed); the
    next decisions read from it whether replicas asked for are arriving."""
    waiting: float = NAN
    """The queue decided on (NaN: not observed); the next decisions read from
    it whether the queue is draining."""
    data_age_s: float | None = None
    """How long the data had been stale (a stale decision; None when unknown)."""
    no_data_since_s: float | None = None
    """When the run of ``no_data`` answers began, carried from one to the next
    so trimming the history never restarts the fallback timer."""

    def __post_init__(self) -> None:
        if type(self.reason) is not Reason:
            object.__setattr__(self, "reason", Reason(self.reason))


def past_fallback(age_s: float, settings: ScalerSettings) -> bool:
    """Whether an answer held for ``age_s`` without fresh data must give way
    (``fallbackAfterSeconds``): to ``fallbackReplicas`` in the policy, to the
    new decider's answer in the serving table."""
    return age_s >= settings.fallback_after_seconds


def fresh_at_s(decision: Decision, history: Sequence[Decision]) -> float | None:
    """When the data behind ``decision`` was last fresh (None: it is fresh,
    or nothing was ever fresh): the age it records, else the last decision
    in ``history`` made on fresh data."""
    if not decision.data_stale:
        return None
    age = decision.data_age_s
    if age is not None and math.isfinite(age):
        return decision.time_s - age
    fresh = next((d for d in reversed(history) if not d.data_stale), None)
    return None if fresh is None else fresh.time_s
