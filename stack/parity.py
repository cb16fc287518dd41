"""Live versus simulated: the same trace window through ``prescaler stack`` and the simulator.

:func:`simulated` runs the simulator on exactly what a stack run replays (the
same workload, profile, seed and ScaledObject); :func:`compare` puts the
two side by side, figure by figure, as relative differences
``|live - sim| / max(|sim|, floor)``:

- ``spec``: the Deployment's replicas (what KEDA and the HPA wrote) on a
  common grid of 15 trace seconds, as the mean absolute difference over
  the mean simulated value; ``desired`` the same for the scaler's answer
  (predictive only);
- ``mean_replicas``, ``ttft_p50_s``, ``ttft_p99_s``, ``tpot_p50_s``,
  ``e2e_p99_s``: from the two summaries.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from simulations.policies import PolicySpec, scaledobject_spec
from simulations.report import policy_summary
from simulations.runner import Outcome, run_policy
from simulations.simulation import SimConfig, SimResult
from stack.run import StackRun

__all__ = ["FIGURES", "compare", "simulated", "timeline_difference"]

FIGURES = ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "e2e_p99_s", "mean_replicas")
GRID_S = 15.0


def simulated(run: StackRun) -> SimResult:
    """The simulator's run of the stack run's workload, policy, profile, seed and
    opening fleet (the one the stack opened with: stated, or sized from the traffic
    before the window, as ``prescaler simulate`` sizes it)."""
    spec: PolicySpec = scaledobject_spec(run.so)
    spec = PolicySpec(run.opts.policy, spec.kind, scaledobject=spec.scaledobject)
    opening = run.control.initial_replicas if run.control is not None else None
    config = SimConfig(
        slo_ttft_s=run.opts.slo_ttft_s,
        timeout_s=run.opts.timeout_s,
        rate_window_s=run.opts.rate_window_s,
        seed=run.opts.seed,
        initial_replicas=opening or None,
    )
    return run_policy(spec, run.workload, run.profile, config)


def _grid(timeline: Mapping[str, np.ndarray], key: str, grid: np.ndarray) -> np.ndarray | None:
    t = timeline.get("t")
    v = timeline.get(key)
    if t is None or v is None or len(t) == 0:
        return None
    t = np.asarray(t, dtype=float)
    v = np.asarray(v, dtype=float)
    idx = np.searchsorted(t, grid, side="right") - 1
    out = np.where(idx >= 0, v[np.clip(idx, 0, len(v) - 1)], np.nan)
    return out


def timeline_difference(
    live: Mapping[str, np.ndarray], sim: Mapping[str, np.ndarray], key: str, duration_s: float
) -> float | None:
    """Mean |live - sim| over a 15 s grid, relative to the mean simulated value."""
    grid = np.arange(GRID_S, duration_s + 1e-9, GRID_S)
    a, b = _grid(live, key, grid), _grid(sim, key, grid)
    if a is None or b is None:
        return None
    ok = np.isfinite(a) & np.isfinite(b)
    if not ok.any():
        return None
    scale = max(float(np.mean(np.abs(b[ok]))), 1e-9)
    return float(np.mean(np.abs(a[ok] - b[ok]))) / scale


def _rel(live: float | None, sim: float | None, floor: float = 1e-9) -> float | None:
    if live is None or sim is None or not (math.isfinite(live) and math.isfinite(sim)):
        return None
    return abs(live - sim) / max(abs(sim), floor)


def compare(live: SimResult, sim: SimResult) -> dict[str, Any]:
    """Per-figure relative differences and both sides' values (plain JSON)."""
    a, b = policy_summary(Outcome(live)), policy_summary(Outcome(sim))
    out: dict[str, Any] = {"live": {}, "sim": {}, "difference": {}}
    for key in FIGURES:
        out["live"][key] = a[key]
        out["sim"][key] = b[key]
        out["difference"][key] = _rel(a[key], b[key])
    duration = min(live.duration_s, sim.duration_s)
    for key in ("spec", "desired"):
        out["difference"][f"{key}_timeline"] = timeline_difference(
            live.timeline, sim.timeline, key, duration
        )
    for key in ("spec", "desired", "ready"):
        for side, result in (("live", live), ("sim", sim)):
            if key in result.timeline:
                out[side][f"{key}_timeline"] = [
                    round(float(x), 3) for x in np.asarray(result.timeline[key])
                ]
    return out
