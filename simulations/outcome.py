"""A policy's outcome and the SLO attainment it is judged by.

Below the runner and the hindsight search alike, so both can name an outcome
without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.profiles import Profile
from engine.replica import Replica
from simulations.simulation import COMPLETED, SimResult
from simulations.traffic import Workload

__all__ = ["Outcome", "attainment", "idle_attainment", "met_slo"]


@dataclass(frozen=True)
class Outcome:
    """One policy's result, plus the fleet sizes tried when it was searched."""

    result: SimResult
    tried: tuple[tuple[int, float | None], ...] = ()
    replicas: int | None = None
    """static: the fleet size run."""
    target: float | None = None
    """static search: the attainment it had to meet."""


def met_slo(result: SimResult) -> np.ndarray:
    """Per request: completed with TTFT within the SLO (a timed-out or
    rejected request misses it)."""
    return (result.status == COMPLETED) & (result.ttft_s <= result.slo_ttft_s)


def attainment(result: SimResult) -> float:
    """Fraction of all requests that completed with TTFT within the SLO."""
    n = result.status.size
    if n == 0:
        return 1.0
    return float(np.count_nonzero(met_slo(result))) / n


def idle_attainment(workload: Workload, profile: Profile, slo_ttft_s: float) -> float:
    """Fraction of requests whose prefill alone, on an idle replica, meets the
    SLO: no fleet does better (a long prompt is slow however many replicas)."""
    if len(workload) == 0:
        return 1.0
    budget = max(1, Replica(profile).limits.max_num_batched_tokens)
    cache: dict[int, float] = {}
    ok = 0
    for p in workload.prompt_tokens.tolist():
        t = cache.get(p)
        if t is None:
            t, done = 0.0, 0
            while done < p:
                chunk = min(budget, p - done)
                done += chunk
                t += profile.step_time_s(chunk, 0, done)
            cache[p] = t
        ok += t <= slo_ttft_s
    return ok / len(workload)
