"""A tune as pictures: each side's held-back frontier, and every side's trials.

Each side has its own colour and marker, and each picture a second panel
around the target and the chosen settings: the ScaledObjects as written can
cost many times a tuned setting and would squeeze the tuned points into a corner.
"""

from __future__ import annotations

import math
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simulations.tune.held_back import TuneResult
from simulations.tune.search import pareto_front
from simulations.tune.sides import SIDES
from simulations.tune.study import TrialRecord

__all__ = [
    "SideTrials",
    "plot_all_trials",
    "plot_frontier",
    "plot_trials",
    "side_style",
    "trial_points",
    "trials_caption",
]

_PALETTE = (
    "tab:green",
    "tab:blue",
    "tab:purple",
    "tab:orange",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
    "tab:red",
)
"""One colour per side in :data:`simulations.tune.sides.SIDES` order: tab10
without its grey, so no side is drawn in the grey another could share."""
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h", "<")
_EXTRA = ("gold", "navy", "lime", "teal", "maroon", "indigo")
"""Colours for a side name outside :data:`SIDES` (none today)."""

SideTrials = tuple[str, Sequence[TrialRecord], int | None]
"""(side name, its study's trials, its chosen trial number or None)."""


def side_style(name: str, order: int = 0) -> tuple[str, str]:
    """(colour, marker) of side ``name``: fixed per known side, so a side
    looks the same in every picture; ``order`` picks one for another name."""
    if name in SIDES:
        i = SIDES.index(name)
        return _PALETTE[i], _MARKERS[i]
    return _EXTRA[order % len(_EXTRA)], _MARKERS[order % len(_MARKERS)]


def _ring_size(rank: int) -> float:
    """Marker area for the ``rank``-th side drawn: each smaller than the one
    before, so points that coincide show as rings inside one another."""
    return max(30.0, 190.0 - 40.0 * rank)


def plot_trials(
    trials: Sequence[TrialRecord],
    chosen: int | None,
    target: float,
    months: float,
    path: str | Path,
    *,
    name: str = "trials",
) -> Path:
    """One study's trials (:func:`plot_all_trials` with a single side)."""
    return plot_all_trials([(name, trials, chosen)], target, months, path)


def trial_points(trials: Sequence[TrialRecord]) -> Counter[tuple[float, float, bool]]:
    """The points one study's finished trials are drawn at, (attainment,
    cost, met the target), each with how many trials scored it: a floor
    that decides everything makes dozens of trials one point."""
    return Counter(
        (round(t.attainment, 6), round(t.cost_usd, 6), t.feasible)
        for t in trials
        if t.finished and math.isfinite(t.cost_usd)
    )


def _points(n: int) -> str:
    return "1 point" if n == 1 else f"{n} points"


def trials_caption(sides: Sequence[SideTrials]) -> str:
    """What the trials picture draws, counted: every trial, those that ran
    to the end and the points they make, those stopped early (not drawn)."""
    total = sum(len(trials) for _, trials, _ in sides)
    points = [trial_points(trials) for _, trials, _ in sides]
    ran = sum(sum(c.values()) for c in points)
    drawn = sum(len(c) for c in points)
    return (
        f"{total} trials: {ran} ran to the end, drawn at {_points(drawn)}\n(trials that scored "
        f"the same share one, 'xN' beside it); {total - ran} stopped early, not drawn "
        "(cost unknown)"
    )


