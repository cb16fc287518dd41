"""The hindsight schedule calibrated against the simulator: the bound a report measures by.

:mod:`simulations.hindsight` plans a schedule from the demand alone; this
module gives it what the run states (the lead time and billing of the
run's cluster, the trace's load at the engine's sustainable rate on the
trace's own request mix, the fleet bound) and replays candidates through
the very :class:`~simulations.simulation.Simulation` every policy runs in,
bisecting the capacity factor until the replayed attainment meets the
target. It does so twice: at the run's lead time, and with an instant
start-up (the same cluster and billing, a replica Ready the moment it is
ordered), so a report can price the cold start itself.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from engine.profile_types import StartupTimes
from engine.profiles import Profile
from simulations.cluster.config import ClusterConfig
from simulations.events import PRIORITY_SCRAPE
from simulations.hindsight import Calibrated, Schedule, calibrate, from_need, plan
from simulations.lead_time import with_startup
from simulations.outcome import Outcome, attainment, idle_attainment
from simulations.policies import HINDSIGHT_STEP_S, PolicySpec, make_controller, step_load
from simulations.simulation import SimConfig, SimResult, Simulation, SloBudgetExceeded
from simulations.traffic import Workload
from simulations.tune.request import DEFAULT_TARGET

__all__ = [
    "INSTANT",
    "Bound",
    "Timing",
    "bound_pair",
    "bound_summary",
    "hindsight_bound",
    "instant_no_dearer",
    "pair_configs",
    "search_hindsight",
    "timing",
]

SMOOTHING_STEPS = (1, 4)
"""The load is sized per step as it comes and averaged over four steps (a
minute): a replica queues through a step's Poisson peak, and which is
cheaper at the target depends on the trace, so both are calibrated and the
cheaper kept."""

INSTANT = StartupTimes(node_ready_s=0.0, image_pull_s=0.0, model_load_s=0.0)
"""A start-up that takes no time: the bound without the cold start."""


@dataclass(frozen=True)
class Timing:
    """What the schedule must respect, read from the run's cluster."""

    lead_s: float
    """Order to Ready at the slowest node draw: Karpenter's batch, the node's
    longest start, the image pull and the model load."""
    tail_s: float
    """How long a released replica's node stays billed: the first NodePool's
    ``consolidateAfter``, the validation wait and half a disruption poll."""
    gpus_per_replica: float


def timing(profile: Profile, config: SimConfig, duration_s: float) -> Timing:
    """The lead time and billing tail of ``config``'s cluster for ``profile``
    (its start-up replaced by ``config.startup``)."""
    prof = with_startup(profile, config.startup)
    cluster = ClusterConfig.for_profile(prof, spot=config.spot, **dict(config.cluster_overrides))
    lead = cluster.node_ready_s[2] + cluster.image_pull_s + cluster.model_load_s
    if lead > 0:
        lead += cluster.batch_idle_s
    pool = sorted(cluster.pools, key=lambda p: (-p.weight, p.name))[0]
    after = pool.consolidate_after_s if math.isfinite(pool.consolidate_after_s) else duration_s
    tail = after + cluster.consolidation_validation_s + cluster.disruption_poll_s / 2.0
    return Timing(lead, tail, cluster.gpus_per_node / cluster.pods_per_node)


@dataclass(frozen=True)
class Bound:
    """One calibrated hindsight schedule and its replay."""

    calibrated: Calibrated
    result: SimResult
    timing: Timing

    @property
    def schedule(self) -> Schedule:
        return self.calibrated.schedule


