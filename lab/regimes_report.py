"""A regime sweep's verdicts, table and plot, from its JSON document.

Apart from the sweep (:mod:`lab.regimes`) so a recorded result can be judged
and drawn again without running anything:
``python -m lab.regimes --report bench-results/regimes.json [PLOT.png]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["cost_text", "markdown_table", "plot_sweep", "ratio_text", "targets_met"]

NEVER_WORSE = 1.0
MUCH_BETTER = 0.8
FORECAST_PAYS = 0.85
LONG_LEAD_MIN = 10.0
MISSED_Y = 1.2
"""Where the plot marks a cell prescaler's chosen setting missed (no ratio)."""


def _rows(doc: Mapping[str, Any]) -> list[tuple[str, float, str, Mapping[str, Any]]]:
    return [
        (regime, cell["lead_time_min"], label, row)
        for regime, body in doc["regimes"].items()
        for cell in body["cells"]
        for label, row in cell["prescaler"].items()
    ]


def targets_met(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The two targets, judged on the sweep's figures:

    (a) never worse: prescaler tuned (the cheaper of forecast on and off)
    costs at most the best tuned KEDA set-up in every cell where both met
    the target; a cell where prescaler met it and KEDA did not counts for
    it, the reverse against it.
    (b) somewhere much better: in some cell at a lead time of 10 minutes or
    more, prescaler with the forecast on costs at most 0.8 x the best KEDA
    set-up and at most 0.85 x prescaler with the forecast off."""
    worse: list[str] = []
    better: list[str] = []
    unjudged: list[str] = []
    for regime, lead, label, row in _rows(doc):
        name = f"{regime} @ {lead:g} min, {label}"
        ratios = [row["ratio_on_vs_best_keda"], row["ratio_off_vs_best_keda"]]
        known = [r for r in ratios if r is not None]
        p_met = any(
            row[v]["cost_at_target_usd"] is not None for v in ("forecast-on", "forecast-off")
        )
        k_met = _best_keda(doc, regime, lead) is not None
        if known:
            if min(known) > NEVER_WORSE:
                worse.append(name)
        elif k_met and not p_met:
            worse.append(name)
        elif not k_met and not p_met:
            unjudged.append(name)
        on_keda, on_off = row["ratio_on_vs_best_keda"], row["ratio_forecast_on_vs_off"]
        if (
            lead >= LONG_LEAD_MIN
            and on_keda is not None
            and on_keda <= MUCH_BETTER
            and on_off is not None
            and on_off <= FORECAST_PAYS
        ):
            better.append(name)
    return {
        "never_worse": {"met": not worse, "worse_cells": worse, "unjudged_cells": unjudged},
        "somewhere_much_better": {"met": bool(better), "cells": better},
    }


def _best_keda(doc: Mapping[str, Any], regime: str, lead: float) -> float | None:
    for cell in doc["regimes"][regime]["cells"]:
        if cell["lead_time_min"] == lead:
            value = cell["best_keda_cost_usd"]
            return None if value is None else float(value)
    return None


def plot_sweep(doc: Mapping[str, Any], path: Path) -> None:
    """Cost ratio (prescaler tuned / best tuned KEDA) against lead time, one
    line per regime, forecast on solid and off dashed, one panel per
    pre-warming setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = sorted({label for _, _, label, _ in _rows(doc)})
    fig, axes = plt.subplots(1, max(1, len(labels)), figsize=(6 * max(1, len(labels)), 4.5))
    axes_list: Sequence[Any] = list(np.atleast_1d(axes))
    for ax, label in zip(axes_list, labels, strict=False):
        for k, regime in enumerate(doc["regimes"]):
            color = f"C{k}"
            for variant, style in (("on", "-"), ("off", "--")):
                pts = [
                    (lead, row[f"ratio_{variant}_vs_best_keda"])
                    for r, lead, lab, row in _rows(doc)
                    if r == regime and lab == label and row[f"ratio_{variant}_vs_best_keda"]
                ]
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    ax.plot(xs, ys, style, marker="o", color=color,
                            label=f"{regime}, forecast {variant}")  # fmt: skip
                missed = [
                    lead
                    for r, lead, lab, row in _rows(doc)
                    if r == regime and lab == label
                    and row[f"forecast-{variant}"]["cost_at_target_usd"] is None
                ]  # fmt: skip
                if missed:
                    ax.plot(missed, [MISSED_Y] * len(missed), "x", color=color, ms=9)
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.axhline(MUCH_BETTER, color="grey", lw=0.8, ls=":")
        ax.text(0.01, 0.99, f"x at {MISSED_Y:g}: prescaler missed the held-back target",
                transform=ax.transAxes, va="top", fontsize=7)  # fmt: skip
        ax.set_xlabel("replica lead time (min)")
        ax.set_ylabel("cost ratio: prescaler tuned / best tuned KEDA")
        ax.set_title(label)
        if ax.get_legend_handles_labels()[1]:
            ax.legend(fontsize=7)
        else:  # no ratio to draw: say why rather than leave an empty panel
            ax.text(0.5, 0.5, "no ratio: no tuned KEDA side met the held-back target\n"
                    "(or none was tuned)", transform=ax.transAxes, ha="center",
                    va="center", fontsize=9)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cost_text(x: float | None) -> str:
    """A held-back cost for a table: "missed" where the setting missed the target."""
    return "missed" if x is None else f"${x:,.2f}"


def ratio_text(x: float | None) -> str:
    """A cost ratio for a table: "-" where either side missed."""
    return "-" if x is None else f"{x:.2f}x"


def markdown_table(doc: Mapping[str, Any]) -> str:
    """The sweep as a Markdown table: per cell, each KEDA side's held-back
    cost at the target ("missed": its tuned setting missed the held-back
    target), prescaler's with the forecast on and off, and the ratios."""
    keda_names = list(doc["config"]["keda_sides"])
    head = [
        "regime", "lead", "pre-warm", *keda_names,
        "prescaler fc on", "fc off", "on / best KEDA", "off / best KEDA", "on / off",
    ]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for regime, body in doc["regimes"].items():
        for cell in body["cells"]:
            keda = [cost_text(cell["keda"][n]["cost_at_target_usd"]) for n in keda_names]
            for label, row in cell["prescaler"].items():
                lines.append(
                    "| " + " | ".join([
                        regime, f"{cell['lead_time_min']:g} min", label.removeprefix("prewarm-"),
                        *keda,
                        cost_text(row["forecast-on"]["cost_at_target_usd"]),
                        cost_text(row["forecast-off"]["cost_at_target_usd"]),
                        ratio_text(row["ratio_on_vs_best_keda"]),
                        ratio_text(row["ratio_off_vs_best_keda"]),
                        ratio_text(row["ratio_forecast_on_vs_off"]),
                    ]) + " |"
                )  # fmt: skip
    return "\n".join(lines) + "\n"
