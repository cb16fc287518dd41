"""When a trial of ``prescaler tune`` is out of the race: the early-stop rules.

Apart from the study because they decide which settings are ever seen
whole, so they are read, tested and measured on their own: exactly (misses
past the target's allowance, or spend past the best's whole cost) and on
pace at rungs (:class:`StopRules`, widened by :class:`PaceEvidence`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from simulations.tune.search import Progress
from simulations.tune.tie_break import TIE_RTOL

__all__ = [
    "COST_PACE_EARLY",
    "COST_PACE_FROM",
    "PACE_FIRST_RUNG",
    "PACE_MIN_FINISHED",
    "SLO_PACE_UNTIL",
    "BestSoFar",
    "PaceEvidence",
    "StopRules",
    "best_so_far",
    "study_pace",
]

PACE_FIRST_RUNG = 1 / 32
"""The rung at which the SLO pace rule allows the full ``slack``."""
SLO_PACE_UNTIL = 0.5
"""The last rung at which the SLO pace rule acts (later, the exact miss
budget judges: attainment so far is then too close to call on pace)."""
COST_PACE_FROM = 0.25
"""The first rung at which the cost pace rule acts."""
COST_PACE_EARLY = 3.0
"""How much wider the cost pace slack is at rungs before 1/2."""
PACE_MIN_FINISHED = 3
"""Finished trials a study needs before its pace rules act: their curves
are the evidence each rule's slack is checked against (:class:`PaceEvidence`)."""


@dataclass(frozen=True)
class BestSoFar:
    """The cheapest feasible finished trial: what later trials must beat."""

    number: int
    cost_usd: float
    curve: Mapping[float, float]
    """Cost spent by each rung (fraction of the requests -> USD)."""


@dataclass(frozen=True)
class PaceEvidence:
    """What the study's finished trials show about pace on this trace and side.

    A pace rule bets that a trial's figures so far say where it ends. The
    fixed slacks were measured on one synthetic day over prescaler's space;
    a side with another dynamic (a reactive trigger behind a cold opening
    fleet) can lie further behind its final attainment at a rung. Every
    finished trial of the study shows by how much, so each rule's slack is
    at least what they show, and neither acts before
    :data:`PACE_MIN_FINISHED` trials finished."""

    finished: int = 0
    shortfall: Mapping[float, float] = field(default_factory=dict)
    """Rung -> the largest (final attainment - attainment so far) of a finished trial."""
    share_ratio: Mapping[float, float] = field(default_factory=dict)
    """Rung -> the widest ratio between two finished trials' shares of their
    whole cost spent by then."""


def study_pace(study: Any) -> tuple[BestSoFar | None, PaceEvidence]:
    """The study's cheapest feasible finished trial and the pace evidence of
    all its finished trials, from the storage (so they include what other
    processes and machines finished meanwhile)."""
    import optuna  # heavy: only a study loads it

    best: BestSoFar | None = None
    finished = 0
    shortfall: dict[float, float] = {}
    shares: dict[float, list[float]] = {}
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        a = t.user_attrs
        if not a.get("finished") or "cost_usd" not in a:
            continue
        cost = float(a["cost_usd"])
        finished += 1
        final = float(a.get("attainment", math.nan))
        for row in a.get("curve", []):
            rung = round(float(row[0]), 9)
            if len(row) > 2 and math.isfinite(final):
                shortfall[rung] = max(shortfall.get(rung, 0.0), final - float(row[2]))
            if cost > 0:
                shares.setdefault(rung, []).append(float(row[1]) / cost)
        if float(a.get("constraint", 1.0)) > 0.0:
            continue
        if best is None or (cost, t.number) < (best.cost_usd, best.number):
            curve = {round(float(row[0]), 9): float(row[1]) for row in a.get("curve", [])}
            best = BestSoFar(t.number, cost, curve)
    ratio = {r: max(v) / min(v) for r, v in shares.items() if min(v) > 0}
    return best, PaceEvidence(finished, shortfall, ratio)


def best_so_far(study: Any) -> BestSoFar | None:
    """The study's cheapest feasible finished trial (:func:`study_pace`)."""
    return study_pace(study)[0]


class PaceBar(Protocol):
    """What the rules read of a trial's context (the study's ``TuneContext``),
    named here so the rules sit below the study that runs them."""

    @property
    def prune(self) -> Literal["pace", "exact"]: ...
    @property
    def target(self) -> float: ...
    def slo_slack(self, fraction: float) -> float: ...
    def cost_pace_slack(self, fraction: float) -> float | None: ...


class StopRules:
    """The early-stop rules one trial runs under (see the module docstring).

    The best feasible trial is re-read at each rung and every ``refresh_s``
    of simulated time, so a trial still running when another process
    finishes a cheaper one is held to the new bar."""

    def __init__(
        self,
        ctx: PaceBar,
        read_best: Callable[[], BestSoFar | None],
        refresh_s: float = 3600.0,
        read_pace: Callable[[], tuple[BestSoFar | None, PaceEvidence]] | None = None,
    ) -> None:
        self._ctx = ctx
        self._read_best = read_best
        self._read_pace = read_pace
        self._refresh_s = refresh_s
        self._next_refresh = -math.inf
        self._best: BestSoFar | None = None
        self._evidence: PaceEvidence | None = None
        self.projected_cost_usd = math.nan
        """For a trial stopped on cost pace: its cost extrapolated from the best's curve."""

    def __call__(self, p: Progress, rung: float | None) -> str | None:
        if rung is not None or p.t_s >= self._next_refresh:
            if self._read_pace is not None:
                self._best, self._evidence = self._read_pace()
            else:
                self._best = self._read_best()
            self._next_refresh = p.t_s + self._refresh_s
        best = self._best
        hours = p.t_s / 3600.0
        if best is not None and p.cost_usd > best.cost_usd * (1.0 + TIE_RTOL):
            return (
                f"cost: ${p.cost_usd:,.2f} spent by hour {hours:.1f}, more than the best "
                f"feasible trial ({best.number}) costs in all (${best.cost_usd:,.2f})"
            )
        ctx = self._ctx
        if rung is None or ctx.prune != "pace":
            return None
        evidence = self._evidence
        if evidence is not None and evidence.finished < PACE_MIN_FINISHED:
            return None
        key = round(rung, 9)
        slo_slack = ctx.slo_slack(rung)
        if evidence is not None:
            slo_slack = max(slo_slack, evidence.shortfall.get(key, math.inf))
        floor = ctx.target - slo_slack
        if rung <= SLO_PACE_UNTIL and p.running_attainment < floor:
            return (
                f"slo pace: attainment {100 * p.running_attainment:.2f} % after "
                f"{100 * rung:.1f} % of the requests, below {100 * floor:.2f} %"
            )
        ref = best.curve.get(key) if best is not None else None
        allow = ctx.cost_pace_slack(rung)
        if allow is not None and evidence is not None:
            allow = max(allow, evidence.share_ratio.get(key, math.inf) - 1.0)
        if best is not None and ref and allow is not None and p.cost_usd > (1.0 + allow) * ref:
            self.projected_cost_usd = best.cost_usd * p.cost_usd / ref
            return (
                f"cost pace: ${p.cost_usd:,.2f} spent after {100 * rung:.1f} % of the "
                f"requests, {p.cost_usd / ref - 1:.0%} more than the best feasible "
                f"trial ({best.number}) had spent there"
            )
        return None