def hindsight_bound(
    workload: Workload,
    profile: Profile,
    config: SimConfig,
    target: float,
    *,
    max_replicas: int | None = None,
    name: str = "hindsight",
    step_s: float = HINDSIGHT_STEP_S,
    stop: Callable[[], None] | None = None,
    check_s: float = 60.0,
) -> Bound:
    """The calibrated schedule meeting ``target`` (an attainment, not a
    fraction of the ceiling) under ``config``, with its replay. ``stop`` is
    called every ``check_s`` of simulated time in each replay and ends the
    bound by raising (Ctrl-C in a tune worker); its checks are events of
    their own that move no other, and without it none are scheduled."""
    prof = with_startup(profile, config.startup)
    raw = step_load(workload, prof, step_s) if len(workload) else np.zeros(1)
    t = timing(profile, config, workload.duration_s)
    budget = math.floor((1.0 - target) * len(workload))
    runs: dict[bytes, SimResult | None] = {}

    def rebuild(need: np.ndarray) -> Schedule:
        return from_need(
            need, step_s=step_s, lead_s=t.lead_s, tail_s=t.tail_s,
            gpus_per_replica=t.gpus_per_replica,
        )  # fmt: skip

    def run(sched: Schedule, miss_budget: int | None) -> SimResult:
        spec = PolicySpec(name, "hindsight", schedule=tuple(int(x) for x in sched.orders))
        controller = make_controller(spec, workload, prof)
        sim = Simulation(workload, prof, controller, config, miss_budget=miss_budget)
        if stop is not None:
            check = stop

            def periodic(now: float) -> None:
                check()
                if now + check_s < workload.duration_s:
                    sim.queue.schedule(now + check_s, PRIORITY_SCRAPE, periodic)

            sim.queue.schedule(min(check_s, workload.duration_s), PRIORITY_SCRAPE, periodic)
        return sim.run()

    def replay(sched: Schedule) -> tuple[float, float | None]:
        try:
            result: SimResult | None = run(sched, budget)
        except SloBudgetExceeded:
            result = None
        runs[sched.orders.tobytes()] = result
        if result is None:
            return 0.0, None  # stopped once it could no longer meet the target
        return attainment(result), result.gpu_hours

    # heavy (scipy.ndimage, about 0.3 s): only a run that computes the bound loads it
    from scipy.ndimage import uniform_filter1d

    found: list[Calibrated] = []
    for width in SMOOTHING_STEPS:
        # (the running mean's rounding can leave -1e-17 where the load is 0)
        load = (
            raw
            if width <= 1
            else np.maximum(uniform_filter1d(raw, size=width, mode="nearest"), 0.0)
        )

        def build(factor: float, load: np.ndarray = load) -> Schedule:
            return plan(
                load, step_s=step_s, lead_s=t.lead_s, tail_s=t.tail_s, factor=factor,
                max_replicas=max_replicas, gpus_per_replica=t.gpus_per_replica,
            )  # fmt: skip

        found.append(calibrate(build, replay, target, rebuild=rebuild))
    cal = min(found, key=lambda c: (not c.met, _bill(runs, c), -c.attainment))
    cal = replace(cal, trials=tuple(tr for c in found for tr in c.trials))
    chosen = runs.get(cal.schedule.orders.tobytes())
    if chosen is None:  # stopped early: run it to the end for the report
        chosen = run(cal.schedule, None)
        cal = replace(cal, attainment=attainment(chosen))
    return Bound(cal, chosen, t)


def _bill(runs: dict[bytes, SimResult | None], cal: Calibrated) -> float:
    """A calibrated schedule's replayed bill (its model's when it was stopped early)."""
    run = runs.get(cal.schedule.orders.tobytes())
    return cal.schedule.gpu_hours if run is None else run.gpu_hours


def search_hindsight(
    spec: PolicySpec, workload: Workload, profile: Profile, config: SimConfig
) -> Outcome:
    """A ``hindsight`` policy's outcome: the bound at the run's lead time (its
    replay is the outcome's result) and, in ``result.extra["hindsight"]``,
    the same bound with an instant start-up (:func:`bound_summary`)."""
    fraction = DEFAULT_TARGET if spec.target is None else spec.target
    prof = with_startup(profile, config.startup)
    target = fraction * idle_attainment(workload, prof, config.slo_ttft_s)
    stated, instant = bound_pair(
        workload, profile, config, target, max_replicas=spec.max_replicas, name=spec.name
    )
    extra = {**stated.result.extra, "hindsight": bound_summary(stated, instant, fraction)}
    return Outcome(replace(stated.result, extra=extra), target=target)


