"""The optuna study behind ``prescaler tune``: trials, storage, processes.

TPE with cost the objective and the SLO a constraint; trials in ``jobs``
processes sharing one RDB storage, each committed when it ends, so a killed
run loses nothing finished and many processes fill one study. A trial is a
whole simulation and most cannot win, so each stops once it is out of the
race (:mod:`simulations.tune.stop_rules`); a stopped trial is kept with its
reason and is never the answer. docs/tuning.md ("The search") has the detail.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.profiles import Profile, use_profile
from forecasting.baselines import BASELINES
from simulations.autoscaling.scaledobject import ScaledObjectSpec
from simulations.backfill import DemandHistory
from simulations.forecast_memo import PROCESS_MEMO
from simulations.report import policy_summary
from simulations.simulation import SimConfig
from simulations.traffic import Workload
from simulations.tune.each_day import part_attainments
from simulations.tune.interrupts import (
    interrupt_check,
    interruptible_trials,
    quiet_optuna,
    quiet_worker,
    raise_if_interrupted,
    run_quietly,
    wait_for_workers,
)
from simulations.tune.manifest import apply_setting, knob_value, manifest_of
from simulations.tune.search import (
    PREDICTIVE_SPACE,
    RUNGS,
    Param,
    Score,
    exact_miss_budget,
    outcome,
    rung_times,
    sample_metadata,
    score,
)
from simulations.tune.seeding import NEIGHBOUR_SHARE, neighbour_params, seed_params
from simulations.tune.stop_rules import (
    COST_PACE_EARLY,
    COST_PACE_FROM,
    PACE_FIRST_RUNG,
    StopRules,
    best_so_far,
    study_pace,
)
from simulations.tune.storage import GRACE_S, HEARTBEAT_S, DeadTrials, open_storage
from simulations.tune.tie_break import TieBreak, choose

__all__ = [
    "GRACE_S",
    "HEARTBEAT_S",
    "StudyResult",
    "TrialRecord",
    "TuneContext",
    "make_sampler",
    "open_storage",
    "process_indices",
    "read_study",
    "run_study",
    "study_fingerprint",
    "trial_violation",
]


@dataclass(frozen=True)
class TuneContext:
    """Everything a trial needs, picklable: it goes to each worker process."""

    workload: Workload
    profile: Profile | str
    """The profile itself (as read from a file, it reaches each worker so);
    a name is resolved in each process."""
    config: SimConfig
    base: ScaledObjectSpec
    target: float
    """Attainment a setting must reach (already scaled by the idle ceiling)."""
    space: tuple[Param, ...] = PREDICTIVE_SPACE
    max_replicas: int = 16
    seed: int = 0
    slack: float = 0.02
    """A trial whose attainment so far is below ``target - slack`` at the
    first rung (1/32 of the requests) is stopped; the slack shrinks as the
    work done to the power 3/4 at later rungs up to 1/2 (see
    :meth:`slo_slack`)."""
    cost_slack: float = 0.06
    """A trial that at a rung from 1/2 on has spent more than
    ``1 + cost_slack`` times what the best feasible trial had spent there is
    stopped; at 1/4 the slack is :data:`COST_PACE_EARLY` times larger, before
    1/4 the rule does not act (see :meth:`cost_pace_slack`)."""
    prune: Literal["pace", "exact"] = "pace"
    """``exact``: stop only trials that can no longer be feasible or
    cheapest; ``pace``: also the rung rules above."""
    rungs: tuple[float, ...] = RUNGS
    manifest: Mapping[str, Any] | None = None
    """``base`` as the user wrote it (settings are applied to it); None:
    rendered from ``base``."""
    history: DemandHistory | None = None
    """The trace's demand before the tuning part (``--start`` inside a trace),
    loaded into every trial's tracker like the live scaler's backfill; None
    at the trace's start or with ``--no-backfill``."""
    day_targets: tuple[tuple[float, float], ...] = ()
    """(start in the tuning part, attainment to meet) for each day a finished
    trial must meet on its own (:mod:`simulations.tune.each_day`), besides
    ``target`` over the whole part; empty: the whole part alone."""
    forecaster: str | None = None
    """A forecasting method the live trigger does not offer (statsforecast's
    ``sf_*``) every trial's prescaler tracker forecasts with
    (:func:`simulations.tune.search.score`); None: the trigger's own."""

    def __post_init__(self) -> None:
        if not (0.0 <= self.slack < 1.0 and self.cost_slack >= 0.0):
            raise ValueError(
                f"need 0 <= slack < 1 and cost_slack >= 0, got {self.slack}, {self.cost_slack}"
            )
        starts = [s for s, _ in self.day_targets]
        if starts and (starts[0] != 0.0 or any(b <= a for a, b in itertools.pairwise(starts))):
            raise ValueError(f"day_targets must start at 0 and rise, got starts {starts}")
        if self.prune not in ("pace", "exact"):
            raise ValueError(f"prune is 'pace' or 'exact', got {self.prune!r}")
        if self.forecaster is not None and self.forecaster not in BASELINES:
            raise ValueError(
                f"forecaster is one of {', '.join(BASELINES)} (the trigger's own methods are "
                f"its forecast: key), got {self.forecaster!r}"
            )

    def miss_budget(self) -> int:
        """Misses past which a trial cannot meet the target."""
        return exact_miss_budget(self.workload, self.target)

    def slo_slack(self, fraction: float) -> float:
        """How far below the target attainment so far may be at a rung.

        ``slack`` at 1/32, narrowing as the work to the power 3/4 (0.0025
        at 1/2 with the default 0.02). A trial that would meet the target is
        stopped only if its attainment so far is that much below its final
        attainment; the bench ``tests/simulations/tune/test_tune_bench.py -k
        pace_rules`` measures that shortfall over settings of the search
        space run to the end and fails when the slack does not cover it."""
        return self.slack * min(1.0, (PACE_FIRST_RUNG / fraction) ** 0.75)

    def cost_pace_slack(self, fraction: float) -> float | None:
        """How much more than the best's spend by a rung a trial may have
        spent, or None before :data:`COST_PACE_FROM`.

        A trial that ends cheaper than the best can still have spent more
        than it by a rung, by at most the ratio of the two settings' shares
        of their day's cost spent by then (a high minReplicas spends more
        early). The slack must cover the widest such ratio; the bench
        ``tests/simulations/tune/test_tune_bench.py -k pace_rules`` measures it
        over settings of the search space run to the end and fails when the
        slack does not cover it."""
        if fraction < COST_PACE_FROM:
            return None
        return self.cost_slack * (COST_PACE_EARLY if fraction < 0.5 else 1.0)


