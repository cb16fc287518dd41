"""Which of several equally cheap feasible trials a study chooses.

On a tuning day where the floor carries the day every threshold costs the
same, and TPE's first pick among equals is arbitrary; a busier day then
finds out how slowly it reacts. Among trials that tie on cost the one that
reacts most to rising demand (lowest thresholds, shortest scale-up waits,
largest scale-up steps: :attr:`Param.reacts`) is the one a careful engineer
would deploy, so it is the one chosen. Scale-in waits have no direction: the
shortest is not the most reactive but the flappiest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from simulations.tune.search import Param

__all__ = ["TIE_RTOL", "TIE_RULE", "TieBreak", "choose", "reactivity"]

TIE_RTOL = 1e-6
"""Relative cost difference within which two feasible trials tie: trials
whose fleet never left the floor cost the same to the last bits, and any
that scaled even once differ by far more than this."""

TIE_RULE = (
    f"feasible trials whose cost is within a relative {TIE_RTOL:g} of the cheapest tie; "
    "among them the one that reacts most (lowest thresholds, shortest scale-up waits, "
    "largest scale-up steps, by the mean position in each such key's range), then "
    "the lowest trial number"
)
"""The rule as the ``--json`` ``tie_break`` object states it."""


@dataclass(frozen=True)
class TieBreak:
    """A choice made among trials that tied on cost."""

    tied: int
    """Feasible trials tied with the chosen one (it not counted)."""
    rule: str = TIE_RULE

    def as_dict(self) -> dict[str, object]:
        return {"tied": self.tied, "rule": self.rule}


class _Trial(Protocol):
    @property
    def number(self) -> int: ...
    @property
    def cost_usd(self) -> float: ...
    @property
    def metadata(self) -> Mapping[str, str]: ...


T = TypeVar("T", bound=_Trial)


def _position(p: Param, raw: str) -> float | None:
    """Where ``raw`` lies in ``p``'s range, 0 at its most reactive end, 1 at
    the other (None when ``p`` has no direction or ``raw`` is not on it)."""
    if p.reacts is None:
        return None
    try:
        x = float(raw)
    except ValueError:
        return None
    if p.kind == "choice":
        values = sorted(float(c) for c in p.choices)
        low, high = values[0], values[-1]
    else:
        low, high = p.low, p.high
    if not (math.isfinite(x) and high > low):
        return None
    share = min(1.0, max(0.0, (x - low) / (high - low)))
    return share if p.reacts == "low" else 1.0 - share


def reactivity(metadata: Mapping[str, str], space: Sequence[Param]) -> float:
    """The mean position of a setting's directed keys in their ranges, 0
    the most reactive; 0.5 when it sets none (nothing to tell it by)."""
    found = [
        pos
        for p in space
        if p.key in metadata and (pos := _position(p, metadata[p.key])) is not None
    ]
    return sum(found) / len(found) if found else 0.5


def choose(
    feasible: Sequence[T], space: Sequence[Param], rtol: float = TIE_RTOL
) -> tuple[T | None, TieBreak | None]:
    """The cheapest feasible trial, the most reactive of those tied with it
    on cost (:data:`TIE_RULE`), and the tie when there was one. Without a
    directed key in ``space`` there is nothing to break a tie by: the
    cheapest, then the lowest trial number, and no tie reported."""
    if not feasible:
        return None, None
    if not any(p.reacts is not None for p in space):
        return min(feasible, key=lambda t: (t.cost_usd, t.number)), None
    cheapest = min(t.cost_usd for t in feasible)
    tol = rtol * abs(cheapest)
    tied = [t for t in feasible if t.cost_usd - cheapest <= tol]
    if len(tied) == 1:
        return tied[0], None

    def key(t: T) -> tuple[float, int]:
        return reactivity(t.metadata, space), t.number

    return min(tied, key=key), TieBreak(len(tied) - 1)