def bound_pair(
    workload: Workload,
    profile: Profile,
    config: SimConfig,
    target: float,
    *,
    max_replicas: int | None = None,
    name: str = "hindsight",
) -> tuple[Bound, Bound]:
    """The bound at ``config``'s lead time and with an instant start-up, both
    meeting ``target`` (an attainment)."""
    stated, instant = (
        hindsight_bound(workload, profile, c, target, max_replicas=max_replicas, name=name)
        for c in pair_configs(config)
    )
    return stated, instant_no_dearer(stated, instant, workload, profile, config, target, name)


def instant_no_dearer(
    stated: Bound,
    instant: Bound,
    workload: Workload,
    profile: Profile,
    config: SimConfig,
    target: float,
    name: str = "hindsight",
) -> Bound:
    """The instant-start bound, no dearer than the bound at ``config``'s
    lead time: the stated schedule's orders with every replica Ready at once
    bill the same hours and serve at least as well, so where the instant
    start's own search lands dearer (each is a search, not an optimum) or
    misses, that replay, meeting the target, is the instant bound and the
    lead time's price is not negative. :func:`bound_summary` says when it
    was taken (``instant_start.from_stated_schedule``)."""
    if instant.calibrated.met and instant.result.cost_usd <= stated.result.cost_usd:
        return instant
    prof = with_startup(profile, INSTANT)
    spec = PolicySpec(name, "hindsight", schedule=tuple(int(x) for x in stated.schedule.orders))
    instant_config = pair_configs(config)[1]
    result = Simulation(workload, prof, make_controller(spec, workload, prof), instant_config).run()
    reached = attainment(result)
    if reached < target or (instant.calibrated.met and result.cost_usd >= instant.result.cost_usd):
        return instant
    calibrated = replace(stated.calibrated, attainment=reached, met=True)
    return Bound(calibrated, result, instant.timing)


def pair_configs(config: SimConfig) -> tuple[SimConfig, SimConfig]:
    """The two start-ups a bound pair is computed at: ``config``'s, and instant."""
    return config, replace(config, startup=INSTANT)


def _side(bound: Bound) -> dict[str, Any]:
    cal, r = bound.calibrated, bound.result
    return {
        "slo_attainment": round(cal.attainment, 6),
        "met": cal.met,
        "gpu_hours": round(r.gpu_hours, 6),
        "cost_usd": round(r.cost_usd, 6),
        # None: refined step by step between two factors (hindsight.calibrate)
        "capacity_factor": round(f, 6) if math.isfinite(f := cal.schedule.factor) else None,
        "model_gpu_hours": round(cal.schedule.gpu_hours, 6),
        "lead_s": round(bound.timing.lead_s, 3),
        "tail_s": round(bound.timing.tail_s, 3),
        "starts": cal.schedule.starts,
        "replays": len({(t.replica_hours, t.attainment) for t in cal.trials}),
    }


def _instant_side(stated: Bound, instant: Bound) -> dict[str, Any]:
    """The instant bound's figures, and whether they are the stated
    schedule replayed at an instant start (:func:`instant_no_dearer`)."""
    return {**_side(instant), "from_stated_schedule": instant.schedule is stated.schedule}


def bound_summary(stated: Bound, instant: Bound, fraction: float) -> dict[str, Any]:
    """The two bounds as the report carries them (strict JSON): each one's
    replayed attainment and bill, and the price of the lead time between them."""
    return {
        "target": fraction,
        "target_attainment": round(stated.calibrated.target, 6),
        "stated_lead": _side(stated),
        "instant_start": _instant_side(stated, instant),
        "lead_time_price_usd": round(stated.result.cost_usd - instant.result.cost_usd, 6),
        "lead_time_price_gpu_hours": round(stated.result.gpu_hours - instant.result.gpu_hours, 6),
    }
