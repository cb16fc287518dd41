"""The optuna study behind ``prescaler tune``: trials, storage, processes.

The search is optuna's TPE sampler: cost is the objective and the SLO a
constraint (``Trial.set_constraint``), which TPE uses to split good from
bad trials, ranking infeasible ones by how far they miss; ``multivariate``
and ``group`` model the mixed integer, float and conditional keys jointly.
Trials run in ``jobs`` processes that share one RDB storage (SQLite on one
machine, PostgreSQL across machines): each trial is committed when it ends,
so a killed run loses no finished trial, and any number of ``prescaler
tune`` processes, on any machines, fill one study up to ``--trials``.
Running trials send heartbeats; a killed process's trial is marked failed
after :data:`GRACE_S` and re-run.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from engine.profiles import get_profile
from simulations.scaledobject import ScaledObjectSpec
from simulations.simulation import SimConfig
from simulations.traffic import Workload
from simulations.tune import PREDICTIVE_SPACE, Param, apply_metadata, sample_metadata, score

__all__ = [
    "GRACE_S",
    "HEARTBEAT_S",
    "StudyResult",
    "TrialRecord",
    "TuneContext",
    "make_sampler",
    "open_storage",
    "read_study",
    "run_study",
    "study_fingerprint",
]


@dataclass(frozen=True)
class TuneContext:
    """Everything a trial needs, picklable: it goes to each worker process."""

    workload: Workload
    profile: str
    config: SimConfig
    base: ScaledObjectSpec
    target: float
    """Attainment a setting must reach (already scaled by the idle ceiling)."""
    space: tuple[Param, ...] = PREDICTIVE_SPACE
    max_replicas: int = 16
    seed: int = 0
    slack: float = 0.02
    """Runs whose attainment is below ``target - slack`` are stopped early."""

    def miss_budget(self) -> int:
        floor = max(0.0, self.target - self.slack)
        return math.floor((1.0 - floor) * len(self.workload))


@dataclass(frozen=True)
class TrialRecord:
    """One finished trial as the report and plot see it."""

    number: int
    metadata: Mapping[str, str]
    attainment: float
    cost_usd: float
    finished: bool
    feasible: bool


@dataclass(frozen=True)
class StudyResult:
    """The study's trials and its best feasible one (None when none met the SLO)."""

    trials: tuple[TrialRecord, ...]
    best: TrialRecord | None
    closest: TrialRecord | None
    """The finished trial with the highest attainment (the answer when none is feasible)."""
    study_name: str
    storage: str
    extra: Mapping[str, Any] = field(default_factory=dict)


def study_fingerprint(parts: Mapping[str, Any]) -> str:
    """A short stable hash of what a study was started for: a study resumed
    for another trace or SLO would mix trials that do not compare."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _objective(ctx: TuneContext) -> Callable[[Any], float]:
    budget = ctx.miss_budget()

    def objective(trial: Any) -> float:
        meta = sample_metadata(trial, ctx.space, ctx.max_replicas)
        so = apply_metadata(ctx.base, meta)
        s = score(so, ctx.workload, ctx.profile, ctx.config, miss_budget=budget)
        trial.set_user_attr("metadata", meta)
        trial.set_user_attr("attainment", s.attainment)
        trial.set_user_attr("finished", s.finished)
        # the constraint: <= 0 is feasible; TPE ranks infeasible trials by it
        trial.set_user_attr("constraint", ctx.target - s.attainment)
        trial.set_constraint("slo_attainment", ctx.target - s.attainment)
        if not s.finished:
            # an early-stopped run's cost is unknown; rank it above any finished
            # one so TPE learns the region is bad (the constraint says why)
            return _unfinished_cost(ctx)
        trial.set_user_attr("cost_usd", s.cost_usd)
        return s.cost_usd

    return objective


def _unfinished_cost(ctx: TuneContext) -> float:
    """A cost worse than any real run: every hour at maxReplicas, twice over."""
    profile = get_profile(ctx.profile)
    hours = ctx.workload.duration_s / 3600.0
    return float(2.0 * ctx.max_replicas * hours * max(1.0, profile.price_on_demand_per_hour))


def make_sampler(seed: int | None) -> Any:
    """TPE (constraint-aware: it reads each trial's ``set_constraint``);
    ``multivariate`` and ``group`` model the keys jointly and cope with the
    conditional ones. Both are flagged experimental by optuna: the warning
    is silenced here, where the choice is made on purpose."""
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, n_startup_trials=10
        )


HEARTBEAT_S = 10
"""Each running trial's heartbeat in the storage; one silent for
:data:`GRACE_S` (its process was killed) is marked failed and re-run."""
GRACE_S = 60
_COUNTED = ("COMPLETE", "RUNNING", "WAITING")


def open_storage(url: str) -> Any:
    """An optuna RDB storage (SQLite, PostgreSQL, MySQL URL) with trial
    heartbeats, so a killed process's unfinished trial does not count."""
    import optuna

    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": 60}  # several processes share one file
    import warnings

    with warnings.catch_warnings():  # heartbeats are flagged experimental: chosen on purpose
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RDBStorage(
            url, engine_kwargs=kwargs, heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S
        )


def _load_study(storage: Any, name: str, seed: int | None, fingerprint: str) -> Any:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=name,
        storage=storage,
        sampler=make_sampler(seed),
        direction="minimize",
        load_if_exists=True,
    )
    have = study.user_attrs.get("fingerprint")
    if have is None:
        study.set_user_attr("fingerprint", fingerprint)
    elif have != fingerprint:
        raise ValueError(
            f"study {name!r} was started for another trace or settings "
            f"(fingerprint {have}, this run {fingerprint}); give another --study"
        )
    return study