@dataclass(frozen=True)
class TrialRecord:
    """One finished trial as the report and plot see it."""

    number: int
    metadata: Mapping[str, str]
    attainment: float
    cost_usd: float
    finished: bool
    feasible: bool
    stopped: str = ""
    """Why the trial was stopped early ("" when it ran to the end)."""
    simulated: float = 1.0
    """Share of the tuning part's requests it simulated before it ended."""
    summary: Mapping[str, Any] | None = None
    """A finished trial's run as ``simulations.report.policy_summary`` gives
    it (None when stopped, or kept by an older study): the chosen setting's
    tuning-part figures without simulating it again."""
    day_attainment: tuple[float, ...] = ()
    """Each day's attainment of a finished trial judged day by day
    (``TuneContext.day_targets``); empty otherwise."""


@dataclass(frozen=True)
class StudyResult:
    """The study's trials and its best feasible one (None when none met the SLO)."""

    trials: tuple[TrialRecord, ...]
    best: TrialRecord | None
    closest: TrialRecord | None
    """The trial with the highest attainment, finished ones first (the
    answer when none is feasible)."""
    study_name: str
    storage: str
    extra: Mapping[str, Any] = field(default_factory=dict)
    tie_break: TieBreak | None = None
    """How ``best`` was chosen among feasible trials that tied with it on
    cost (:mod:`simulations.tune.tie_break`); None when it was the cheapest alone."""


