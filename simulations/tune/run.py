"""``prescaler tune`` as a library call: typed request in, typed result out.

:func:`tune` loads the trace (a file, or built from Prometheus), checks it
holds enough history for the protocol (:func:`check_history`), splits it,
and tunes every side (:mod:`simulations.tune.sides`) with the same optimizer
(optuna TPE), the same trial budget and the same out-of-sample protocol:
tune on the first part, score on the held-back rest. For each side it
re-scores the tuning part's Pareto set on the held-back part (the frontier),
the chosen setting and the ScaledObject as the user wrote it (the
baseline). The command (:mod:`simulations.tune.cli`) prints, writes and
picks the exit status; this module prints only progress lines to ``out``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import socket
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

import numpy as np

from simulations.tune.held_back import FRONTIER_SIZE, FrontierPoint, SideResult
from simulations.tune.storage import GRACE_S

if TYPE_CHECKING:
    from engine.profile_types import Profile
    from simulations.backfill import DemandHistory
    from simulations.sim_inputs import SimInputs
    from simulations.simulation import SimConfig
    from simulations.traffic import Workload
    from simulations.tune.sides import Side, WrittenCron
    from simulations.tune.study import StudyResult

__all__ = [
    "DEFAULT_TARGET",
    "FRONTIER_SIZE",
    "MIN_PART_S",
    "WARN_TUNING_S",
    "FrontierPoint",
    "SideResult",
    "TuneRequest",
    "TuneResult",
    "check_history",
    "default_storage",
    "tune",
]

DEFAULT_TARGET = 0.95
"""The default ``--target``: 95 % of what an idle fleet attains. A held-back
day's burst that no setting tuned on the day before anticipates costs a few
tenths of a percent, so 0.99 of the ceiling is often out of reach on the
held-back part of a real history; 0.95 is met by a typical one."""

MIN_PART_S = 300.0
"""Each part (tuning, held back) must span at least this: the HPA's default
scale-down stabilization window and KEDA's default ``cooldownPeriod`` are
both 300 s, so a shorter part cannot show one scale-in decision, and its
score says nothing about the settings that govern them."""

WARN_TUNING_S = 86400.0
"""A tuning part shorter than a day cannot show the daily cycle the forecast
learns and the floor must cover: tune warns below it."""


def default_storage() -> str:
    """The study storage without ``--storage``: a SQLite file in the user's
    cache directory (``$XDG_CACHE_HOME/prescaler/tune.db``, else
    ``~/.cache/...``), outside any work tree, so a run never leaves a file in
    a repository; a killed run resumes from it."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    path = Path(root) / "prescaler" / "tune.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


@dataclass(frozen=True)
class TuneRequest:
    """Everything a tune was asked for, validated by the command."""

    trace: str | None
    profile: str
    slo_ttft_s: float = 1.0
    timeout_s: float = 60.0
    target: float = DEFAULT_TARGET
    margin: float = 0.0
    """Points of attainment the chosen setting must clear the target by on
    the tuning part: the study's bar is the target plus this."""
    holdout_seeds: int = 1
    """Arrival seeds (``seed``, ``seed + 1``, ...) each side's chosen setting
    is scored under on the held-back part (the command's default is 3)."""
    trials: int = 100
    holdout: float = 0.3
    jobs: int = 1
    seed: int = 0
    tokens_from: str | None = None
    rate_scale: float = 1.0
    start_s: float = 0.0
    duration_s: float | None = None
    arrivals: Literal["poisson", "gamma"] = "poisson"
    cv: float = 1.0
    forecaster: str | None = None
    spot: bool = False
    scrape_interval_s: float = 15.0
    rate_window_s: float = 120.0
    backfill: bool = True
    scaledobject: str | None = None
    storage: str | None = None
    study: str | None = None
    trial_grace_s: int = GRACE_S
    """Seconds a trial's heartbeat may be silent before its process counts as
    dead and the trial is failed and run again."""
    prune: Literal["pace", "exact"] = "pace"
    prometheus: str | None = None
    selector: str = ""
    since: str = "7d"
    step_s: float = 60.0
    save_trace: str | None = None
    short_history: Literal["refuse", "warn"] = "refuse"
    """What a part shorter than :data:`MIN_PART_S` gets."""
    model: str | None = None
    scaler_address: str | None = None
    prometheus_address: str | None = None
    name: str | None = None
    """The printed ScaledObject's ``metadata.name`` (else ``--scaledobject``'s)."""
    namespace: str | None = None
    """Its ``metadata.namespace``: the vLLM Deployment's (else ``--scaledobject``'s)."""
    target_name: str | None = None
    """Its ``scaleTargetRef.name``, the vLLM Deployment (else ``--scaledobject``'s)."""
    inputs: SimInputs | None = None
    """Bound, capacity belief, lead time (:mod:`simulations.sim_inputs`); None: defaults."""
    sides: tuple[str, ...] = ()
    """The sides to tune (:data:`simulations.tune.sides.SIDES`); empty: the default set."""
    prescaler_fixed: tuple[tuple[str, str], ...] = ()
    """Prescaler trigger keys held at a value rather than searched, e.g.
    ``(("prewarm", "false"),)``; ``forecaster`` is one more."""
    cron_window: WrittenCron | None = None
    """Every cron side's window as written (``keda-queue-kv-cron``,
    ``keda-gateway-cron``, ``prescaler-cron``): the hours the
    team knows its ramp comes in and the replicas it holds there, so the
    baseline starts where its engineer would; None: 2 replicas from 08:00
    to 18:00."""


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