def _fail_stale(study: Any) -> None:
    """Mark trials of killed processes (no heartbeat for GRACE_S) failed."""
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


def _counted(study: Any) -> int:
    import optuna

    states = tuple(getattr(optuna.trial.TrialState, s) for s in _COUNTED)
    return len(study.get_trials(deepcopy=False, states=states))


def _worker(
    ctx: TuneContext, url: str, name: str, n_trials: int, fingerprint: str, worker: str
) -> int:
    """One process's share: trials until the study holds ``n_trials``
    (finished or running, in any process on any machine)."""
    import optuna
    from optuna.study import MaxTrialsCallback

    probe = _load_study(open_storage(url), name, 0, fingerprint)
    _fail_stale(probe)
    before = _counted(probe)
    if before >= n_trials:
        return 0
    # a fresh single-process study keeps the run's seed (reproducible); a
    # process joining others mixes in who it is, or they would sample alike
    seed = ctx.seed if worker.endswith(":0") and before == 0 else _mix(ctx.seed, worker)
    study = _load_study(open_storage(url), name, seed, fingerprint)
    objective = _objective(ctx)

    def labelled(trial: Any) -> float:
        trial.set_user_attr("worker", worker)
        return objective(trial)

    states = tuple(getattr(optuna.trial.TrialState, s) for s in _COUNTED)
    study.optimize(
        labelled,
        n_trials=n_trials - before,
        callbacks=[MaxTrialsCallback(n_trials, states=states)],
        gc_after_trial=False,
    )
    return _counted(study) - before


def _mix(seed: int, worker: str) -> int:
    return int(hashlib.sha256(f"{seed}:{worker}".encode()).hexdigest()[:8], 16)


def run_study(
    ctx: TuneContext,
    *,
    storage: str,
    study_name: str,
    n_trials: int,
    jobs: int = 1,
    fingerprint: str = "",
    worker: str = "local",
    wait_s: float = 3600.0,
) -> StudyResult:
    """Run (or resume) the study in ``jobs`` processes until it holds
    ``n_trials`` trials in all, wait for trials other processes still run
    (up to ``wait_s``; a dead one's is failed after its grace period), then
    read every finished trial back: every process reports the same best."""
    import time

    import optuna

    if n_trials < 1:
        raise ValueError(f"trials must be >= 1, got {n_trials}")
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    study = _load_study(open_storage(storage), study_name, 0, fingerprint)  # create it up front
    deadline = time.monotonic() + wait_s
    running = (optuna.trial.TrialState.RUNNING,)
    # rounds: a trial left RUNNING by a killed process counts until it is
    # failed (GRACE_S), then the next round runs its replacement
    for _ in range(4):
        if jobs == 1:
            _worker(ctx, storage, study_name, n_trials, fingerprint, f"{worker}:0")
        else:
            with ProcessPoolExecutor(max_workers=jobs) as pool:
                futures = [
                    pool.submit(
                        _worker,
                        replace(ctx, seed=ctx.seed + k),
                        storage,
                        study_name,
                        n_trials,
                        fingerprint,
                        f"{worker}:{k}",
                    )
                    for k in range(jobs)
                ]
                for fut in futures:
                    fut.result()
        while study.get_trials(deepcopy=False, states=running) and time.monotonic() < deadline:
            _fail_stale(study)
            time.sleep(1.0)
        if _counted(study) >= n_trials or time.monotonic() >= deadline:
            break
    return read_study(study, storage, study_name)


def read_study(study: Any, storage: str = "", name: str = "") -> StudyResult:
    """The finished trials of an optuna study as :class:`TrialRecord` s."""
    import optuna

    records: list[TrialRecord] = []
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        attrs = t.user_attrs
        if "metadata" not in attrs:
            continue
        finished = bool(attrs.get("finished", False))
        cost = float(attrs["cost_usd"]) if finished and "cost_usd" in attrs else math.nan
        records.append(
            TrialRecord(
                number=t.number,
                metadata=dict(attrs["metadata"]),
                attainment=float(attrs["attainment"]),
                cost_usd=cost,
                finished=finished,
                feasible=finished and float(attrs.get("constraint", 1.0)) <= 0.0,
            )
        )
    feasible = [r for r in records if r.feasible]
    best = min(feasible, key=lambda r: (r.cost_usd, r.number)) if feasible else None
    done = [r for r in records if r.finished]
    closest = max(done, key=lambda r: (r.attainment, -r.cost_usd)) if done else None
    return StudyResult(tuple(records), best, closest, name, storage)