def study_fingerprint(parts: Mapping[str, Any]) -> str:
    """A short stable hash of what a study was started for: a study resumed
    for another trace or SLO would mix trials that do not compare."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def _objective(ctx: TuneContext) -> Callable[[Any], float]:
    budget = ctx.miss_budget()
    rungs = rung_times(ctx.workload, ctx.rungs)
    profile = use_profile(ctx.profile)  # in this process, the trigger's name finds it
    tp = profile.tp

    def objective(trial: Any) -> float:
        meta = sample_metadata(trial, ctx.space, ctx.max_replicas)
        so = apply_setting(ctx.base, meta, ctx.manifest)
        rules = StopRules(
            ctx, lambda: best_so_far(trial.study), read_pace=lambda: study_pace(trial.study)
        )
        memo_before = PROCESS_MEMO.stats
        s = score(
            so, ctx.workload, profile, ctx.config, miss_budget=budget,
            stop=lambda p, rung: interrupt_check(p, rung) or rules(p, rung),  # Ctrl-C first
            rungs=rungs, history=ctx.history, forecaster=ctx.forecaster,
        )  # fmt: skip
        trial.set_user_attr("metadata", meta)
        # what the trial's forecasts took from earlier trials', and what the
        # process's memo holds after it (bench reading)
        memo = {**PROCESS_MEMO.stats.minus(memo_before).as_dict(), **PROCESS_MEMO.sizes}
        trial.set_user_attr("forecast_memo", memo)
        trial.set_user_attr("attainment", s.attainment)
        trial.set_user_attr("finished", s.finished)
        # (rung fraction, cost spent, attainment so far): later trials' pace bar
        trial.set_user_attr("curve", [[f, p.cost_usd, p.running_attainment] for f, p in s.curve])
        # the constraint: <= 0 is feasible; TPE ranks infeasible trials by it.
        # A stopped trial's is its attainment so far: what it was on course for
        violation, days = trial_violation(ctx, s)
        if days:
            trial.set_user_attr("day_attainment", list(days))
        trial.set_user_attr("constraint", violation)
        trial.set_constraint("slo_attainment", violation)
        if s.finished:
            trial.set_user_attr("cost_usd", s.cost_usd)
            trial.set_user_attr("summary", policy_summary(outcome(s), None, tp))
            return s.cost_usd
        assert s.at is not None
        trial.set_user_attr("stopped", s.stopped)
        trial.set_user_attr("stopped_after", s.at.arrived / max(1, len(ctx.workload)))
        trial.set_user_attr("cost_spent_usd", s.at.cost_usd)
        if s.stopped.startswith("cost pace"):
            # its cost extrapolated: above the best's by at least cost_slack
            trial.set_user_attr("cost_projected_usd", rules.projected_cost_usd)
            return float(rules.projected_cost_usd)
        if s.stopped.startswith("cost"):
            # what it spent is a lower bound on its cost, already above the best's
            return s.at.cost_usd
        # stopped for the SLO: its cost is unknown; rank it above any finished
        # one so TPE learns the region is bad (the constraint says why)
        return _unfinished_cost(ctx)

    return objective


def trial_violation(ctx: TuneContext, s: Score) -> tuple[float, tuple[float, ...]]:
    """How far a run falls short of ``ctx``'s bar (<= 0: met), over the whole
    part and, for a finished run judged day by day, each day; and those days'
    attainments (empty when not judged so)."""
    violation = ctx.target - s.attainment
    if not (s.finished and ctx.day_targets):
        return violation, ()
    assert s.result is not None
    starts = [start for start, _ in ctx.day_targets]
    days = tuple(part_attainments(s.result, ctx.workload.arrival_s, starts))
    short = max(t - a for (_, t), a in zip(ctx.day_targets, days, strict=True))
    return max(violation, short), days


def _unfinished_cost(ctx: TuneContext) -> float:
    """A cost worse than any real run: every hour at maxReplicas, twice over."""
    profile = use_profile(ctx.profile)
    hours = ctx.workload.duration_s / 3600.0
    return float(2.0 * ctx.max_replicas * hours * max(1.0, profile.price_on_demand_per_hour))


def make_sampler(seed: int | None) -> Any:
    """TPE (constraint-aware: it reads each trial's ``set_constraint``);
    ``multivariate`` and ``group`` model the keys jointly and cope with the
    conditional ones. Both are flagged experimental by optuna: the warning
    is silenced here, where the choice is made on purpose."""
    import optuna  # heavy: only a study loads it

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, n_startup_trials=10
        )


_COUNTED = ("COMPLETE", "RUNNING")
"""What fills the study up to ``--trials`` (a queued WAITING trial counts once taken)."""


def _states(*names: str) -> tuple[Any, ...]:
    import optuna  # heavy: only a study loads it

    return tuple(getattr(optuna.trial.TrialState, n) for n in names)


def _load_study(storage: Any, name: str, seed: int | None, fingerprint: str) -> Any:
    import optuna  # heavy: only a study loads it

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


def _counted(study: Any) -> int:
    import optuna  # heavy: only a study loads it

    states = tuple(getattr(optuna.trial.TrialState, s) for s in _COUNTED)
    return len(study.get_trials(deepcopy=False, states=states))


def _worker(
    ctx: TuneContext, url: str, name: str, n_trials: int, fingerprint: str, worker: str,
    index: int = 0, grace_s: int = GRACE_S,
) -> int:  # fmt: skip
    """One process's share: trials until the study holds ``n_trials``
    (finished or running, in any process on any machine)."""
    import optuna  # heavy: only a study loads it
    from optuna.study import MaxTrialsCallback

    quiet_optuna()  # Ctrl-C is said once, by the command
    store = open_storage(url, grace_s=grace_s)
    probe = _load_study(store, name, 0, fingerprint)
    # optuna's silent-heartbeat rule; a trial that never beat is failed by
    # run_study's watch, which sees it long enough
    DeadTrials(store, grace_s=grace_s).fail(probe)
    before = _counted(probe)
    if before >= n_trials:
        return 0
    # each worker's sampler seed comes from the study seed, the worker's
    # index and the trials the study already held when it joined: the same
    # command gives the same seeds (reproducible), two workers never sample
    # alike, and a resumed study does not replay its first draws
    ran = probe.get_trials(deepcopy=False, states=_states("COMPLETE", "RUNNING", "PRUNED", "FAIL"))
    seed = worker_seed(ctx.seed, index, len(ran))
    study = _load_study(open_storage(url, grace_s=grace_s), name, seed, fingerprint)
    objective = _objective(ctx)

    states = tuple(getattr(optuna.trial.TrialState, s) for s in _COUNTED)

    def labelled(trial: Any) -> float:
        trial.set_user_attr("worker", worker)
        # MaxTrialsCallback looks only after a trial ends, so two processes
        # can both start the last one; the earlier-numbered trials win and a
        # trial past --trials steps aside (PRUNED, which does not count)
        ahead = trial.study.get_trials(deepcopy=False, states=states)
        if sum(1 for t in ahead if t.number < trial.number) >= n_trials:
            trial.set_user_attr("stopped", "the study already holds its trials")
            raise optuna.TrialPruned("the study already holds its trials")
        raise_if_interrupted()  # Ctrl-C came: no trial begins (this one is failed)
        return objective(trial)

    while _counted(study) < n_trials:
        try:
            study.optimize(
                labelled,
                n_trials=n_trials - _counted(study),
                callbacks=[MaxTrialsCallback(n_trials, states=states)],
                gc_after_trial=False,
            )
        except (ValueError, RuntimeError) as exc:
            # two processes on SQLite can both take the queued first trial
            # (SQLite has no row lock); the one that ends second finds it
            # finished: optuna's tell refuses ("Cannot tell a COMPLETE
            # trial"), or, when the other finished it between tell's check
            # and its write, the storage does (UpdateFinishedTrialError).
            # The trial is in the storage: carry on with the rest.
            if not is_tell_race(exc):
                raise
            continue
        break
    return _counted(study) - before


TELL_RACE_SIGN = "Cannot tell a "
"""Start of optuna's refusal (``optuna.study._tell``) to finish a trial that
another process already finished."""


def is_tell_race(exc: BaseException) -> bool:
    """Whether ``exc`` is optuna refusing to finish a trial another process
    already finished: that trial's result is stored, so nothing is lost."""
    from optuna.exceptions import UpdateFinishedTrialError  # heavy: only a study loads it

    if isinstance(exc, UpdateFinishedTrialError):
        return True
    return isinstance(exc, ValueError) and str(exc).startswith(TELL_RACE_SIGN)


def process_indices(worker_index: int, jobs: int) -> range:
    """The worker indices (:func:`worker_seed`) of a command's ``jobs``
    processes when it is command ``worker_index`` of several started
    together on one study (each with the same ``jobs``): disjoint between
    commands, so two pods that join an empty study at once never share a
    seed; command 0's are ``range(jobs)``, as a lone command's always were."""
    if worker_index < 0 or jobs < 1:
        raise ValueError(f"need worker_index >= 0 and jobs >= 1, got {worker_index}, {jobs}")
    return range(worker_index * jobs, (worker_index + 1) * jobs)


def worker_seed(seed: int, index: int, trials_before: int) -> int:
    """Worker ``index``'s sampler seed: the study seed itself for the first
    worker of a fresh study, else a hash of (seed, index, trials already in
    the study): reproducible for a seed, distinct between workers."""
    if index == 0 and trials_before == 0:
        return seed
    blob = f"{seed}:{index}:{trials_before}".encode()
    return int(hashlib.sha256(blob).hexdigest()[:8], 16)


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
    grace_s: int = GRACE_S,
    worker_index: int = 0,
) -> StudyResult:
    """Run (or resume) the study in ``jobs`` processes until it holds
    ``n_trials`` trials in all, wait for trials other processes still run
    (up to ``wait_s``; a dead one's is failed once silent for ``grace_s``), then
    read every finished trial back: every process reports the same best.
    ``worker_index``: this command's place among commands started together
    on the study (:func:`process_indices`)."""

    if n_trials < 1:
        raise ValueError(f"trials must be >= 1, got {n_trials}")
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    store = open_storage(storage, grace_s=grace_s)
    study = _load_study(store, study_name, 0, fingerprint)  # create it up front
    dead = DeadTrials(store, grace_s=grace_s)
    dead.fail(study)  # a trial that never beat is failed GRACE_S after this first sight
    doc = ctx.manifest if ctx.manifest is not None else manifest_of(ctx.base)
    knobs = {p.key: knob_value(doc, p.key) for p in ctx.space if "." in p.key}
    seed = seed_params(ctx.base, ctx.space, ctx.max_replicas, knobs)
    if seed is not None and not study.get_trials(deepcopy=False):
        # a fresh study starts from the deployed settings, then the settings a
        # step from them; skip_if_exists keeps two processes creating it at
        # once from queueing either twice
        study.enqueue_trial(seed, user_attrs={"seeded": "base"}, skip_if_exists=True)
        limit = n_trials // NEIGHBOUR_SHARE
        for label, params in neighbour_params(seed, ctx.space, ctx.max_replicas, limit):
            study.enqueue_trial(params, user_attrs={"seeded": label}, skip_if_exists=True)
    deadline = time.monotonic() + wait_s
    with interruptible_trials():  # Ctrl-C stops the trials where nothing is half done
        _rounds(ctx, study, storage, study_name, n_trials, jobs, fingerprint, worker, grace_s,
                deadline, dead, process_indices(worker_index, jobs))  # fmt: skip
    return read_study(study, storage, study_name, ctx.space)