def check_history(
    tune_s: float, held_s: float, holdout: float, mode: Literal["refuse", "warn"]
) -> list[str]:
    """The protocol's history check: a part shorter than :data:`MIN_PART_S`
    is refused (``ValueError``) or, with ``mode`` "warn", warned about; a
    tuning part shorter than :data:`WARN_TUNING_S` is warned about."""
    notes: list[str] = []
    short = [(n, s) for n, s in (("tuning", tune_s), ("held-back", held_s)) if s < MIN_PART_S]
    if holdout == 0.0:
        short = [(n, s) for n, s in short if n == "tuning"]
    for name, span in short:
        msg = (
            f"the {name} part spans {span / 60:.1f} minutes; the protocol needs at least "
            f"{MIN_PART_S / 60:.0f} minutes in each part (one scale-in decision), and a day "
            "to tune on plus a held-back part to score on is what it is built for"
        )
        if mode == "refuse":
            raise ValueError(f"{msg}: give a longer history (--since, a longer trace)")
        notes.append(msg)
    if tune_s < WARN_TUNING_S and not short:
        notes.append(
            f"the tuning part spans {tune_s / 3600:.1f} h, less than a day: the chosen "
            "setting has not seen the daily cycle; give a week (--since 7d) if you have it"
        )
    return notes


# --------------------------------------------------------------------------
def tune(request: TuneRequest, out: TextIO) -> TuneResult:
    """Load, check, tune every side, re-score on the held-back part."""
    import forecasting.filters
    import simulations.router
    from engine.profiles import use_profile
    from prescaler_native.loader import compiled_warning
    from simulations.report import HOURS_PER_MONTH
    from simulations.sim_types import replay_config
    from simulations.tune.held_back import rescore, seed_runs
    from simulations.tune.search import slo_ceiling, split_workload
    from simulations.tune.sides import make_sides

    wall0 = time.perf_counter()
    # read once (a file too) and handed down as the object; the triggers that
    # name it find it by its name in this process and in each worker
    profile = use_profile(request.profile)
    workload, before, others = _load(request, out)
    tune_part, held = split_workload(workload, request.holdout)
    held_s = 0.0 if held is None else held.duration_s
    warnings = check_history(tune_part.duration_s, held_s, request.holdout, request.short_history)
    if (note := compiled_warning((simulations.router, forecasting.filters))) is not None:
        warnings.append(note)
    if len(tune_part) == 0:
        raise ValueError(f"{workload.name}: the tuning part holds no requests")
    config = replay_config(request)
    from simulations.sim_inputs import SimInputs
    from simulations.tune.inputs import part_starts

    inputs = request.inputs or SimInputs()
    config = inputs.apply(config, profile, None)
    open_config = config
    starts = part_starts(
        before, tune_part, held, profile, config, inputs, backfill=request.backfill
    )
    config, held_config = starts.tuning_config, starts.held_config
    tune_history = starts.tuning.history
    held_history = None if starts.held is None else starts.held.history
    ceiling = slo_ceiling(tune_part, profile, config.slo_ttft_s)
    target = request.target * ceiling
    bar = min(1.0, target + request.margin / 100.0)
    held_target = target
    if held is not None and len(held):
        held_target = request.target * slo_ceiling(held, profile, config.slo_ttft_s)
    sides = make_sides(request, profile, inputs.max_replicas)
    storage = request.storage or default_storage()
    tune_months = tune_part.duration_s / 3600 / HOURS_PER_MONTH
    print(f"{workload.name}: tuning on {len(tune_part):,} requests "
          f"({tune_part.duration_s / 3600:.2f} h), holding back "
          f"{0 if held is None else len(held):,} ({request.holdout:.0%}); "
          f"studies in {storage}", file=out)  # fmt: skip
    print(f"tracker history: {_history_note(tune_history)} before the tuning part, "
          f"{_history_note(held_history) if held is not None else '-'} before the held-back "
          f"part{' (--no-backfill)' if not request.backfill else ''}; replicas as each "
          f"opens: {config.initial_replicas} (tuning part), "
          f"{held_config.initial_replicas if starts.held is not None else '-'} (held-back part)",
          file=out)  # fmt: skip
    print(f"SLO: TTFT <= {config.slo_ttft_s:g} s for {100 * target:.2f} % of requests "
          f"({request.target:g} x the {100 * ceiling:.2f} % an idle fleet attains)"
          + (f"; chosen only at {100 * bar:.2f} % or more on the tuning part (--margin "
             f"{request.margin:g})" if request.margin else ""), file=out)  # fmt: skip
    for note in warnings:
        print(f"warning: {note}", file=out)
    results: list[SideResult] = []
    n_trials = 0
    started: list[tuple[Side, str]] = []
    try:
        for side in sides:
            side0 = time.perf_counter()
            study = _run_side(
                side, request, profile, workload, tune_part, config, bar, tune_history, storage,
                started,
            )  # fmt: skip
            study_s = time.perf_counter() - side0
            n_trials += len(study.trials)
            chose = f"chosen trial {study.best.number}" if study.best else "none met the target"
            print(f"{side.name}: {len(study.trials)} trials in {study_s:.0f} s "
                  f"of wall time ({request.jobs} processes), {chose}", file=out)  # fmt: skip
            scored = rescore(side, study, request, profile, profile.tp, (config, held_config),
                              tune_part, held, tune_history, held_history)  # fmt: skip
            results.append(replace(scored, study_wall_s=study_s))
        results = seed_runs(results, others, request, profile, open_config, inputs)
        bound = _hindsight(request, profile, held or tune_part, held_config, held_target, inputs)
    except KeyboardInterrupt:
        from simulations.tune.interrupted import SoFar, TuneInterrupted

        so_far = SoFar(
            trace=workload.name, slo_ttft_s=config.slo_ttft_s, target=request.target, bar=bar,
            months=tune_months, storage=storage,
            sides=tuple((side, _read_back(storage, name)) for side, name in started),
        )  # fmt: skip
        raise TuneInterrupted(so_far) from None
    months = (tune_months, (held_s or tune_part.duration_s) / 3600 / HOURS_PER_MONTH)
    return TuneResult(
        trace=workload.name,
        slo_ttft_s=config.slo_ttft_s,
        target=request.target,
        target_attainment=(target, held_target),
        ceiling=ceiling,
        months=months,
        sides=tuple(results),
        warnings=tuple(warnings),
        trial_s=(time.perf_counter() - wall0) / max(1, n_trials),
        held_requests=0 if held is None else len(held),
        margin=request.margin,
        extra={"hindsight": bound},
    )


