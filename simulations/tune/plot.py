"""A tune as pictures: each side's held-back frontier, and the trials.

Feasible trials, infeasible ones, the Pareto front (cheapest for each
attainment), the chosen setting, the target line and the reactive baseline.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from simulations.tune.search import pareto_front
from simulations.tune.study import TrialRecord

if TYPE_CHECKING:
    from simulations.tune.run import TuneResult

__all__ = ["plot_frontier", "plot_trials"]


def plot_trials(
    trials: Sequence[TrialRecord],
    chosen: int | None,
    target: float,
    months: float,
    path: str | Path,
    *,
    reactive: tuple[float, float, float] | None = None,
) -> Path:
    """Write the PNG; ``reactive`` is (attainment, cost USD, threshold)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [t for t in trials if t.finished and math.isfinite(t.cost_usd)]
    per_month = 1.0 / months if months > 0 else 1.0
    fig, ax = plt.subplots(figsize=(8, 5))
    for feasible, color, label in ((True, "tab:green", "meets SLO"),
                                   (False, "tab:red", "misses SLO")):  # fmt: skip
        pts = [t for t in done if t.feasible == feasible]
        if pts:
            ax.scatter([100 * t.attainment for t in pts], [t.cost_usd * per_month for t in pts],
                       s=18, alpha=0.6, color=color, label=f"trial, {label}")  # fmt: skip
    front = pareto_front([(t.cost_usd, t.attainment) for t in done])
    if front:
        f = [done[i] for i in front]
        ax.step([100 * t.attainment for t in f], [t.cost_usd * per_month for t in f],
                where="pre", color="0.3", lw=1.0, label="Pareto front")  # fmt: skip
    pick = next((t for t in done if t.number == chosen), None)
    if pick is not None:
        ax.scatter([100 * pick.attainment], [pick.cost_usd * per_month], marker="*", s=260,
                   color="gold", edgecolor="k", zorder=5,
                   label=f"chosen (trial {pick.number})")  # fmt: skip
    if reactive is not None and math.isfinite(reactive[1]):
        ax.scatter([100 * reactive[0]], [reactive[1] * per_month], marker="D", s=60,
                   color="tab:blue", edgecolor="k", zorder=5,
                   label=f"reactive, threshold {reactive[2]:g}")  # fmt: skip
    ax.axvline(100 * target, color="k", ls=":", lw=0.9, label=f"target {100 * target:.2f} %")
    ax.set_xlabel("TTFT SLO attainment on the tuning part (%)")
    ax.set_ylabel("cost (USD per month)")
    ax.set_title(f"{len(trials)} trials ({len(trials) - len(done)} stopped early, not shown)",
                 fontsize=10)  # fmt: skip
    return _finish(fig, ax, path)


def plot_frontier(result: TuneResult, doc: Mapping[str, Any], path: str | Path) -> Path:
    """Every side's held-back frontier on one pair of axes (shared scales),
    each side's ScaledObject as written, the target line, and the cost
    ratio at the target written on it; drawn whether or not a side met it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    months = result.months[1]
    target = result.target_attainment[1]
    colors = {
        "prescaler": "tab:green",
        "keda-queue": "tab:blue",
        "keda-queue-kv": "tab:purple",
        "user": "tab:orange",
    }
    fig, ax = plt.subplots(figsize=(8, 5))
    for s in result.sides:
        color = colors.get(s.side.name, "0.4")
        pts = sorted(s.frontier, key=lambda p: p.cost_usd)
        if pts:
            ax.plot([100 * p.attainment for p in pts], [p.cost_usd / months for p in pts],
                    marker="o", color=color, label=f"{s.side.name}: tuned frontier")  # fmt: skip
        b = s.baseline
        ax.scatter([100 * b.attainment], [b.cost_usd / months], marker="x", s=70, color=color,
                   label=f"{s.side.name}: as written")  # fmt: skip
    ax.axvline(100 * target, color="k", ls=":", lw=0.9, label=f"target {100 * target:.2f} %")
    bound = doc.get("hindsight")
    if bound is not None:  # the cheapest fleet perfect foresight could run at the target
        at = bound["stated_lead"]
        ax.scatter([100 * at["slo_attainment"]], [at["cost_usd"] / months], marker="*", s=200,
                   color="k", zorder=6, label="hindsight schedule (the bound)")  # fmt: skip
        ax.axhline(at["cost_usd"] / months, color="k", ls="--", lw=0.7)
    ratio = doc.get("cost_ratio_at_target")
    text = (
        f"prescaler / KEDA queue cost at the target: {ratio:.2f}"
        if ratio is not None
        else "no ratio at the target: a side meets it nowhere"
    )
    ax.text(0.02, 0.02, text, transform=ax.transAxes, fontsize=9)
    ax.set_xlabel("TTFT SLO attainment on the held-back part (%)")
    ax.set_ylabel("cost (USD per month)")
    ax.set_title(f"{result.trace}: cost vs attainment, held-back part", fontsize=10)
    return _finish(fig, ax, path)


def _finish(fig: Any, ax: Any, path: str | Path) -> Path:
    """Grid, legend and layout as both pictures share them; the PNG written."""
    import matplotlib.pyplot as plt

    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