def _rounds(
    ctx: TuneContext, study: Any, storage: str, study_name: str, n_trials: int, jobs: int,
    fingerprint: str, worker: str, grace_s: int, deadline: float, dead: DeadTrials,
    indices: range,
) -> None:  # fmt: skip
    """Rounds of workers until the study holds ``n_trials`` (or the deadline)."""
    import optuna  # heavy: only a study loads it

    running = (optuna.trial.TrialState.RUNNING,)
    # rounds: a trial left RUNNING by a killed process counts until it is
    # failed (GRACE_S), then the next round runs its replacement
    for _ in range(4):
        if jobs == 1:
            k = indices[0]
            _worker(ctx, storage, study_name, n_trials, fingerprint, f"{worker}:{k}", k, grace_s)
        else:
            with ProcessPoolExecutor(max_workers=jobs, initializer=quiet_worker) as pool:
                futures = [
                    pool.submit(
                        run_quietly,
                        _worker,
                        ctx,
                        storage,
                        study_name,
                        n_trials,
                        fingerprint,
                        f"{worker}:{k}",
                        k,
                        grace_s,
                    )
                    for k in indices
                ]
                wait_for_workers(futures)
        while study.get_trials(deepcopy=False, states=running) and time.monotonic() < deadline:
            raise_if_interrupted()
            dead.fail(study)
            time.sleep(1.0)
        if _counted(study) >= n_trials or time.monotonic() >= deadline:
            break


def read_study(
    study: Any, storage: str = "", name: str = "", space: Sequence[Param] = ()
) -> StudyResult:
    """The finished trials of an optuna study as :class:`TrialRecord` s; the
    best is the cheapest feasible one, among equally cheap ones the one that
    reacts most by ``space``'s directions (without them, the first)."""
    import optuna  # heavy: only a study loads it

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
                stopped=str(attrs.get("stopped", "")),
                simulated=1.0 if finished else float(attrs.get("stopped_after", 1.0)),
                summary=attrs.get("summary") if finished else None,
                day_attainment=tuple(float(x) for x in attrs.get("day_attainment", ())),
            )
        )
    feasible = [r for r in records if r.feasible]
    best, tie = choose(feasible, space)
    closest = (
        max(records, key=lambda r: (r.finished, r.attainment, -_nan_last(r.cost_usd), -r.number))
        if records
        else None
    )
    return StudyResult(tuple(records), best, closest, name, storage, tie_break=tie)


def _nan_last(x: float) -> float:
    return math.inf if math.isnan(x) else x
