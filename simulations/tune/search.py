"""Tuning a ScaledObject on a trace: the search space and the scoring.

The space gives values a person would paste (``0.85``, never ``0.8473921``),
written as trigger metadata strings and parsed by the live scaler's own
parser, so a tuned block is never one the scaler refuses. :func:`score` runs
one setting through the simulator; :func:`split_workload` makes the
out-of-sample parts. The target is relative to what an idle fleet attains:
a prompt too long to prefill within the SLO misses it on any fleet.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from engine.profiles import Profile, use_profile
from simulations.autoscaling.scaledobject import ScaledObjectSpec
from simulations.backfill import DemandHistory
from simulations.events import PRIORITY_SCRAPE
from simulations.policies import PolicySpec, make_controller, predictive_spec, reactive_spec
from simulations.runner import Outcome, attainment, idle_attainment
from simulations.simulation import SimConfig, SimResult, Simulation, SloBudgetExceeded
from simulations.traffic import Workload

__all__ = [
    "FLOOR_KEYS",
    "FORECAST_ONLY_KEYS",
    "PREDICTIVE_SPACE",
    "RUNGS",
    "Param",
    "Progress",
    "Score",
    "StopRule",
    "exact_miss_budget",
    "format_value",
    "merged_metadata",
    "param_high",
    "pareto_front",
    "rung_times",
    "score",
    "slice_workload",
    "split_workload",
]


# ----------------------------------------------------------------- space
@dataclass(frozen=True)
class Param:
    """One searched trigger key: an int, a stepped float or a choice.

    ``when`` makes it conditional (``nodeLeadTimeSeconds`` only matters with
    ``prewarm: "true"``; a fixed ``leadTimeSeconds`` only when not ``auto``).
    """

    key: str
    kind: Literal["int", "float", "choice"]
    low: float = 0.0
    high: float = 0.0
    step: float | None = None
    log: bool = False
    choices: tuple[str, ...] = ()
    when: tuple[str, str] | None = None
    """(other key, value): sampled only when that key took that value."""
    unless: tuple[str, str] | None = None
    """(other key, value): not sampled when that key took that value (the
    forecast's settings with ``forecast: off``); sampled when the key is
    held rather than searched, unless held at that value
    (:func:`simulations.tune.sides.make_sides` drops it then)."""
    above: str | None = None
    """Another key whose value this one is sampled above: a cron window's
    replicas above the floor (a window at or below the floor holds nothing
    the floor does not, so it is not a setting to search)."""
    reacts: Literal["low", "high"] | None = field(default=None, repr=False)
    """Which end of the range reacts most to demand (a threshold's low end,
    a wait's short one), for the tie-break among equally cheap trials
    (:mod:`simulations.tune.tie_break`); None: neither. Not in the repr, so a
    study's fingerprint is what it was before directions existed."""

    def applies(self, picked: Mapping[str, Any]) -> bool:
        """Whether the key is sampled given the keys ``picked`` before it
        (optuna's values or metadata strings)."""
        if self.when is not None and format_value(picked.get(self.when[0], "")) != self.when[1]:
            return False
        return not (
            self.unless is not None
            and self.unless[0] in picked
            and format_value(picked[self.unless[0]]) == self.unless[1]
        )

    def floor_in(self, picked: Mapping[str, Any]) -> int | None:
        """The lowest value left to an ``above`` key given ``picked``: one
        above the other key's value (None when that key was not picked)."""
        if self.above is None or self.above not in picked:
            return None
        return int(float(picked[self.above])) + 1

    def __post_init__(self) -> None:
        if self.kind == "choice":
            if len(self.choices) < 2:
                raise ValueError(f"{self.key}: a choice needs at least two options")
        elif not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise ValueError(f"{self.key}: need finite low < high, got {self.low}, {self.high}")
        if self.log and self.step is not None:
            raise ValueError(f"{self.key}: optuna takes a step or log, not both")


LEAD_MODE = "leadTimeSeconds"
FORECAST_OFF = ("forecast", "off")
"""The condition under which the forecast's own settings mean nothing."""
FORECAST_ONLY_KEYS = (
    "forecastQuantile",
    "seasonalPeakDays",
    "seasonalWanderSeconds",
    "seasonalSizeWanderSeconds",
    "prewarm",
    "prewarmDeployment",
    "nodeLeadTimeSeconds",
)
"""Trigger keys read only while the trigger forecasts (``decision.policy``
and ``decision.prewarm`` skip them with ``forecast: off``): not searched
then, and not written into a block that says ``forecast: off``."""
PREDICTIVE_SPACE: tuple[Param, ...] = (
    Param("targetWaitingPerReplica", "float", 0.5, 12.0, step=0.25, reacts="low"),
    Param("targetKvCacheUsage", "float", 0.5, 0.95, step=0.05, reacts="low"),
    Param("forecast", "choice", choices=("auto", "off")),
    Param("forecastQuantile", "float", 0.5, 0.99, step=0.01, unless=FORECAST_OFF),
    Param("seasonalPeakDays", "int", 0, 3, unless=FORECAST_OFF),
    Param("seasonalWanderSeconds", "int", 0, 3600, step=300, unless=FORECAST_OFF),
    Param(LEAD_MODE, "choice", choices=("auto", "fixed")),
    Param("leadTimeSeconds:fixed", "int", 60, 900, step=15, when=(LEAD_MODE, "fixed")),
    Param("scaleDownStabilizationSeconds", "int", 0, 1800, step=30),
    Param("minReplicas", "int", 1, 8),
    Param("prewarm", "choice", choices=("false", "true"), unless=FORECAST_OFF),
    Param("nodeLeadTimeSeconds", "int", 0, 600, step=15, when=("prewarm", "true")),
)
"""What moves cost and attainment: the sizing targets, whether to forecast
at all and, when it does, how far up the forecast band to size, how many
recent days' peaks to size for and how far either side of the lead-time
window to read them; the lead time, how slowly to scale in (the one
scale-in wait of a prescaler ScaledObject: the HPA's own window is written
0, :func:`simulations.tune.manifest.apply_to_manifest`), the floor, and
node pre-warming (which needs the forecast). ``minReplicas`` is capped at
``maxReplicas`` by :func:`sample_metadata`."""

FLOOR_KEYS = ("minReplicas", "spec.minReplicaCount")
"""The floor, as prescaler's trigger and as the ScaledObject spell it."""


def param_high(p: Param, max_replicas: int) -> float:
    """``p``'s top: a floor is capped at ``maxReplicas``."""
    if p.key in FLOOR_KEYS:
        return max(p.low, min(p.high, max_replicas))
    return p.high


def format_value(value: float | int | str) -> str:
    """Metadata text for a sampled value: integers bare, floats without noise."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return f"{float(value):.4f}".rstrip("0").rstrip(".")


def sample_metadata(trial: Any, space: Sequence[Param], max_replicas: int) -> dict[str, str]:
    """The trigger keys an optuna ``trial`` picks (strings, as metadata holds them)."""
    picked: dict[str, str] = {}
    for p in space:
        if not p.applies(picked):
            continue
        if p.kind == "choice":
            value: Any = trial.suggest_categorical(p.key, list(p.choices))
        elif p.kind == "int":
            high = int(param_high(p, max_replicas))
            low = max(int(p.low), p.floor_in(picked) or 0)
            if low > high:
                continue  # no value above the other key's: nothing to search
            value = trial.suggest_int(p.key, low, high, step=int(p.step or 1))
        else:
            value = trial.suggest_float(p.key, p.low, p.high, step=p.step, log=p.log)
        picked[p.key] = format_value(value)
    return _to_metadata(picked)


def _to_metadata(picked: Mapping[str, str]) -> dict[str, str]:
    """Search keys -> trigger keys (``leadTimeSeconds`` from its mode and value)."""
    meta = {k: v for k, v in picked.items() if ":" not in k and k != LEAD_MODE}
    if LEAD_MODE in picked:
        meta[LEAD_MODE] = "auto" if picked[LEAD_MODE] == "auto" else picked[f"{LEAD_MODE}:fixed"]
    if picked.get("prewarm") == "false":
        meta.pop("nodeLeadTimeSeconds", None)
    return meta


def merged_metadata(meta: Mapping[str, str], tuned: Mapping[str, str]) -> dict[str, str]:
    """prescaler's trigger metadata ``meta`` with ``tuned`` written over it,
    made one the parser takes: ``nodeLeadTimeSeconds`` dropped with
    ``prewarm`` off, the forecast's own keys (:data:`FORECAST_ONLY_KEYS`)
    with ``forecast`` set off unless set with it (each is then its default,
    which nothing reads), ``fallbackReplicas`` raised to a higher ``minReplicas``
    (the parser refuses it below), no search-only fixed-lead key."""
    merged = {**meta, **tuned}
    if tuned.get("prewarm") == "false":
        merged.pop("nodeLeadTimeSeconds", None)
    if tuned.get("forecast") == "off":
        # what only the forecast reads says nothing beside forecast: off
        # (a key set in the same breath, e.g. held by the caller, stays)
        for key in FORECAST_ONLY_KEYS:
            if key not in tuned:
                merged.pop(key, None)
    if "minReplicas" in merged and "fallbackReplicas" in merged:
        lo = int(merged["minReplicas"])
        if int(merged["fallbackReplicas"]) < lo:
            merged["fallbackReplicas"] = str(lo)
    merged.pop(f"{LEAD_MODE}:fixed", None)
    return merged


# --------------------------------------------------------------- scoring
def split_workload(workload: Workload, holdout: float) -> tuple[Workload, Workload | None]:
    """(first part, held-back rest): the rest is the last ``holdout`` of the
    span, its arrivals shifted to start at 0. ``holdout`` 0 keeps it all."""
    if not (0.0 <= holdout < 1.0):
        raise ValueError(f"holdout must lie in [0, 1), got {holdout!r}")
    if holdout == 0.0:
        return workload, None
    cut = workload.duration_s * (1.0 - holdout)
    return slice_workload(workload, 0.0, cut), slice_workload(workload, cut, workload.duration_s)


def slice_workload(workload: Workload, lo_s: float, hi_s: float) -> Workload:
    """The requests arriving in [lo_s, hi_s), on their own clock from 0."""
    if not 0.0 <= lo_s < hi_s:
        raise ValueError(f"need 0 <= lo_s < hi_s, got {lo_s!r}, {hi_s!r}")
    lo, hi = np.searchsorted(workload.arrival_s, (lo_s, hi_s), side="left")
    return Workload(
        workload.arrival_s[lo:hi] - lo_s,
        workload.prompt_tokens[lo:hi],
        workload.output_tokens[lo:hi],
        workload.name,
        min(hi_s, workload.duration_s) - lo_s,
    )


@dataclass(frozen=True)
class Progress:
    """Where a run stands at one instant: what the early-stop rules judge."""

    t_s: float
    arrived: int
    """Requests that arrived before ``t_s``."""
    misses: int
    """Requests that already missed the SLO (they can only add up)."""
    cost_usd: float
    """Spent since t=0 (it can only grow, so it bounds the run's final cost)."""

    @property
    def running_attainment(self) -> float:
        """Attainment so far: what the run is on course for."""
        return 1.0 - self.misses / self.arrived if self.arrived else 1.0


StopRule = Callable[[Progress, float | None], str | None]
"""Called with the run's progress every ``check_s`` of simulated time (rung
None) and at each rung (its fraction of the requests); a reason string stops
the run."""

RUNGS: tuple[float, ...] = (1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 3 / 4, 7 / 8)
"""Checkpoints, as fractions of the tuning part's requests: geometric up to
1/2, like successive halving's rungs, so a hopeless trial is judged on little
work and a promising one is judged again as it gets more; then 3/4 and 7/8,
where a trial near the best is judged on cost before it runs to the end."""


def rung_times(workload: Workload, fractions: Sequence[float]) -> tuple[tuple[float, float], ...]:
    """(fraction, arrival time of the request at that fraction) for each rung
    inside ``workload``: the same instants in every trial (the requests are
    the same), so trials are compared at equal work."""
    n = len(workload)
    out: list[tuple[float, float]] = []
    for f in fractions:
        if not 0.0 < f < 1.0:
            raise ValueError(f"rung fractions lie in (0, 1), got {f!r}")
        k = math.ceil(f * n)
        if 0 < k < n:
            out.append((float(f), float(workload.arrival_s[k])))
    return tuple(out)


@dataclass(frozen=True)
class Score:
    """What one run of one setting scored. ``finished`` False when it was
    stopped early (``stopped`` says why, ``at`` where): ``attainment`` then is
    the running attainment at the stop and ``cost_usd`` NaN (unknown)."""

    attainment: float
    cost_usd: float
    finished: bool
    result: SimResult | None = None
    stopped: str = ""
    at: Progress | None = None
    curve: tuple[tuple[float, Progress], ...] = ()
    """(rung fraction, progress) at each rung passed, for later trials' pace
    comparisons."""


class _Stop(Exception):
    """Raised from inside the event loop to end a run a stop rule gave up on."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def score(
    so: ScaledObjectSpec,
    workload: Workload,
    profile: Profile | str,
    config: SimConfig,
    miss_budget: int | None = None,
    *,
    stop: StopRule | None = None,
    rungs: Sequence[tuple[float, float]] = (),
    check_s: float = 60.0,
    history: DemandHistory | None = None,
    forecaster: str | None = None,
) -> Score:
    """One run of ``so`` over ``workload``: to the end, or stopped once its
    misses pass ``miss_budget`` or when ``stop`` gives a reason (checked every
    ``check_s`` of simulated time and at each of ``rungs``, (fraction, time)
    pairs from :func:`rung_times`). ``history`` is the demand before the
    workload (:mod:`simulations.backfill`), loaded into a prescaler trigger's
    tracker as the live scaler's backfill would be; other triggers keep no
    history and ignore it. ``forecaster`` is a method the live trigger does
    not offer (statsforecast's ``sf_*``), forecasting for a prescaler
    trigger's tracker whatever its ``forecast:`` says (simulation only, to
    compare forecasters by the cost each buys).
    The checks are events of their own on the run's queue: they consume no
    random draws and move no other event, so a run that is not stopped is the
    very run it would have been without them."""
    if not (math.isfinite(check_s) and check_s > 0):
        raise ValueError(f"check_s must be finite and > 0, got {check_s!r}")
    profile = use_profile(profile)
    kept = history if so.prescaler_trigger is not None else None
    spec = PolicySpec(so.name, "scaledobject", scaledobject=so, history=kept, forecaster=forecaster)
    controller = make_controller(spec, workload, profile, refit_interval_s=config.refit_interval_s)
    sim = Simulation(workload, profile, controller, config, miss_budget=miss_budget)
    arrival = workload.arrival_s
    spent0: list[float] = []
    curve: list[tuple[float, Progress]] = []

    def progress(t: float) -> Progress:
        cost = sim.cluster.cost_usd(t) - spent0[0] if spent0 else 0.0
        arrived = int(np.searchsorted(arrival, t, side="left"))
        return Progress(t, arrived, sim.misses, cost)

    def start(t: float) -> None:
        spent0.append(sim.cluster.cost_usd(t))

    def periodic(t: float) -> None:
        assert stop is not None
        reason = stop(progress(t), None)
        if reason:
            raise _Stop(reason)
        if t + check_s < workload.duration_s:
            sim.queue.schedule(t + check_s, PRIORITY_SCRAPE, periodic)

    def at_rung(fraction: float) -> Callable[[float], None]:
        def check(t: float) -> None:
            p = progress(t)
            curve.append((fraction, p))
            reason = stop(p, fraction) if stop is not None else None
            if reason:
                raise _Stop(reason)

        return check

    sim.queue.schedule(0.0, PRIORITY_SCRAPE, start)
    if stop is not None:
        sim.queue.schedule(min(check_s, workload.duration_s), PRIORITY_SCRAPE, periodic)
    for fraction, t in rungs:
        sim.queue.schedule(t, PRIORITY_SCRAPE, at_rung(fraction))
    try:
        result = sim.run()
    except SloBudgetExceeded:
        at = progress(sim.queue.now)
        # every request still to come could meet the SLO: the best it can end at
        reason = f"slo: {sim.misses:,} misses, more than the {miss_budget:,} the target allows"
        return Score(at.running_attainment, math.nan, False, None, reason, at, tuple(curve))
    except _Stop as exc:
        at = progress(sim.queue.now)
        return Score(at.running_attainment, math.nan, False, None, exc.reason, at, tuple(curve))
    return Score(attainment(result), result.cost_usd, True, result, "", None, tuple(curve))


def exact_miss_budget(workload: Workload, target: float) -> int:
    """The most misses a run of ``workload`` can have and still attain
    ``target``: one more and it cannot be feasible, whatever comes after."""
    return math.floor((1.0 - max(0.0, target)) * len(workload) + 1e-9)


def outcome(s: Score) -> Outcome:
    """The runner's :class:`Outcome` for a finished score (for report.policy_summary)."""
    if s.result is None:
        raise ValueError("the run did not finish")
    return Outcome(s.result)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the (cost, attainment) points no other point beats on both
    (cheaper or equal and at least as good, one strictly), by rising cost."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front: list[int] = []
    best = -math.inf
    for i in order:
        cost, att = points[i]
        if not (math.isfinite(cost) and math.isfinite(att)):
            continue
        if att > best:
            front.append(i)
            best = att
    return front


def default_bases(
    profile: Profile | str, max_replicas: int
) -> tuple[ScaledObjectSpec, ScaledObjectSpec]:
    """(predictive, reactive) ScaledObjects the search starts from: the
    simulator's own ``predictive`` and ``reactive`` policies (the trigger
    names the profile, which :func:`use_profile` makes known by that name)."""
    name = use_profile(profile).name
    p = predictive_spec(name, max_replicas=max_replicas).scaledobject
    r = reactive_spec(max_replicas).scaledobject
    assert p is not None and r is not None
    return p, r


def slo_ceiling(workload: Workload, profile: Profile | str, slo_ttft_s: float) -> float:
    """What an idle fleet attains: the most any setting can reach."""
    return idle_attainment(workload, use_profile(profile), slo_ttft_s)
