"""The held-back part: each side's chosen setting, frontier and baseline scored there.

Choosing (the study) and judging the choice out of sample are two jobs:
this re-runs the chosen setting, a few Pareto points and the ScaledObject as
written on the held-back part, and the chosen setting under other arrival seeds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from engine.profile_types import Profile
from simulations.backfill import DemandHistory
from simulations.report import policy_summary
from simulations.sim_inputs import SimInputs
from simulations.simulation import SimConfig
from simulations.traffic import Workload
from simulations.tune.inputs import part_starts
from simulations.tune.interrupts import in_processes, interrupt_check
from simulations.tune.manifest import apply_setting, apply_to_manifest
from simulations.tune.request import TuneRequest
from simulations.tune.search import outcome, pareto_front, score, split_workload
from simulations.tune.sides import Side
from simulations.tune.study import StudyResult

__all__ = [
    "FRONTIER_SIZE",
    "FrontierPoint",
    "SideResult",
    "TuneResult",
    "rescore",
    "seed_runs",
]

FRONTIER_SIZE = 4
"""At most this many of the tuning part's Pareto set are re-scored on the
held-back part (spread along it): the frontier reported."""


@dataclass(frozen=True)
class FrontierPoint:
    """One setting scored on the held-back part."""

    trial: int | None
    """The study's trial (None for the ScaledObject as written)."""
    setting: Mapping[str, str]
    attainment: float
    cost_usd: float
    summary: Mapping[str, Any]


@dataclass(frozen=True)
class SideResult:
    """One side's tune: its study, the chosen setting (None when none met the
    target on the tuning part), and its held-back frontier and baseline."""

    side: Side
    study: StudyResult
    chosen: Any
    """The chosen ScaledObjectSpec (None when no trial met the target)."""
    manifest: Mapping[str, Any] | None
    """The chosen setting's ScaledObject manifest, to paste."""
    tuned: Mapping[str, Any] | None
    """The chosen setting's summary on the tuning part."""
    holdout: Mapping[str, Any] | None
    """The chosen setting's summary on the held-back part."""
    frontier: tuple[FrontierPoint, ...]
    baseline: FrontierPoint
    """The base ScaledObject as written, on the held-back part."""
    study_wall_s: float = math.nan
    """Wall time of the side's study (its trials, in ``--jobs`` processes)."""
    holdout_seeds: tuple[tuple[int, float, float], ...] = ()
    """(arrival seed, attainment, cost) of the chosen setting on the
    held-back part under each of ``holdout_seeds`` seeds, the first the run's own."""


@dataclass(frozen=True)
class TuneResult:
    """What :func:`tune` found; the command reports it."""

    trace: str
    slo_ttft_s: float
    target: float
    target_attainment: tuple[float, float]
    """(tuning part, held-back part): ``target`` x each part's idle ceiling."""
    ceiling: float
    months: tuple[float, float]
    """Each part's span in months (730 h), for per-month costs."""
    sides: tuple[SideResult, ...]
    warnings: tuple[str, ...] = ()
    trial_s: float = math.nan
    held_requests: int = 0
    extra: Mapping[str, Any] = field(default_factory=dict)
    margin: float = 0.0
    """Points above ``target_attainment[0]`` the chosen setting had to reach."""

    def side(self, name: str) -> SideResult | None:
        return next((s for s in self.sides if s.side.name == name), None)


def seed_runs(
    results: list[SideResult],
    others: list[tuple[Workload, Workload | None]],
    request: TuneRequest,
    profile: Profile,
    config: SimConfig,
    inputs: SimInputs,
) -> list[SideResult]:
    """Each side's chosen setting on the held-back part as drawn under the
    other arrival seeds (``others``: the window and the requests before it
    per seed), each part opening with what came before it in that draw: a
    setting chosen by a hair on one draw of arrivals shows here whether it
    holds on another."""
    parts: list[tuple[Workload, SimConfig, DemandHistory | None]] = []
    for window, before in others:
        tune_k, held_k = split_workload(window, request.protocol.holdout)
        st = part_starts(
            before, tune_k, held_k, profile, config, inputs, backfill=request.replay.backfill
        )
        if held_k is not None and st.held is not None:
            parts.append((held_k, st.held_config, st.held.history))
        else:
            parts.append((tune_k, st.tuning_config, st.tuning.history))
    jobs: list[tuple[Any, ...]] = []
    owners: list[tuple[int, int]] = []
    for i, r in enumerate(results):
        if r.chosen is None:
            continue
        prescaler = r.chosen.prescaler_trigger is not None
        for k, (part, cfg, history) in enumerate(parts):
            jobs.append((r.chosen, part, profile, cfg, history if prescaler else None))
            owners.append((i, request.replay.seed + 1 + k))
    runs: dict[int, list[tuple[int, float, float]]] = {}
    scores = in_processes(_score_job, jobs, request.study.jobs)
    for (i, seed), s in zip(owners, scores, strict=True):
        runs.setdefault(i, []).append((seed, s.attainment, s.cost_usd))
    out = list(results)
    for i, r in enumerate(results):
        if r.holdout is not None:
            own = (
                request.replay.seed,
                float(r.holdout["slo_attainment"]),
                float(r.holdout["cost_usd"]),
            )
            out[i] = replace(r, holdout_seeds=(own, *runs.get(i, [])))
    return out


