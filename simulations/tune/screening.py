"""Screen the prescaler side's trials at a cheaper fidelity; confirm the choice at the real one.

Most of a prescaler trial's time is its tracker refitting the forecaster,
every ``--refit-seconds`` (10 minutes) of simulated time over three days of
history. The study's trials run with the tracker refitting every
``StudySpec.screen_refit_s`` instead (30 minutes by default), which moves a
trial's attainment and cost a little and its time a lot
(``docs/decisions/screening-fidelity.md``). A setting is never chosen on
that fidelity alone: the feasible trials, in the order the study would
choose them, are replayed at the scaler's own cadence on the tuning part,
and the first that meets the bar there is the choice, with the figures of
that replay. The KEDA sides have no tracker: their trials run at full
fidelity and nothing is confirmed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.profiles import use_profile
from simulations.report import policy_summary
from simulations.sim_types import SimConfig
from simulations.tune.interrupts import in_processes, interrupt_check
from simulations.tune.manifest import apply_setting
from simulations.tune.search import Score, outcome, score
from simulations.tune.study import StudyResult, TrialRecord, TuneContext, trial_violation
from simulations.tune.tie_break import TieBreak, choose

__all__ = [
    "CONFIRM_LIMIT",
    "Confirmation",
    "Screening",
    "confirm",
    "screened",
]

CONFIRM_LIMIT = 4
"""Distinct feasible settings replayed at most before the side is reported
as having no confirmed choice (the first usually holds)."""


@dataclass(frozen=True)
class Confirmation:
    """One feasible trial replayed at the scaler's cadence on the tuning part."""

    trial: int
    screened_attainment: float
    screened_cost_usd: float
    attainment: float
    cost_usd: float
    meets: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "trial": self.trial,
            "screened_attainment": round(self.screened_attainment, 6),
            "screened_cost_usd": round(self.screened_cost_usd, 4),
            "attainment": round(self.attainment, 6),
            "cost_usd": round(self.cost_usd, 4),
            "meets": self.meets,
        }


@dataclass(frozen=True)
class Screening:
    """How a side's trials were screened and its choice confirmed."""

    refit_s: float
    """The trials' refit interval."""
    scaler_refit_s: float
    """The scaler's, at which the choice was confirmed."""
    confirmed: int | None
    """The chosen trial's number; None when no replayed trial met the bar."""
    confirmations: tuple[Confirmation, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "refit_s": self.refit_s,
            "scaler_refit_s": self.scaler_refit_s,
            "confirmed_trial": self.confirmed,
            "confirmations": [c.as_dict() for c in self.confirmations],
        }


def screened(config: SimConfig, screen_refit_s: float, *, prescaler: bool) -> SimConfig | None:
    """The trials' config when the side is screened (a prescaler trigger, and
    a screening interval longer than the scaler's: a shorter one would cost
    more, not less), else None."""
    if not prescaler or screen_refit_s <= config.refit_interval_s:
        return None
    return dataclasses.replace(config, refit_interval_s=float(screen_refit_s))


def _in_choice_order(
    feasible: Sequence[TrialRecord], space: Sequence[Any], limit: int
) -> list[tuple[TrialRecord, TieBreak | None]]:
    """The first ``limit`` feasible trials in the order the study would
    choose them, each with the tie its choice broke; a trial whose setting
    an earlier one already has is left out (its replay would be the same)."""
    left = list(feasible)
    out: list[tuple[TrialRecord, TieBreak | None]] = []
    while left and len(out) < limit:
        best, tie = choose(left, space)
        assert best is not None
        left.remove(best)
        if all(dict(best.metadata) != dict(t.metadata) for t, _ in out):
            out.append((best, tie))
    return out


def _replay(args: tuple[TuneContext, Mapping[str, str]]) -> Score:
    """A trial's setting run to the end at the context's own config."""
    ctx, metadata = args
    so = apply_setting(ctx.base, metadata, ctx.manifest)
    return score(so, ctx.workload, ctx.profile, ctx.config, history=ctx.history,
                 forecaster=ctx.forecaster, stop=interrupt_check)  # fmt: skip


def confirm(
    study: StudyResult,
    ctx: TuneContext,
    screen_refit_s: float,
    jobs: int = 1,
    limit: int = CONFIRM_LIMIT,
) -> StudyResult:
    """``study`` (screened trials) with its best replaced by the first
    feasible trial, in choice order, that meets ``ctx``'s bar when replayed
    at ``ctx.config`` (the scaler's cadence), carrying that replay's
    figures; ``jobs`` replays at once. Its ``extra["screening"]`` says what
    was replayed; its ``tie_break`` is the choice's only when that was the
    first replayed (a later one was chosen because those before it failed).
    No trial meets it: best None, and closest the best replay."""
    order = _in_choice_order([t for t in study.trials if t.feasible], ctx.space, limit)
    tp = use_profile(ctx.profile).tp
    replays: list[tuple[TrialRecord, Score, tuple[float, ...], bool]] = []
    chosen: int | None = None  # its index in ``replays``
    step = max(1, jobs)
    for lo in range(0, len(order), step):
        batch = order[lo : lo + step]
        scores = in_processes(_replay, [(ctx, t.metadata) for t, _ in batch], jobs)
        for (trial, _), s in zip(batch, scores, strict=True):
            violation, days = trial_violation(ctx, s)
            meets = s.finished and violation <= 0.0
            replays.append((trial, s, days, meets))
            if meets and chosen is None:
                chosen = len(replays) - 1
        if chosen is not None:
            break
    number = None if chosen is None else replays[chosen][0].number
    done = tuple(
        Confirmation(t.number, t.attainment, t.cost_usd, s.attainment, s.cost_usd, meets)
        for t, s, _, meets in replays
    )
    screening = Screening(screen_refit_s, ctx.config.refit_interval_s, number, done)
    extra = {**study.extra, "screening": screening}

    def as_replayed(k: int) -> TrialRecord:
        trial, s, days, _ = replays[k]
        summary = policy_summary(outcome(s), None, tp) if s.finished else None
        return dataclasses.replace(
            trial, attainment=s.attainment, cost_usd=s.cost_usd, summary=summary,
            day_attainment=days, finished=s.finished, feasible=k == chosen,
            stopped=s.stopped,
        )  # fmt: skip

    if chosen is None:
        closest = study.closest
        if replays:
            ranked = [(s.finished, s.attainment) for _, s, _, _ in replays]
            closest = as_replayed(max(range(len(replays)), key=ranked.__getitem__))
        return dataclasses.replace(study, best=None, closest=closest, tie_break=None, extra=extra)
    tie = order[0][1] if chosen == 0 else None
    return dataclasses.replace(study, best=as_replayed(chosen), tie_break=tie, extra=extra)