def _hindsight(
    request: TuneRequest,
    profile: Profile,
    part: Workload,
    config: SimConfig,
    target: float,
    inputs: SimInputs,
) -> dict[str, Any]:
    """The hindsight schedule on the part the sides are scored on (the
    held-back one), at its target: the bound the report measures them by."""
    from simulations.hindsight_run import bound_pair, bound_summary

    stated, instant = bound_pair(part, profile, config, target, max_replicas=inputs.max_replicas)
    return bound_summary(stated, instant, request.target)


def _load(
    request: TuneRequest, out: TextIO
) -> tuple[Workload, Workload | None, list[tuple[Workload, Workload | None]]]:
    """The workload and the requests before it (:func:`simulations.tune.inputs.requests_before`),
    then the same for each further arrival seed of ``holdout_seeds``, from
    TRACE or Prometheus (read before a temporary trace's files go)."""
    from simulations.traffic import TrafficOptions, load_workload
    from simulations.tune.inputs import requests_before

    trace, tokens_from = request.trace, request.tokens_from
    tmp: tempfile.TemporaryDirectory[str] | None = None
    if request.prometheus:
        if trace is not None:
            raise ValueError("give TRACE or --prometheus, not both")
        from simulations.fleet_prometheus import fetch_fleet_trace, parse_since, write_fleet_trace
        from simulations.fleet_trace import parse_labels

        fleet = fetch_fleet_trace(
            request.prometheus,
            parse_labels(request.selector),
            since_s=parse_since(request.since),
            end_s=time.time(),
            step_s=request.step_s,
            seed=request.seed,
        )
        if request.save_trace:
            directory = Path(request.save_trace)
        else:
            tmp = tempfile.TemporaryDirectory(prefix="prescaler-fleet-")
            directory = Path(tmp.name)
        counts, tokens = write_fleet_trace(fleet, directory, "fleet")
        trace, tokens_from = str(counts), str(tokens)
        print(f"fleet trace: {fleet.minutes} minutes, {fleet.requests:,.0f} requests "
              f"from {request.prometheus}", file=out)  # fmt: skip
    elif trace is None:
        raise ValueError("a TRACE (or --prometheus URL) is required")
    try:
        traffic = TrafficOptions(
            rate_scale=request.rate_scale,
            start_s=request.start_s,
            duration_s=request.duration_s,
            seed=request.seed,
            arrivals=request.arrivals,
            cv=request.cv,
            tokens_from=Path(tokens_from) if tokens_from else None,
        )
        workload = load_workload(trace, traffic)
        before = requests_before(trace, traffic) if len(workload) else None
        others = []
        for k in range(1, request.holdout_seeds if len(workload) else 1):
            draw = dataclasses.replace(traffic, seed=request.seed + k)
            other = load_workload(trace, draw)
            if _same_requests(other, workload):
                break  # a per-request trace replays its own arrivals under any seed
            others.append((other, requests_before(trace, draw)))
    finally:
        if tmp is not None:
            tmp.cleanup()
    if len(workload) == 0:
        raise ValueError(f"{trace}: no requests in the selected window")
    return workload, before, others


