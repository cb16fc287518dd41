"""Forecast ablation: what prescaler's forecast alone buys, untuned.

The regime sweep (:mod:`lab.regimes`) tunes every side, so a small
budget decides its figures; this replays the settings as shipped instead,
with the same ScaledObject at ``forecast: off`` as the ablation. Each cell is
one regime (:mod:`lab.regime_generator`) at one lead-time preset
(:mod:`simulations.lead_time`): a 5-day trace whose day 4 (or its focus
hours) is scored, with everything before it as the trace's past, the
tracker backfilled with what the emulated Prometheus scraped over it
(:func:`simulations.sim_inputs.window_start`, as ``prescaler simulate``
does: 3 days and an hour, so the forecaster's daily terms are on). Beside
cost and attainment, each cell says when the fleet gained its first replica
around every session or ramp start, the moment prediction is meant to buy.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from engine.profiles import get_profile
from lab.config import ConfigError, load_section
from lab.regime_config import LEAD_TIMES
from lab.regime_generator import REGIMES, regime_counts
from simulations.autoscaling.cron import DEFAULT_EPOCH
from simulations.autoscaling.scaledobject import (
    START_ANNOTATION,
    ScaledObjectSpec,
    parse_scaledobject,
    seeds_reactive,
)
from simulations.sim_inputs import SimInputs, window_start
from simulations.sim_types import COMPLETED, REJECTED, TIMED_OUT, SimConfig
from simulations.traffic import TrafficOptions, load_workload
from simulations.tune.manifest import manifest_of
from simulations.tune.search import default_bases, score
from simulations.tune.sides import (
    cron_manifest,
    gateway_manifest,
    prescaler_gateway_manifest,
    queue_and_kv_manifest,
)

__all__ = [
    "SIDES",
    "AblationConfig",
    "main",
    "markdown_table",
    "onset_minutes",
    "replica_lead",
    "run_ablation",
    "run_cell",
]

PROFILE = "llama-3-8b@g5.xlarge"
MAX_REPLICAS = 16
TRACE_DAYS = 5
SCORED_DAY = 4
"""Days 0-3 are the past (3 days and an hour of it backfilled); day 4 is scored."""
SIDES = (
    "prescaler-gateway-forecast-auto",
    "prescaler-gateway-seasonal-off",
    "prescaler-gateway-forecast-off",
    "keda-gateway",
    "keda-queue-kv-cron",
)
"""``seasonal-off``: the forecast on with ``seasonalPeakDays: "0"``, the
forecaster alone (what the recent days' peak adds is the difference)."""
ONSET_RISE_RPS = 0.25
"""A session or ramp starts at a minute whose expected rate is this much above
the minute before's (the regimes' events rise by 1 request/s or more at once,
the business-hours ramp by about 0.3 a minute; interactive noise by less)."""
ONSET_GAP_MIN = 30
"""A rise within this many minutes of the last start belongs to that start."""
LOOKBACK_S = 1800.0
"""How far before a start the fleet's low point is sought (longer than the
longest preset lead time, 15 minutes)."""


@dataclass(frozen=True)
class AblationConfig:
    """The grid: regimes x lead times (minutes), the sides scored in each cell."""

    regimes: tuple[str, ...] = ("sparse-bursts", "business-hours", "scheduled-batch")
    leads_min: tuple[float, ...] = (15.0, 2.5)
    sides: tuple[str, ...] = SIDES
    focus: bool = True
    """Score only the regime's focus hours of day 4 (else the whole day)."""
    seed: int = 0
    jobs: int = 1
    """Cells at once, each in its own process."""

    def __post_init__(self) -> None:
        for regime in self.regimes:
            if regime not in REGIMES:
                known = ", ".join(REGIMES)
                raise ConfigError("regimes", f"unknown regime {regime!r} (known: {known})")
        for lead in self.leads_min:
            if lead not in LEAD_TIMES:
                raise ConfigError(
                    "leads_min",
                    f"lead time {lead:g} min has no preset (known: "
                    f"{', '.join(f'{k:g}' for k in LEAD_TIMES)})",
                )
        for side in self.sides:
            if side not in SIDES:
                raise ConfigError("sides", f"unknown side {side!r} (known: {', '.join(SIDES)})")
        if self.jobs < 1:
            raise ConfigError("jobs", f"must be >= 1, got {self.jobs}")

    @classmethod
    def load(cls, path: Path) -> AblationConfig:
        """The ``forecast_ablation`` section of the lab config at ``path``,
        every key absent at its default."""
        s = load_section(path, "forecast_ablation", CONFIG_KEYS)
        default = cls()
        with s.fields():
            return cls(
                regimes=s.strs("regimes", default.regimes),
                leads_min=s.floats("leads_min", default.leads_min),
                sides=s.strs("sides", default.sides),
                focus=s.get_bool("focus", default.focus),
                jobs=s.get_int("jobs", default.jobs),
            )


CONFIG_KEYS = ("regimes", "leads_min", "sides", "focus", "jobs")
"""The keys of a lab config's ``forecast_ablation`` section."""


def run_recorded(config: AblationConfig, results: Path, scratch: Path) -> dict[str, Any]:
    """Run the grid and write ``forecast_ablation.json`` and ``.md`` under
    ``results`` (``forecast_ablation_day.*`` when whole days are scored)."""
    doc = run_ablation(config, scratch)
    doc["load_average"] = list(os.getloadavg())
    results.mkdir(parents=True, exist_ok=True)
    stem = "forecast_ablation" if config.focus else "forecast_ablation_day"
    (results / f"{stem}.json").write_text(json.dumps(doc, indent=2) + "\n", "utf-8")
    (results / f"{stem}.md").write_text(markdown_table(doc), encoding="utf-8")
    return doc


def _window(regime: str, focus: bool) -> tuple[float, float]:
    """(start, duration) in trace seconds of what is scored."""
    first, hours = REGIMES[regime].focus if focus else (0, 24)
    return SCORED_DAY * 86_400.0 + first * 3600.0, hours * 3600.0


def scaledobjects(epoch_s: float) -> dict[str, ScaledObjectSpec]:
    """The four sides as shipped, their simulated t = 0 at Unix time
    ``epoch_s`` (so the cron window reads the scored hours' time of day)."""
    gateway = prescaler_gateway_manifest(manifest_of(default_bases(PROFILE, MAX_REPLICAS)[0]))
    off = copy.deepcopy(gateway)
    off["spec"]["triggers"][0]["metadata"]["forecast"] = "off"
    gateway["spec"]["triggers"][0]["metadata"]["forecast"] = "auto"
    model_only = copy.deepcopy(gateway)
    model_only["spec"]["triggers"][0]["metadata"]["seasonalPeakDays"] = "0"
    queue = seeds_reactive(max_replicas=MAX_REPLICAS)
    docs = {
        "prescaler-gateway-forecast-auto": gateway,
        "prescaler-gateway-forecast-off": off,
        "prescaler-gateway-seasonal-off": model_only,
        "keda-gateway": gateway_manifest(queue),
        "keda-queue-kv-cron": cron_manifest(queue_and_kv_manifest(queue)),
    }
    out: dict[str, ScaledObjectSpec] = {}
    for name, doc in docs.items():
        doc = copy.deepcopy(doc)
        doc["metadata"]["name"] = name
        doc["metadata"].setdefault("annotations", {})[START_ANNOTATION] = f"{epoch_s:.0f}"
        out[name] = parse_scaledobject(yaml.safe_dump(doc, sort_keys=False), name)
    return out


def onset_minutes(rate_rps: np.ndarray) -> list[int]:
    """The minutes at which a session or ramp starts in a per-minute expected
    rate: a rise of ``ONSET_RISE_RPS`` over the minute before, at least
    ``ONSET_GAP_MIN`` after the last start."""
    rises = np.flatnonzero(np.diff(rate_rps) >= ONSET_RISE_RPS) + 1
    starts: list[int] = []
    for m in rises.tolist():
        if not starts or m - starts[-1] >= ONSET_GAP_MIN:
            starts.append(int(m))
    return starts


def replica_lead(t_s: np.ndarray, ready: np.ndarray, onset_s: float) -> dict[str, float | None]:
    """When the fleet gained a replica for the start at ``onset_s``: the
    fleet's low point in the ``LOOKBACK_S`` before it, then the first sample
    after that low point with more replicas Ready, in seconds relative to the
    start (negative: ready ahead of it; None: never). For a fleet at zero
    that is its first replica."""
    look = (t_s >= onset_s - LOOKBACK_S) & (t_s <= onset_s)
    if not look.any():
        return {"ready_at_onset": None, "low_before": None, "added_ready_s": None}
    idx = np.flatnonzero(look)
    low = float(ready[idx].min())
    last_low = int(idx[np.flatnonzero(ready[idx] == low)[-1]])
    above = np.flatnonzero(ready[last_low:] > low)
    added = None if not len(above) else float(t_s[last_low + int(above[0])] - onset_s)
    return {"ready_at_onset": float(ready[idx[-1]]), "low_before": low, "added_ready_s": added}


def _forecast_before(
    timeline: Mapping[str, np.ndarray], onset_s: float, lead_s: float
) -> dict[str, float | None]:
    """The largest forecast (median, upper band; requests/s) the trigger held
    over the lead time before a start (None for a side without a forecast)."""
    if "forecast_median_rps" not in timeline:
        return {"forecast_median_max_rps": None, "forecast_upper_max_rps": None}
    t = timeline["t"]
    span = (t >= onset_s - lead_s) & (t < onset_s)
    out: dict[str, float | None] = {}
    for key in ("forecast_median_rps", "forecast_upper_rps"):
        vals = timeline[key][span]
        vals = vals[np.isfinite(vals)]
        out[key.replace("_rps", "_max_rps")] = float(vals.max()) if len(vals) else None
    return out


def run_cell(
    regime: str, lead_min: float, config: AblationConfig, directory: Path
) -> dict[str, Any]:
    """One regime at one lead time: every side scored on the same requests,
    prescaler's tracker backfilled with the trace's past."""
    counts = regime_counts(regime, TRACE_DAYS, config.seed)
    trace = directory / f"{regime}.csv"
    rows = "".join(f"{60 * i},{c:.3f}\n" for i, c in enumerate(counts))
    trace.write_text("minute_start_s,requests\n" + rows, encoding="utf-8")
    start_s, duration_s = _window(regime, config.focus)
    profile = get_profile(PROFILE)
    inputs = SimInputs(lead_time_preset=LEAD_TIMES[lead_min])
    sim = inputs.apply(SimConfig(seed=config.seed), profile, None)
    before = window_start(trace, TrafficOptions(seed=config.seed), start_s, profile, sim)
    sim = inputs.apply(SimConfig(seed=config.seed), profile, before.opening)
    workload = load_workload(
        trace, TrafficOptions(start_s=start_s, duration_s=duration_s, seed=config.seed)
    )
    first_min = int(start_s // 60)
    rate = counts[first_min : first_min + int(duration_s // 60)] / 60.0
    onsets = [60.0 * m for m in onset_minutes(rate)]
    lead_s = 60.0 * lead_min  # each preset's phases add up to its lead time
    sides = scaledobjects(DEFAULT_EPOCH.timestamp() + start_s)
    out: dict[str, Any] = {
        "regime": regime,
        "lead_time_min": lead_min,
        "lead_time_preset": LEAD_TIMES[lead_min],
        "start_s": start_s,
        "duration_s": duration_s,
        "backfill_bins": 0 if before.history is None else len(before.history),
        "opening_replicas": before.opening,
        "onsets_s": onsets,
        "sides": {},
    }
    for name in sorted(config.sides, key=_cheap_first):
        began = time.perf_counter()
        scored = score(sides[name], workload, PROFILE, sim, history=before.history)
        if scored.result is None:
            raise RuntimeError(f"{regime} {lead_min:g} min {name}: the run did not finish")
        status = scored.result.status
        timeline = scored.result.timeline
        out["sides"][name] = {
            "requests": len(workload),
            "served": int(np.sum(status == COMPLETED)),
            "timed_out": int(np.sum(status == TIMED_OUT)),
            "rejected": int(np.sum(status == REJECTED)),
            "attainment": scored.attainment,
            "cost_usd": scored.cost_usd,
            "max_replicas": scored.result.max_replicas,
            "onsets": [
                {
                    "onset_s": t0,
                    **replica_lead(timeline["t"], timeline["ready"], t0),
                    **_forecast_before(timeline, t0, lead_s),
                }
                for t0 in onsets
            ],
            "wall_s": round(time.perf_counter() - began, 1),
        }
    got = out["sides"] = {n: out["sides"][n] for n in config.sides}
    on = got.get("prescaler-gateway-forecast-auto")
    off = got.get("prescaler-gateway-forecast-off")
    if on and off:
        out["on_vs_off_cost"] = on["cost_usd"] / off["cost_usd"] if off["cost_usd"] > 0 else None
        out["on_minus_off_attainment"] = on["attainment"] - off["attainment"]
    return out


def _cheap_first(side: str) -> int:
    """The forecasting sides last, so a broken cell fails before their slow runs."""
    return int(side in ("prescaler-gateway-forecast-auto", "prescaler-gateway-seasonal-off"))


def _cell_job(args: tuple[str, float, AblationConfig, Path]) -> dict[str, Any]:
    regime, lead, config, directory = args
    cell_dir = directory / f"{regime}-{lead:g}"
    cell_dir.mkdir(parents=True, exist_ok=True)
    return run_cell(regime, lead, config, cell_dir)


def run_ablation(config: AblationConfig, directory: Path) -> dict[str, Any]:
    """Every cell of the grid, ``config.jobs`` at a time; traces under ``directory``."""
    from concurrent.futures import ProcessPoolExecutor

    jobs = [(r, lead, config, directory) for lead in config.leads_min for r in config.regimes]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=min(config.jobs, len(jobs))) as pool:
        cells = list(pool.map(_cell_job, jobs))
    return {
        "profile": PROFILE,
        "config": dataclasses.asdict(config),
        "scored_day": SCORED_DAY,
        "trace_days": TRACE_DAYS,
        "cells": cells,
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def _lead(onset: Mapping[str, Any]) -> str:
    added = onset["added_ready_s"]
    if added is not None:
        low = onset.get("low_before")
        return f"{added / 60:+.1f}" + (f" (from {low:g})" if low else "")
    held = onset.get("ready_at_onset")
    return f"held {held:g}" if held else "never"


def _leads(row: Mapping[str, Any]) -> str:
    return " / ".join(_lead(o) for o in row["onsets"]) or "-"


def markdown_table(doc: Mapping[str, Any]) -> str:
    """One row per (cell, side): served / timed out, attainment, cost, the
    first added replica's readiness per start (minutes; negative is ahead;
    "from n" when the fleet already had n Ready, "held n" when it added none),
    and the cell's forecast on / off cost ratio and attainment difference."""
    head = (
        "| regime | lead | side | served / timed out | attainment | cost | "
        "replica ready vs start (min) | on/off cost | on-off attainment |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for cell in doc["cells"]:
        ratio = cell.get("on_vs_off_cost")
        diff = cell.get("on_minus_off_attainment")
        for name, row in cell["sides"].items():
            pair = name.startswith("prescaler")
            on_off = f"{ratio:.2f}x" if pair and ratio is not None and math.isfinite(ratio) else ""
            delta = f"{diff:+.3f}" if pair and diff is not None else ""
            lines.append(
                f"| {cell['regime']} | {cell['lead_time_min']:g} min | {name} | "
                f"{row['served']:,} / {row['timed_out']:,} | {row['attainment']:.3f} | "
                f"${row['cost_usd']:.2f} | {_leads(row)} | "
                f"{on_off} | {delta} |"
            )
    return head + "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lab.forecast_ablation CONFIG.yaml [--results DIR]`` runs the
    grid a lab config asks for; ``--report RESULTS.json`` prints the table of
    a finished run again (what the run wrote beside it as ``.md``)."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m lab.forecast_ablation")
    parser.add_argument("config", type=Path, nargs="?", help="a lab config (lab/configs/)")
    parser.add_argument("--results", type=Path, default=Path("bench-results"))
    parser.add_argument("--report", type=Path, metavar="RESULTS.json")
    args = parser.parse_args(argv)
    if (args.config is None) == (args.report is None):
        parser.error("give a CONFIG.yaml to run, or --report RESULTS.json")
    if args.report is not None:
        doc = json.loads(args.report.read_text(encoding="utf-8"))
    else:
        try:
            config = AblationConfig.load(args.config)
        except ConfigError as exc:
            print(f"python -m lab.forecast_ablation: {exc}", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory(prefix="lab-ablation-") as scratch:
            doc = run_recorded(config, args.results, Path(scratch))
    print(markdown_table(doc), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
