"""``prescaler tune`` as a library call: a request in, a result out, no printing.

Every side is tuned with the same optimizer, trial budget and protocol:
tuned on the first part of the trace, scored on the held-back rest. What the
command shows while it runs comes to ``on_event`` as data (:data:`TuneEvent`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import numpy as np

import forecasting.filters
import simulations.router
from engine.profile_types import Profile
from engine.profiles import is_profile_path, use_profile
from prescaler_native.loader import compiled_warning
from simulations.backfill import DemandHistory
from simulations.fleet_prometheus import fetch_fleet_trace, parse_since, write_fleet_trace
from simulations.fleet_trace import parse_labels
from simulations.hindsight_run import (
    bound_summary,
    hindsight_bound,
    instant_no_dearer,
    pair_configs,
)
from simulations.policies import REFIT_S
from simulations.report import HOURS_PER_MONTH
from simulations.sim_inputs import SimInputs
from simulations.sim_types import replay_config
from simulations.simulation import SimConfig
from simulations.traffic import Workload, load_workload
from simulations.tune.held_back import (
    FRONTIER_SIZE,
    FrontierPoint,
    SideResult,
    TuneResult,
    rescore,
    seed_runs,
)
from simulations.tune.inputs import part_starts, requests_before
from simulations.tune.interrupted import SoFar, TuneInterrupted
from simulations.tune.interrupts import in_processes, raise_if_interrupted
from simulations.tune.request import DEFAULT_TARGET, TuneRequest
from simulations.tune.screening import confirm, screened
from simulations.tune.search import Param, slo_ceiling, split_workload
from simulations.tune.sides import Side, make_sides
from simulations.tune.study import (
    StudyResult,
    TuneContext,
    open_storage,
    read_study,
    run_study,
    study_fingerprint,
)

__all__ = [
    "DEFAULT_TARGET",
    "FRONTIER_SIZE",
    "MIN_PART_S",
    "WARN_TUNING_S",
    "FleetFetched",
    "FrontierPoint",
    "SideDone",
    "SideResult",
    "TuneEvent",
    "TuneResult",
    "TuneStart",
    "check_history",
    "default_storage",
    "tune",
]

MIN_PART_S = 300.0
"""Each part must span at least this: the HPA's scale-down stabilization and
KEDA's ``cooldownPeriod`` both default to 300 s, so a shorter part cannot
show one scale-in decision."""

WARN_TUNING_S = 86400.0
"""A tuning part shorter than a day has not seen the daily cycle: warned about."""


def default_storage() -> str:
    """The study storage without ``--storage``: a SQLite file in the user's
    cache directory, outside any work tree; a killed run resumes from it."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    path = Path(root) / "prescaler" / "tune.db"
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


@dataclass(frozen=True)
class FleetFetched:
    """The trace was built from Prometheus."""

    minutes: int
    requests: float
    url: str


@dataclass(frozen=True)
class TuneStart:
    """What the run is about to tune on, before the first study starts."""

    trace: str
    tune_requests: int
    tune_s: float
    held_requests: int | None
    """None: no held-back part."""
    holdout: float
    storage: str
    tune_history: DemandHistory | None
    held_history: DemandHistory | None
    backfill: bool
    initial_replicas: tuple[int | None, int | None]
    """Replicas as each part opens (None: no held-back part)."""
    slo_ttft_s: float
    target: float
    """The attainment to meet on the tuning part: ``fraction`` x ``ceiling``."""
    fraction: float
    ceiling: float
    margin: float
    bar: float
    warnings: tuple[str, ...]


@dataclass(frozen=True)
class SideDone:
    """One side's study finished."""

    name: str
    trials: int
    wall_s: float
    jobs: int
    chosen: int | None


TuneEvent = FleetFetched | TuneStart | SideDone
"""What :func:`tune` tells ``on_event`` as it goes."""


def check_history(
    tune_s: float, held_s: float, holdout: float, mode: Literal["refuse", "warn"]
) -> list[str]:
    """A part shorter than :data:`MIN_PART_S` is refused (``ValueError``) or,
    in mode "warn", warned about; a tuning part under a day is warned about."""
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


def _ignore(event: TuneEvent) -> None:
    """The default ``on_event``: a library call tells no one."""