def plot_all_trials(
    sides: Sequence[SideTrials], target: float, months: float, path: str | Path
) -> Path:
    """Every side's finished trials on the tuning part: filled where they
    met the target, hollow where they missed; trials that scored the same
    share one point, their count beside it; the chosen trial a star; the
    target line. Right panel: the region around the target and the chosen
    trials. Stopped trials have no cost and are counted, not drawn."""
    import matplotlib  # heavy: only a run that draws a plot loads it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_month = 1.0 / months if months > 0 else 1.0
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    focus: list[tuple[float, float]] = []
    picks: dict[tuple[float, float], list[str]] = {}
    for rank, (name, trials, chosen) in enumerate(sides):
        color, marker = side_style(name, rank)
        done = [t for t in trials if t.finished and math.isfinite(t.cost_usd)]
        counts = trial_points(trials)
        label = (f"{name}: {len(done)} ran to the end at {_points(len(counts))}, "
                 f"{len(trials) - len(done)} stopped early")  # fmt: skip
        pick = next((t for t in done if t.number == chosen), None)
        if pick is not None:
            focus.append((100 * pick.attainment, pick.cost_usd * per_month))
            at = (round(pick.attainment, 6), round(pick.cost_usd, 6))
            picks.setdefault(at, []).append(name)
        for ax in axes:
            for i, ((att, cost, feasible), k) in enumerate(sorted(counts.items())):
                x, y = 100 * att, cost * per_month
                ax.scatter([x], [y], s=_ring_size(rank) * 0.5, marker=marker, alpha=0.75,
                           facecolors=color if feasible else "none", edgecolors=color,
                           label=label if i == 0 else None)  # fmt: skip
                if k > 1:
                    ax.annotate(f"x{k}", (x, y), textcoords="offset points", xytext=(5, 4),
                                fontsize=7, color=color)  # fmt: skip
            if pick is not None:
                ax.scatter([100 * pick.attainment], [pick.cost_usd * per_month], marker="*",
                           s=_ring_size(rank) * 1.8, color=color, edgecolor="k", zorder=5 + rank,
                           label=f"{name}: chosen (trial {pick.number})")  # fmt: skip
        met = [t for t in done if t.feasible]
        front = pareto_front([(t.cost_usd, t.attainment) for t in met])
        near = [met[i] for i in front]
        focus.extend((100 * t.attainment, t.cost_usd * per_month) for t in near[:3])
    for ax in axes:
        ax.axvline(100 * target, color="k", ls=":", lw=0.9, label=f"target {100 * target:.2f} %")
        ax.set_xlabel("TTFT SLO attainment on the tuning part (%)")
        ax.set_ylabel("cost (USD per month)")
    axes[0].set_title(trials_caption(sides), fontsize=9)
    shared = sorted(", ".join(names) for names in picks.values() if len(names) > 1)
    if shared:
        _note(axes[1], ["chosen trials at the same point (stars inside one another): "
                        + "; ".join(shared)])  # fmt: skip
    _zoom(axes[1], focus, 100 * target)
    axes[1].set_title("around the target and the chosen trials (filled: meets it)", fontsize=9)
    return _finish(fig, axes, path)


def plot_frontier(result: TuneResult, doc: Mapping[str, Any], path: str | Path) -> Path:
    """Every side's held-back frontier (hollow, joined), its chosen setting
    (filled, black edge) and its ScaledObject as written (a cross), the
    target line and the headline ratio, drawn whether or not a side met it;
    right panel: the tuned points around the target."""
    import matplotlib  # heavy: only a run that draws a plot loads it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    months = result.months[1]
    target = result.target_attainment[1]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.2))
    focus: list[tuple[float, float]] = []
    spots: dict[tuple[float, float], list[str]] = {}
    for rank, s in enumerate(result.sides):
        color, marker = side_style(s.side.name, rank)
        pts = sorted(s.frontier, key=lambda p: p.cost_usd)
        xy = [(100 * p.attainment, p.cost_usd / months) for p in pts]
        chosen = None
        if s.holdout is not None:
            chosen = (
                100 * float(s.holdout["slo_attainment"]),
                float(s.holdout["cost_usd"]) / months,
            )
        focus.extend(xy)
        if chosen is not None:
            focus.append(chosen)
        for point in [*xy, *([chosen] if chosen else [])]:
            names = spots.setdefault((round(point[0], 3), round(point[1], 1)), [])
            if s.side.name not in names:
                names.append(s.side.name)
        b = s.baseline
        for ax in axes:
            if xy:
                ax.plot([x for x, _ in xy], [y for _, y in xy], color=color, lw=1.0, alpha=0.8)
                ax.scatter([x for x, _ in xy], [y for _, y in xy], marker=marker,
                           s=_ring_size(rank), facecolors="none", edgecolors=color, lw=1.4,
                           label=f"{s.side.name}: tuned frontier")  # fmt: skip
            if chosen is not None:
                ax.scatter([chosen[0]], [chosen[1]], marker=marker, s=_ring_size(rank) * 0.6,
                           color=color, edgecolor="k", zorder=5,
                           label=f"{s.side.name}: chosen (printed)")  # fmt: skip
        axes[0].scatter([100 * b.attainment], [b.cost_usd / months], marker="x", s=70,
                        color=color, label=f"{s.side.name}: as written")  # fmt: skip
    bound = doc.get("hindsight")
    for ax in axes:
        ax.axvline(100 * target, color="k", ls=":", lw=0.9, label=f"target {100 * target:.2f} %")
        if bound is not None:  # the cheapest fleet perfect foresight could run at the target
            at = bound["stated_lead"]
            ax.scatter([100 * at["slo_attainment"]], [at["cost_usd"] / months], marker="*",
                       s=200, color="k", zorder=6,
                       label="hindsight schedule (the bound)")  # fmt: skip
            ax.axhline(at["cost_usd"] / months, color="k", ls="--", lw=0.7)
        ax.set_xlabel("TTFT SLO attainment on the held-back part (%)")
        ax.set_ylabel("cost (USD per month)")
    shared = sorted({", ".join(names) for names in spots.values() if len(names) > 1})
    notes = [_ratio_text(doc)]
    if shared:
        notes.append("at the same point (rings inside one another): " + "; ".join(shared))
    _note(axes[1], notes)
    axes[0].set_title(f"{result.trace}: cost vs attainment, held-back part (x: as written)",
                      fontsize=9)  # fmt: skip
    _zoom(axes[1], focus, 100 * target)
    axes[1].set_title(
        "the tuned settings around the target (the bound and as-written points may lie outside)",
        fontsize=9,
    )
    return _finish(fig, axes, path)