def _score_job(args: tuple[Any, ...]) -> Any:
    """(ScaledObject, workload, profile, config, history) -> its full run's Score."""
    so, workload, profile, config, history = args
    # the Ctrl-C check adds events that change nothing else (score's docstring)
    return score(so, workload, profile, config, history=history, stop=interrupt_check)


def _spread(indices: list[int], k: int) -> list[int]:
    """At most ``k`` of ``indices``, evenly spread, the ends kept."""
    if len(indices) <= k:
        return indices
    picks = {round(i * (len(indices) - 1) / (k - 1)) for i in range(k)}
    return [indices[i] for i in sorted(picks)]


def rescore(
    side: Side,
    study: StudyResult,
    request: TuneRequest,
    profile: Profile | str,
    tp: int,
    configs: tuple[SimConfig, SimConfig],
    tune_part: Workload,
    held: Workload | None,
    tune_history: DemandHistory | None,
    held_history: DemandHistory | None,
) -> SideResult:
    """Re-run the chosen setting on both parts, and the tuning part's Pareto
    set and the base as written on the held-back part. A run asked for twice
    (the chosen setting is usually on the Pareto set; the study's first trial
    is the base) is simulated once, and the chosen setting's tuning-part run
    is its trial's own when the study kept it (a run is deterministic, and the
    stop checks do not change it)."""

    def hist(so: Any, h: DemandHistory | None) -> DemandHistory | None:
        return h if so.prescaler_trigger is not None else None

    part = held if held is not None and len(held) else tune_part
    part_history = held_history if part is held else tune_history
    part_config = configs[1] if part is held else configs[0]
    done = [t for t in study.trials if t.finished and math.isfinite(t.cost_usd)]
    front = [done[i] for i in pareto_front([(t.cost_usd, t.attainment) for t in done])]
    front = [front[i] for i in _spread(list(range(len(front))), FRONTIER_SIZE)]
    chosen = apply_setting(side.base, study.best.metadata, side.manifest) if study.best else None
    specs: list[Any] = []  # the distinct settings run on ``part``, in order

    def on_part(so: Any) -> int:
        for k, have in enumerate(specs):
            if have == so:
                return k
        specs.append(so)
        return len(specs) - 1

    held_of_chosen = on_part(chosen) if chosen is not None else -1
    held_of_base = on_part(side.base)
    held_of_front = [on_part(apply_setting(side.base, t.metadata, side.manifest)) for t in front]
    jobs = [(so, part, profile, part_config, hist(so, part_history)) for so in specs]
    kept_summary = study.best.summary if study.best is not None else None
    if chosen is not None and kept_summary is None:
        jobs.append((chosen, tune_part, profile, configs[0], hist(chosen, tune_history)))
    scores = in_processes(_score_job, jobs, request.study.jobs)

    def summary(s: Any) -> dict[str, Any]:
        return policy_summary(outcome(s), None, tp)

    tuned = holdout = None
    if chosen is not None:
        tuned = dict(kept_summary) if kept_summary is not None else summary(scores[-1])
        holdout = summary(scores[held_of_chosen])
    base_s = scores[held_of_base]
    baseline = FrontierPoint(None, {}, base_s.attainment, base_s.cost_usd, summary(base_s))
    front_scores = [scores[k] for k in held_of_front]
    points = [
        FrontierPoint(t.number, dict(t.metadata), s.attainment, s.cost_usd, summary(s))
        for t, s in zip(front, front_scores, strict=True)
    ]
    kept = pareto_front([(p.cost_usd, p.attainment) for p in points])
    manifest = (
        apply_to_manifest(side.manifest, study.best.metadata) if study.best is not None else None
    )
    return SideResult(
        side, study, chosen, manifest, tuned, holdout, tuple(points[i] for i in kept), baseline
    )