def tune(request: TuneRequest, on_event: Callable[[TuneEvent], None] = _ignore) -> TuneResult:
    """Load, check, tune every side, re-score on the held-back part."""
    request.source.check()
    replay, protocol = request.replay, request.protocol
    wall0 = time.perf_counter()
    # read once (a file too) and handed down as the object; the triggers that
    # name it find it by its name in this process and in each worker
    profile = use_profile(replay.profile)
    workload, before, others = _load(request, on_event)
    tune_part, held = split_workload(workload, protocol.holdout)
    held_s = 0.0 if held is None else held.duration_s
    warnings = check_history(tune_part.duration_s, held_s, protocol.holdout, protocol.short_history)
    if (note := compiled_warning((simulations.router, forecasting.filters))) is not None:
        warnings.append(note)
    if len(tune_part) == 0:
        raise ValueError(f"{workload.name}: the tuning part holds no requests")
    inputs = replay.inputs or SimInputs()
    open_config = inputs.apply(replay_config(replay), profile, None)
    starts = part_starts(
        before, tune_part, held, profile, open_config, inputs, backfill=replay.backfill
    )
    config, held_config = starts.tuning_config, starts.held_config
    tune_history = starts.tuning.history
    held_history = None if starts.held is None else starts.held.history
    ceiling = slo_ceiling(tune_part, profile, config.slo_ttft_s)
    target = protocol.target * ceiling
    bar = min(1.0, target + protocol.margin / 100.0)
    held_target = target
    if held is not None and len(held):
        held_target = protocol.target * slo_ceiling(held, profile, config.slo_ttft_s)
    sides = make_sides(request, profile, inputs.max_replicas)
    storage = request.study.storage or default_storage()
    tune_months = tune_part.duration_s / 3600 / HOURS_PER_MONTH
    on_event(TuneStart(
        trace=workload.name, tune_requests=len(tune_part), tune_s=tune_part.duration_s,
        held_requests=None if held is None else len(held), holdout=protocol.holdout,
        storage=storage, tune_history=tune_history,
        held_history=held_history if held is not None else None, backfill=replay.backfill,
        initial_replicas=(config.initial_replicas,
                          held_config.initial_replicas if starts.held is not None else None),
        slo_ttft_s=config.slo_ttft_s, target=target, fraction=protocol.target, ceiling=ceiling,
        margin=protocol.margin, bar=bar, warnings=tuple(warnings),
    ))  # fmt: skip
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
            on_event(SideDone(side.name, len(study.trials), study_s, request.study.jobs,
                              study.best.number if study.best else None))  # fmt: skip
            scored = rescore(side, study, request, profile, profile.tp, (config, held_config),
                              tune_part, held, tune_history, held_history)  # fmt: skip
            results.append(replace(scored, study_wall_s=study_s))
        results = seed_runs(results, others, request, profile, open_config, inputs)
        bound = _hindsight(request, profile, held or tune_part, held_config, held_target, inputs)
    except KeyboardInterrupt:
        so_far = SoFar(
            trace=workload.name, slo_ttft_s=config.slo_ttft_s, target=protocol.target, bar=bar,
            months=tune_months, storage=storage,
            sides=tuple((side, _read_back(storage, name, side.space)) for side, name in started),
        )  # fmt: skip
        raise TuneInterrupted(so_far) from None
    months = (tune_months, (held_s or tune_part.duration_s) / 3600 / HOURS_PER_MONTH)
    return TuneResult(
        trace=workload.name,
        slo_ttft_s=config.slo_ttft_s,
        target=protocol.target,
        target_attainment=(target, held_target),
        ceiling=ceiling,
        months=months,
        sides=tuple(results),
        warnings=tuple(warnings),
        trial_s=(time.perf_counter() - wall0) / max(1, n_trials),
        held_requests=0 if held is None else len(held),
        margin=protocol.margin,
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
    jobs = [(part, profile, c, target, inputs.max_replicas) for c in pair_configs(config)]
    stated, instant = in_processes(_bound_job, jobs, request.study.jobs)
    instant = instant_no_dearer(stated, instant, part, profile, config, target)
    return bound_summary(stated, instant, request.protocol.target)


def _bound_job(args: tuple[Workload, Profile, SimConfig, float, int | None]) -> Any:
    """One bound of the pair, in a worker (the two are independent); Ctrl-C
    ends it within a minute of simulated time, as it ends a trial."""
    part, profile, config, target, max_replicas = args
    return hindsight_bound(
        part, profile, config, target, max_replicas=max_replicas, stop=raise_if_interrupted
    )


def _load(
    request: TuneRequest, on_event: Callable[[TuneEvent], None]
) -> tuple[Workload, Workload | None, list[tuple[Workload, Workload | None]]]:
    """The workload and the requests before it (:func:`simulations.tune.inputs.requests_before`),
    then the same for each further arrival seed of ``holdout_seeds``, from
    TRACE or Prometheus (read before a temporary trace's files go)."""
    source, replay = request.source, request.replay
    trace, tokens_from = source.trace, replay.tokens_from
    tmp: tempfile.TemporaryDirectory[str] | None = None
    if source.prometheus:
        fleet = fetch_fleet_trace(
            source.prometheus,
            parse_labels(source.selector),
            since_s=parse_since(source.since),
            end_s=time.time(),
            step_s=source.step_s,
            seed=replay.seed,
        )
        if source.save_trace:
            directory = Path(source.save_trace)
        else:
            tmp = tempfile.TemporaryDirectory(prefix="prescaler-fleet-")
            directory = Path(tmp.name)
        counts, tokens = write_fleet_trace(fleet, directory, "fleet")
        trace, tokens_from = str(counts), str(tokens)
        on_event(FleetFetched(fleet.minutes, fleet.requests, source.prometheus))
    assert trace is not None, "TraceSource.check: a trace or Prometheus"
    try:
        traffic = replay.traffic(tokens_from)
        workload = load_workload(trace, traffic)
        before = requests_before(trace, traffic) if len(workload) else None
        others = []
        for k in range(1, request.protocol.holdout_seeds if len(workload) else 1):
            draw = dataclasses.replace(traffic, seed=replay.seed + k)
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


def _digest(*arrays: Any) -> str:
    h = hashlib.sha256()
    for arr in arrays:
        h.update(arr.tobytes() if hasattr(arr, "tobytes") else repr(arr).encode())
    return h.hexdigest()[:16]


def _read_back(storage: str, name: str, space: tuple[Param, ...] = ()) -> StudyResult:
    """What the study ``name`` holds now (every trial it finished); none
    when it cannot be read (a stopped tune still says what it can)."""
    import optuna  # heavy: loaded only when a stopped tune reads its studies back

    try:
        study = optuna.load_study(study_name=name, storage=open_storage(storage))
        return read_study(study, storage, name, space)
    except Exception:  # the storage itself failed: report no trials, not a traceback
        return StudyResult((), None, None, name, storage)


def _profile_key(given: str, profile: Profile) -> str:
    """What a study's fingerprint records of the profile: the name as given
    (as before files were taken), or for a file its name and figures, so
    the same file at another path joins the study and a refitted one does not."""
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
    so a stopped tune can read back what the study holds. A side whose trials
    were screened (:mod:`simulations.tune.screening`) comes back with its
    choice confirmed at the scaler's refit interval."""
    study = request.study
    tracker = side.base.prescaler_trigger is not None
    trials_config = screened(config, study.screen_refit_s, prescaler=tracker)
    ctx = TuneContext(
        tune_part, profile, trials_config or config, side.base, target, side.space,
        max_replicas=side.max_replicas, seed=request.replay.seed, prune=study.prune,
        manifest=side.manifest,
        history=history if tracker else None,
    )  # fmt: skip
    parts: dict[str, Any] = {
        # the requests themselves, not the path: the same trace at another
        # path joins the study, another window does not
        "requests": _digest(workload.arrival_s, workload.prompt_tokens, workload.output_tokens,
                            workload.duration_s),
        "profile": _profile_key(request.replay.profile, profile), "config": repr(config),
        "target": request.protocol.target,
        "holdout": request.protocol.holdout, "side": side.name, "base": repr(side.base),
        "space": repr(side.space),
    }  # fmt: skip
    if ctx.history is not None:
        parts["history"] = _digest(ctx.history.times_s, ctx.history.requests_per_s)
    if tracker and config.refit_interval_s != REFIT_S:
        # the cadence the side's runs refit at (absent at the default, so a
        # study started before the flag existed is joined as it was)
        parts["refit_s"] = config.refit_interval_s
    if trials_config is not None:
        # trials scored at another fidelity do not compare with full ones
        parts["screen_refit_s"] = trials_config.refit_interval_s
    if request.protocol.margin:
        # the bar each trial's constraint was scored against (absent at 0: a
        # study started before the margin existed is joined as it was)
        parts["margin"] = request.protocol.margin
    fingerprint = study_fingerprint(parts)
    prefix = study.study or "prescaler-tune"
    name = f"{prefix}-{side.name}" if study.study else f"{prefix}-{side.name}-{fingerprint}"
    if started is not None:
        started.append((side, name))
    result = run_study(
        ctx, storage=storage, study_name=name, n_trials=study.trials, jobs=study.jobs,
        fingerprint=fingerprint, worker=f"{socket.gethostname()}:{os.getpid()}",
        grace_s=study.trial_grace_s, worker_index=study.worker_index,
    )  # fmt: skip
    if trials_config is None:
        return result
    full = replace(ctx, config=config)
    return confirm(result, full, trials_config.refit_interval_s, study.jobs)
