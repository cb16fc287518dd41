"""The regime sweep under several seeds: does a verdict hold on other days?

A seed draws a regime's whole trace (which hours the sessions fall in, how
many requests each brings), the arrivals inside it and the sampler's seed,
so one seed's sweep judges one tuning day and one held-back day. A chosen
setting that meets the held-back target by luck of that day's sessions
misses on the next pair, and a ratio from one seed says little. This runs
the same sweep (:mod:`lab.regimes`) for each seed, every cell of
every seed in one process pool, and reports per cell the ratios under each
seed and how many seeds each side's chosen setting held out under.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lab.regime_config import SweepConfig
from lab.regimes import run_sweeps
from lab.regimes_report import cost_text, ratio_text, targets_met

__all__ = ["markdown_seeds", "run_seeds", "seeds_summary"]


def _forecaster_lines(cells: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """A table of the held-back cost each forecaster's tuned setting buys,
    beside prescaler's own (on) and none (off), and its ratio to prescaler's;
    nothing when the sweep tuned no further forecaster."""
    found = (m for rows in cells.values() for r in rows for m in r.get("forecasters_cost_usd", {}))
    methods = list(dict.fromkeys(found))
    if not methods:
        return []
    head = [
        "cell",
        "seed",
        "prescaler's (on)",
        *methods,
        "none (off)",
        *(f"{m} / on" for m in methods),
    ]
    lines = ["", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, rows in cells.items():
        for r in rows:
            on, costs = r["forecast_on_cost_usd"], r.get("forecasters_cost_usd", {})
            ratios = [
                ratio_text(None if costs.get(m) is None or on is None else costs[m] / on)
                for m in methods
            ]
            lines.append(
                "| " + " | ".join([
                    name, str(r["seed"]), cost_text(on),
                    *(cost_text(costs.get(m)) for m in methods),
                    cost_text(r["forecast_off_cost_usd"]), *ratios,
                ]) + " |"
            )  # fmt: skip
    return lines


def run_seeds(config: SweepConfig, seeds: Sequence[int], directory: Path) -> dict[str, Any]:
    """``config``'s sweep under each seed (``config.seed`` is replaced),
    each seed's traces and studies under ``directory/seed-N``: every seed's
    sweep document, and their summary (:func:`seeds_summary`)."""
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct and at least one, got {list(seeds)}")
    sweeps = [(dataclasses.replace(config, seed=s), directory / f"seed-{s}") for s in seeds]
    docs = run_sweeps(sweeps)
    return {"seeds": list(seeds), "sweeps": docs, "summary": seeds_summary(docs)}


def seeds_summary(docs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per cell (regime, lead, pre-warming), one row per seed: the cheapest
    KEDA side that met the held-back target, prescaler's forecast on and off,
    their ratios. Per side, the seeds under which its chosen setting met the
    held-back target (a missed study counts as a miss). And each target of
    :func:`lab.regimes_report.targets_met` judged under every seed: never
    worse only if it holds under each; somewhere much better only in a cell
    where it holds under each."""
    cells: dict[str, list[dict[str, Any]]] = {}
    held: dict[str, list[int]] = {}
    verdicts = []
    for doc in docs:
        seed = int(doc["config"]["seed"])
        verdicts.append(targets_met(doc))
        for regime, body in doc["regimes"].items():
            for cell in body["cells"]:
                where = f"{regime} @ {cell['lead_time_min']:g} min"
                for side_name, side_row in cell["keda"].items():
                    _count(held, f"{where}: {side_name}", side_row, seed)
                for label, row in cell["prescaler"].items():
                    cells.setdefault(f"{where}, {label}", []).append({
                        "seed": seed,
                        "keda_sides": sorted(cell["keda"]),
                        "best_keda_side": cell["best_keda_side"],
                        "best_keda_cost_usd": cell["best_keda_cost_usd"],
                        "forecast_on_cost_usd": row["forecast-on"]["cost_at_target_usd"],
                        "forecast_off_cost_usd": row["forecast-off"]["cost_at_target_usd"],
                        "ratio_on_vs_best_keda": row["ratio_on_vs_best_keda"],
                        "ratio_forecast_on_vs_off": row["ratio_forecast_on_vs_off"],
                        "forecasters_cost_usd": {
                            v: row[f"forecast-{v}"]["cost_at_target_usd"]
                            for v in _forecasters(row)
                        },
                    })  # fmt: skip
                    for v in ("on", "off", *_forecasters(row)):
                        key = f"{where}: prescaler {label}, forecast {v}"
                        _count(held, key, row[f"forecast-{v}"], seed)
    much_better = [v["somewhere_much_better"]["cells"] for v in verdicts]
    common = [c for c in much_better[0] if all(c in cs for cs in much_better)] if docs else []
    return {
        "cells": cells,
        "held_out_seeds": held,
        "targets": {
            "never_worse_every_seed": all(v["never_worse"]["met"] for v in verdicts),
            "worse_cells": sorted({c for v in verdicts for c in v["never_worse"]["worse_cells"]}),
            "somewhere_much_better_every_seed": common,
        },
    }


def _forecasters(row: Mapping[str, Any]) -> list[str]:
    """The further forecasters a prescaler row was tuned with
    (:attr:`lab.regime_config.SweepConfig.forecasters`), in run order."""
    return [
        k.removeprefix("forecast-")
        for k in row
        if k.startswith("forecast-") and k not in ("forecast-on", "forecast-off")
    ]


def _count(held: dict[str, list[int]], key: str, row: Mapping[str, Any], seed: int) -> None:
    seeds = held.setdefault(key, [])
    if row["cost_at_target_usd"] is not None:
        seeds.append(seed)


def markdown_seeds(doc: Mapping[str, Any]) -> str:
    """The summary as Markdown: one row per cell and seed, then how many
    seeds each side's chosen setting held out under."""
    summary, n = doc["summary"], len(doc["seeds"])
    lines = [
        "| cell | seed | best tuned KEDA | prescaler fc on | fc off | on / best KEDA | on / off |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, rows in summary["cells"].items():
        for r in rows:
            keda = cost_text(r["best_keda_cost_usd"])
            if not r.get("keda_sides", True):  # none tuned (older documents: unknown)
                keda = "not tuned"
            elif r["best_keda_side"]:
                keda += f" ({r['best_keda_side']})"
            lines.append(
                f"| {name} | {r['seed']} | {keda} | {cost_text(r['forecast_on_cost_usd'])} "
                f"| {cost_text(r['forecast_off_cost_usd'])} "
                f"| {ratio_text(r['ratio_on_vs_best_keda'])} "
                f"| {ratio_text(r['ratio_forecast_on_vs_off'])} |"
            )
    lines += _forecaster_lines(summary["cells"])
    lines += ["", "| side | seeds whose held-back target its chosen setting met |", "|---|---|"]
    for side, seeds in summary["held_out_seeds"].items():
        lines.append(f"| {side} | {len(seeds)} of {n} ({', '.join(map(str, seeds)) or 'none'}) |")
    targets = summary["targets"]
    tuned = any(r.get("keda_sides", True) for rows in summary["cells"].values() for r in rows)
    verdict = "yes" if targets["never_worse_every_seed"] else "no"
    lines += [
        "",
        f"Never worse under every seed: {verdict if tuned else 'not judged (no KEDA side tuned)'}"
        + (f" (worse: {'; '.join(targets['worse_cells'])})" if targets["worse_cells"] else ""),
        "Much better under every seed: "
        + ("; ".join(targets["somewhere_much_better_every_seed"]) or "nowhere"),
    ]
    return "\n".join(lines) + "\n"