def _same_requests(a: Workload, b: Workload) -> bool:
    """Whether two draws hold the same requests: a per-request trace replays
    its recorded arrivals and lengths under any seed, and another seed's
    held-back run would only repeat the first."""
    return all(
        np.array_equal(x, y)
        for x, y in (
            (a.arrival_s, b.arrival_s),
            (a.prompt_tokens, b.prompt_tokens),
            (a.output_tokens, b.output_tokens),
        )
    )


def _history_note(history: DemandHistory | None) -> str:
    if history is None or len(history) == 0:
        return "none"
    span = float(history.times_s[-1] - history.times_s[0]) + (
        float(history.times_s[1] - history.times_s[0]) if len(history) > 1 else 0.0
    )
    return f"{span / 3600:.2f} h"


def _digest(*arrays: Any) -> str:
    import hashlib

    h = hashlib.sha256()
    for arr in arrays:
        h.update(arr.tobytes() if hasattr(arr, "tobytes") else repr(arr).encode())
    return h.hexdigest()[:16]


def _read_back(storage: str, name: str) -> StudyResult:
    """What the study ``name`` holds now (every trial it finished); none
    when it cannot be read (a stopped tune still says what it can)."""
    import optuna

    from simulations.tune.study import StudyResult, open_storage, read_study

    try:
        study = optuna.load_study(study_name=name, storage=open_storage(storage))
        return read_study(study, storage, name)
    except Exception:  # the storage itself failed: report no trials, not a traceback
        return StudyResult((), None, None, name, storage)


def _profile_key(given: str, profile: Profile) -> str:
    """What a study's fingerprint records of the profile: the name as given
    (as before files were taken), or for a file its name and figures, so
    the same file at another path joins the study and a refitted one does not."""
    from engine.profiles import is_profile_path

    if not is_profile_path(given):
        return given
    return f"{profile.name} {_digest(repr(dataclasses.replace(profile, notes='')))}"


def _run_side(
    side: Side,
    request: TuneRequest,
    profile: Profile,
    workload: Workload,
    tune_part: Workload,
    config: SimConfig,
    target: float,
    history: DemandHistory | None,
    storage: str,
    started: list[tuple[Side, str]] | None = None,
) -> StudyResult:
    """Run (or resume) ``side``'s study; its name goes into ``started`` first,
    so a stopped tune can read back what the study holds."""
    from simulations.tune.study import TuneContext, run_study, study_fingerprint

    ctx = TuneContext(
        tune_part, profile, config, side.base, target, side.space,
        max_replicas=side.max_replicas, seed=request.seed, prune=request.prune,
        manifest=side.manifest,
        history=history if side.base.prescaler_trigger is not None else None,
    )  # fmt: skip
    parts: dict[str, Any] = {
        # the requests themselves, not the path: the same trace at another
        # path joins the study, another window does not
        "requests": _digest(workload.arrival_s, workload.prompt_tokens, workload.output_tokens,
                            workload.duration_s),
        "profile": _profile_key(request.profile, profile), "config": repr(config),
        "target": request.target,
        "holdout": request.holdout, "side": side.name, "base": repr(side.base),
        "space": repr(side.space),
    }  # fmt: skip
    if ctx.history is not None:
        parts["history"] = _digest(ctx.history.times_s, ctx.history.requests_per_s)
    if request.margin:
        # the bar each trial's constraint was scored against (absent at 0: a
        # study started before the margin existed is joined as it was)
        parts["margin"] = request.margin
    fingerprint = study_fingerprint(parts)
    prefix = request.study or "prescaler-tune"
    name = f"{prefix}-{side.name}" if request.study else f"{prefix}-{side.name}-{fingerprint}"
    if started is not None:
        started.append((side, name))
    return run_study(
        ctx, storage=storage, study_name=name, n_trials=request.trials, jobs=request.jobs,
        fingerprint=fingerprint, worker=f"{socket.gethostname()}:{os.getpid()}",
        grace_s=request.trial_grace_s,
    )  # fmt: skip
