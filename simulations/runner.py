"""Running policies over one workload: the static fleet search, and process parallelism.

Each policy runs in its own :class:`~simulations.simulation.Simulation`
(fresh state); with ``jobs > 1`` policies run in separate processes
(``concurrent.futures.ProcessPoolExecutor``), which share nothing anyway.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed

import numpy as np

from engine.profiles import Profile, use_profile
from simulations.hindsight_run import search_hindsight
from simulations.lead_time import with_startup
from simulations.outcome import Outcome, attainment, idle_attainment, met_slo
from simulations.policies import PolicySpec, make_controller, oracle_need, with_replicas
from simulations.simulation import SimConfig, SimResult, Simulation, SloBudgetExceeded
from simulations.traffic import Workload

__all__ = [
    "STATIC_SLO_TARGET",
    "Outcome",
    "attainment",
    "idle_attainment",
    "met_slo",
    "run_policies",
    "run_policy",
    "search_static",
]

STATIC_SLO_TARGET = 0.98
"""The default static fleet is the smallest whose TTFT-SLO attainment reaches
this fraction of what an idle fleet would attain (:func:`idle_attainment`):
a prompt too long to prefill within the SLO misses it on any fleet."""


def run_policy(
    spec: PolicySpec, workload: Workload, profile: Profile, config: SimConfig
) -> SimResult:
    """One full run of one resolved policy."""
    controller = make_controller(spec, workload, profile, refit_interval_s=config.refit_interval_s)
    return Simulation(workload, profile, controller, config).run()


def search_static(
    spec: PolicySpec,
    workload: Workload,
    profile: Profile,
    config: SimConfig,
    target: float = STATIC_SLO_TARGET,
    max_replicas: int | None = None,
) -> Outcome:
    """The smallest fixed fleet whose full run meets ``target`` attainment.

    Starts from the oracle's 99th-percentile need and walks by one (doubling
    upward when far off); a run that has clearly failed stops early. Returns
    the cheapest passing run, or the largest tried if none passes.
    """
    n = len(workload)
    profile = with_startup(profile, config.startup)
    if max_replicas is None:
        max_replicas = spec.max_replicas
    target = target * idle_attainment(workload, profile, config.slo_ttft_s)
    budget = math.floor((1.0 - target) * n)
    need = oracle_need(workload, profile) if n else np.array([1])
    cap = max_replicas or max(4, 4 * int(need.max()))  # a stated bound, else hindsight
    guess = max(1, int(np.ceil(np.quantile(need, 0.99))))
    results: dict[int, SimResult | None] = {}

    def attempt(k: int) -> bool:
        if k not in results:
            sim = Simulation(
                workload,
                profile,
                make_controller(with_replicas(spec, k), workload, profile),
                config,
                miss_budget=budget,
            )
            try:
                results[k] = sim.run()
            except SloBudgetExceeded:
                results[k] = None
        r = results[k]
        return r is not None and attainment(r) >= target

    k = min(guess, cap)
    if attempt(k):
        best = k
        while best > 1 and attempt(best - 1):
            best -= 1
    else:
        lo, step, best = k, 1, cap
        while lo < cap:
            k = min(cap, lo + step)
            if attempt(k):
                best = k
                break
            lo, step = k, step * 2
        while best - lo > 1 and attempt(best):
            mid = (lo + best) // 2
            if attempt(mid):
                best = mid
            else:
                lo = mid
    chosen = results.get(best)
    if chosen is None:  # even the cap failed early: run it to the end for the report
        chosen = run_policy(with_replicas(spec, best), workload, profile, config)
    tried = tuple(sorted((k, None if r is None else attainment(r)) for k, r in results.items()))
    return Outcome(chosen, tried, best, target)


def _run_one(spec: PolicySpec, workload: Workload, profile: Profile, config: SimConfig) -> Outcome:
    use_profile(profile)  # in a worker process too, the trigger's profile name finds this one
    if spec.kind == "static" and spec.replicas is None:
        return search_static(spec, workload, profile, config)
    if spec.kind == "hindsight" and spec.schedule is None:
        return search_hindsight(spec, workload, profile, config)
    return Outcome(run_policy(spec, workload, profile, config), replicas=spec.replicas)


def run_policies(
    specs: Sequence[PolicySpec],
    workload: Workload,
    profile: Profile | str,
    config: SimConfig,
    *,
    jobs: int = 1,
    on_done: Callable[[str], None] | None = None,
) -> dict[str, Outcome]:
    """Every policy over the workload, in order of ``specs``; ``jobs`` processes.

    ``profile`` is best the object itself (a name is resolved once here): a
    profile read from a file reaches every worker as it was read."""
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"policy names must be unique, got {names}")
    profile = use_profile(profile)
    out: dict[str, Outcome] = {}
    if jobs <= 1 or len(specs) <= 1:
        for spec in specs:
            out[spec.name] = _run_one(spec, workload, profile, config)
            if on_done is not None:
                on_done(spec.name)
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(specs))) as pool:
            # the searches are the longest jobs: start them first
            ordered = sorted(specs, key=lambda s: s.kind not in ("static", "hindsight"))
            futures: dict[Future[Outcome], str] = {
                pool.submit(_run_one, s, workload, profile, config): s.name for s in ordered
            }
            for fut in as_completed(futures):
                out[futures[fut]] = fut.result()
                if on_done is not None:
                    on_done(futures[fut])
    return {name: out[name] for name in names}
