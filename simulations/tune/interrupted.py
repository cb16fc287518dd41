"""A tune stopped by Ctrl-C: what its trials found so far, written as promised.

A stopped tune has no held-back scores yet, so ``--json`` and ``--plot``
carry the tuning part's trials so far (``"interrupted": true``,
docs/contracts.md); the trials stay in the storage and the same command
resumes every study where it stopped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulations.tune.plot import plot_trials
from simulations.tune.search import pareto_front
from simulations.tune.sides import Side
from simulations.tune.storage import shown_url
from simulations.tune.study import StudyResult

__all__ = [
    "SoFar",
    "TuneInterrupted",
    "interrupted_document",
    "so_far_line",
    "write_so_far",
]


@dataclass(frozen=True)
class SoFar:
    """A stopped tune: each side that started, with its trials so far."""

    trace: str
    slo_ttft_s: float
    target: float
    """``--target``, as a fraction of the idle ceiling."""
    bar: float
    """The attainment a trial had to reach on the tuning part."""
    months: float
    """The tuning part's span in months (730 h), for per-month costs."""
    storage: str
    sides: tuple[tuple[Side, StudyResult], ...]

    @property
    def trials(self) -> int:
        return sum(len(study.trials) for _, study in self.sides)


class TuneInterrupted(Exception):
    """Raised by :func:`simulations.tune.run.tune` on Ctrl-C, with what it had."""

    def __init__(self, so_far: SoFar) -> None:
        super().__init__(f"interrupted after {so_far.trials} trials")
        self.so_far = so_far


def interrupted_document(so_far: SoFar) -> dict[str, Any]:
    """The ``--json`` document of a stopped tune (docs/contracts.md)."""

    def side(study: StudyResult) -> dict[str, Any]:
        best = study.best
        return {
            "trials": len(study.trials),
            "finished": sum(1 for t in study.trials if t.finished),
            "best_trial": None if best is None else best.number,
            "setting": None if best is None else dict(best.metadata),
            "tie_break": None if study.tie_break is None else study.tie_break.as_dict(),
            "tuned": None
            if best is None
            else {
                "slo_attainment": best.attainment,
                "cost_usd": best.cost_usd,
                "cost_per_month_usd": best.cost_usd / so_far.months if so_far.months > 0 else None,
            },
        }

    return {
        "interrupted": True,
        "trace": so_far.trace,
        "slo_ttft_s": so_far.slo_ttft_s,
        "target": so_far.target,
        "target_attainment": {"tuned": so_far.bar},
        "trials": so_far.trials,
        "sides": {s.name: {"description": s.description, **side(st)} for s, st in so_far.sides},
        "storage": shown_url(so_far.storage),
    }


def write_so_far(so_far: SoFar, json_path: str | None, plot_path: str | None) -> list[Path]:
    """Write the document and both pictures where the command was told to;
    the paths written."""
    written: list[Path] = []
    if json_path:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        doc = interrupted_document(so_far)
        path.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
        written.append(path)
    if plot_path:
        written.append(_plot_fronts(so_far, plot_path))
        trials_path = Path(plot_path).with_name(Path(plot_path).stem + "-trials.png")
        first = next((st for s, st in so_far.sides if s.name == "prescaler"), None)
        if first is None and so_far.sides:
            first = so_far.sides[0][1]
        trials = first.trials if first is not None else ()
        chosen = first.best.number if first is not None and first.best is not None else None
        written.append(plot_trials(trials, chosen, so_far.bar, so_far.months, trials_path))
    return written


def _plot_fronts(so_far: SoFar, path: str | Path) -> Path:
    """Each side's Pareto front of its finished trials on the tuning part
    (the held-back frontier needs the scoring a stopped tune never reached)."""
    import matplotlib  # heavy: only a run that draws a plot loads it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_month = 1.0 / so_far.months if so_far.months > 0 else 1.0
    fig, ax = plt.subplots(figsize=(8, 5))
    for side, study in so_far.sides:
        done = [t for t in study.trials if t.finished and math.isfinite(t.cost_usd)]
        front = [done[i] for i in pareto_front([(t.cost_usd, t.attainment) for t in done])]
        if front:
            ax.step(
                [100 * t.attainment for t in front],
                [t.cost_usd * per_month for t in front],
                where="pre",
                marker="o",
                label=f"{side.name}: {len(study.trials)} trials so far",
            )
    ax.axvline(
        100 * so_far.bar, color="k", ls=":", lw=0.9, label=f"target {100 * so_far.bar:.2f} %"
    )
    ax.set_xlabel("TTFT SLO attainment on the tuning part (%)")
    ax.set_ylabel("cost (USD per month)")
    ax.set_title(
        f"{so_far.trace}: interrupted; the tuning part's trials so far (no held-back scores)",
        fontsize=10,
    )
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def so_far_line(so_far: SoFar, written: Sequence[Path], command: str) -> str:
    """The one line a stopped tune prints: what it ran, what it wrote, how to resume."""
    counts = ", ".join(f"{s.name} {len(st.trials)}" for s, st in so_far.sides) or "none begun"
    wrote = f"wrote {', '.join(map(str, written))} from them; " if written else ""
    return (
        f"{command}: interrupted after {so_far.trials} trial{'' if so_far.trials == 1 else 's'} "
        f"({counts}); {wrote}"
        f"run the same command again to resume (the trials are kept in {shown_url(so_far.storage)})"
    )