def _note(ax: Any, lines: Sequence[str]) -> None:
    """Words in the panel's lower left, where a cost-vs-attainment picture
    seldom has points (cheap and below the target)."""
    text = "\n".join(textwrap.fill(line, 90) for line in lines)
    ax.text(0.02, 0.02, text, transform=ax.transAxes, fontsize=7.5, va="bottom",
            bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "0.8"}, zorder=10,
            wrap=True)  # fmt: skip


def _ratio_text(doc: Mapping[str, Any]) -> str:
    """The headline ratio as the report prints it: the chosen (printed)
    settings', not the frontier's."""
    verdict = doc.get("verdict") or {}
    ratio = verdict.get("chosen_cost_ratio")
    if ratio is None:
        return "no prescaler / KEDA queue-length ratio: it needs both sides' chosen settings"
    side = verdict.get("ratio_side") or "keda-queue"
    return f"prescaler / {side}, the chosen settings as printed: {ratio:.2f}x"


def _zoom(ax: Any, points: Sequence[tuple[float, float]], target_x: float) -> None:
    """Limit ``ax`` to ``points`` and the target line, with a margin."""
    xs = [x for x, y in points if math.isfinite(x) and math.isfinite(y)] + [target_x]
    ys = [y for x, y in points if math.isfinite(x) and math.isfinite(y)]
    if not ys:
        return
    x_lo, x_hi = min(xs), max(xs)
    y_lo, y_hi = min(ys), max(ys)
    x_pad = max(0.5, 0.08 * (x_hi - x_lo))
    y_pad = max(0.05 * abs(y_hi) + 1.0, 0.08 * (y_hi - y_lo))
    ax.set_xlim(x_lo - x_pad, x_hi + x_pad)
    # room at the bottom for the panel's words (:func:`_note`)
    ax.set_ylim(y_lo - max(y_pad, 0.3 * (y_hi - y_lo)), y_hi + y_pad)


def _finish(fig: Any, axes: Sequence[Any], path: str | Path) -> Path:
    """Grid, one legend (below both panels) and layout; the PNG written."""
    import matplotlib.pyplot as plt  # heavy: only a run that draws a plot loads it

    for ax in axes:
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    seen: dict[str, Any] = {}
    for h, label in zip(handles, labels, strict=True):
        seen.setdefault(label, h)
    fig.legend(list(seen.values()), list(seen), fontsize=7, loc="lower center",
               ncol=min(3, max(1, len(seen))), frameon=False)  # fmt: skip
    rows = math.ceil(len(seen) / 3)
    fig.tight_layout(rect=(0.0, min(0.45, 0.035 * rows + 0.02), 1.0, 1.0))
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
