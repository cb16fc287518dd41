"""Where prediction pays: prescaler tuned against the best tuned KEDA set-up, per regime.

For each regime (:mod:`lab.regime_generator`), replica lead time and node
pre-warming setting, every side (prescaler's trigger with the forecast on
and off, and the KEDA set-ups a competent engineer would run) is tuned by
the study ``prescaler tune`` runs (:func:`simulations.tune.study.run_study`)
on one day and its chosen setting scored on the next, held back, at the
config's target of what an idle fleet attains. Each part opens as
``prescaler tune`` opens one inside a trace (:mod:`simulations.tune.inputs`):
the fleet the day before left and prescaler's tracker backfilled with the
history days before it; KEDA's sides get no history, as in production.
A cell's ratio is prescaler's held-back cost over the cheapest KEDA side's.
``python -m lab.regimes CONFIG.yaml`` runs the sweep a lab config asks for
(:mod:`lab.regime_config`); the verdicts are :mod:`lab.regimes_report`'s.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.profiles import get_profile
from forecasting.baselines import BASELINES
from lab.config import ConfigError
from lab.regime_config import LEAD_TIMES, PROFILE, RegimesRun, SweepConfig, load_run
from lab.regime_generator import REGIMES, regime_counts
from lab.regimes_report import markdown_table, plot_sweep, targets_met
from simulations.backfill import DemandHistory
from simulations.servable import workload_capacity
from simulations.sim_inputs import SimInputs, WindowStart, window_start
from simulations.simulation import SimConfig
from simulations.traffic import TrafficOptions, Workload, load_workload
from simulations.tune.each_day import judged_days
from simulations.tune.inputs import PartStarts, part_starts
from simulations.tune.manifest import apply_setting
from simulations.tune.request import tune_request
from simulations.tune.search import score, slo_ceiling, split_workload
from simulations.tune.sides import Side, WrittenCron, make_sides
from simulations.tune.study import TuneContext, run_study, study_fingerprint

__all__ = [
    "RegimeCell",
    "build_cell",
    "busier_tuning_part",
    "focus_parts",
    "focus_window",
    "run_recorded",
    "run_sweep",
    "run_sweeps",
    "split_days",
    "study_side",
    "write_regime_trace",
]

VARIANTS: tuple[tuple[str, str], ...] = (("on", "auto"), ("off", "off"))
"""(forecast label, the ``forecast`` value held)."""


def write_regime_trace(regime: str, config: SweepConfig, directory: Path) -> Path:
    """The regime's per-minute counts as a ``minute_start_s,requests`` file
    (what :func:`simulations.traffic.load_workload` replays)."""
    counts = regime_counts(regime, config.trace_days, config.seed, focus=config.joined_focus)
    path = directory / f"{regime}.csv"
    rows = "".join(f"{60 * i},{c:.3f}\n" for i, c in enumerate(counts))
    path.write_text("minute_start_s,requests\n" + rows, encoding="utf-8")
    return path


def study_side(
    side: Side, cell: RegimeCell, tag: str, forecaster: str | None = None
) -> dict[str, Any]:
    """Tune ``side`` on the first part (the same TPE, trials, seed and stop
    rules as ``prescaler tune``), then score its chosen setting on the held
    back part: its cost there when it meets the held-back target, else None.
    ``forecaster``: a statsforecast baseline prescaler's tracker forecasts
    with, in every trial and on the held-back part."""
    bar = min(1.0, cell.targets[0] + cell.config.margin / 100.0)
    ctx = TuneContext(
        cell.tuning, PROFILE, cell.sim, side.base, bar, side.space,
        max_replicas=side.max_replicas, seed=cell.config.seed + cell.config.sampler_offset,
        manifest=side.manifest,
        history=cell.histories[0], day_targets=cell.day_targets, forecaster=forecaster,
    )  # fmt: skip
    # the space and the manifest in the fingerprint: a rerun into storage
    # holding a study over another space or from another ScaledObject as
    # written (a cron window written at other hours) is refused, not joined
    who = {"space": repr(side.space), "manifest": side.manifest}
    fingerprint = f"{tag}-{study_fingerprint(who)}"
    study = run_study(
        ctx, storage=cell.storage, study_name=f"{tag}-{side.name}",
        n_trials=cell.config.trials, jobs=1, fingerprint=fingerprint,
    )  # fmt: skip
    row: dict[str, Any] = {
        "trials": len(study.trials),
        "trials_finished": sum(1 for t in study.trials if t.finished),
        "setting": None,
        "tuning": None,
        "holdout": None,
        "cost_at_target_usd": None,
    }
    if study.best is None:
        return row
    chosen = apply_setting(side.base, study.best.metadata, side.manifest)
    held = score(
        chosen, cell.held, PROFILE, cell.held_sim, history=cell.histories[1],
        forecaster=forecaster,
    )  # fmt: skip
    row["setting"] = dict(study.best.metadata)
    row["tuning"] = {"slo_attainment": study.best.attainment, "cost_usd": study.best.cost_usd}
    row["holdout"] = {"slo_attainment": held.attainment, "cost_usd": held.cost_usd}
    if held.attainment >= cell.targets[1] and math.isfinite(held.cost_usd):
        row["cost_at_target_usd"] = held.cost_usd
    return row


@dataclass(frozen=True)
class RegimeCell:
    """One regime at one lead time: both parts, the run's config, the targets."""

    tuning: Workload
    """What every side is tuned on (day 1, or its focus hours)."""
    held: Workload
    """What the chosen settings are scored on (day 2)."""
    sim: SimConfig
    held_sim: SimConfig
    """The held-back day's run: ``sim`` with the fleet the tuning day left."""
    histories: tuple[DemandHistory | None, DemandHistory | None]
    """prescaler's backfill before (tuning, held back): what the emulated
    Prometheus scraped before each part (``score`` gives it to prescaler's
    trigger only)."""
    targets: tuple[float, float]
    """Attainment to meet on (tuning, held back): the target x each part's idle ceiling."""
    config: SweepConfig
    storage: str
    day_targets: tuple[tuple[float, float], ...] = ()
    """(start, attainment to meet with the margin) of each tuning day when
    the tuning part spans several; empty: one day, judged whole."""
    cron: WrittenCron | None = None
    """The cron side's window as written (:func:`written_cron`)."""


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)) or b <= 0:
        return None
    return a / b


def _sides(config: SweepConfig, **kw: Any) -> dict[str, Side]:
    request = tune_request(trace=None, profile=PROFILE, **kw)
    return {s.name: s for s in make_sides(request, PROFILE, SimInputs().max_replicas)}


def keda_sides(config: SweepConfig, cron: WrittenCron | None = None) -> dict[str, Side]:
    """The KEDA sides a cell tunes, by name: none when none is asked for
    (``make_sides`` reads no names as its own defaults); the cron side
    written with ``cron`` (the cell's :attr:`RegimeCell.cron`)."""
    if not config.keda_sides:
        return {}
    return _sides(config, sides=config.keda_sides, cron_window=cron)


CRON_GRID_MIN = 15
"""The cron window's start is searched on the quarter hour
(:func:`simulations.tune.manifest.cron_space`), so it is written on one."""
PEAK_WINDOW_MIN = 5
"""The rate a team reads its past peak from: a 5-minute mean, a
dashboard's ``rate(...[5m])``."""


def cron_window(regime: str, lead_min: float, focus: bool = False) -> tuple[int, int]:
    """(start, end) minutes of the day of the cron window a team writes for
    ``regime``: the hours it knows its traffic comes in
    (:attr:`lab.regime_generator.Regime.hours`), opened one replica lead time
    early, on the quarter hour at or before, as a team that knows its cold
    start opens it. In the parts' clock: a focus part's t = 0 is its first
    hour, read as midnight."""
    first, last = REGIMES[regime].hours
    shift = REGIMES[regime].focus[0] * 60 if focus else 0
    start = math.floor((first - lead_min) / CRON_GRID_MIN) * CRON_GRID_MIN
    return (start - shift) % 1440, (last - shift) % 1440


def peak_replicas(history: Workload, hours: tuple[int, int], max_replicas: int) -> int | None:
    """The replicas the past days' peak inside ``hours`` (minutes of the
    day, ``[first, last)``, across midnight when last < first) needed: the
    highest trailing 5-minute mean rate there (a dashboard's
    ``rate(...[5m])``) over the per-replica rate the profile gives for the
    past requests' mean shape (what prescaler's trigger believes too),
    rounded up; what a team sizing a cron window from its dashboard writes.
    None when the profile gives no per-replica rate."""
    per_s = workload_capacity(history, get_profile(PROFILE)).requests_per_s
    if per_s is None or not (per_s > 0 and math.isfinite(per_s)):
        return None
    minutes = (history.arrival_s // 60.0).astype(np.int64)
    counts = np.bincount(minutes, minlength=math.ceil(history.duration_s / 60.0)).astype(float)
    first, last = hours
    of_day = np.arange(counts.size) % 1440
    inside = (
        (of_day >= first) & (of_day < last) if first < last else (of_day >= first) | (of_day < last)
    )
    kernel = np.ones(PEAK_WINDOW_MIN) / PEAK_WINDOW_MIN
    trailing = np.convolve(counts, kernel, mode="full")[: counts.size] / 60.0
    peak = float(trailing[inside].max()) if inside.any() else 0.0
    return int(min(max_replicas, max(1, math.ceil(peak / per_s - 1e-9))))


def written_cron(regime: str, trace: Path, lead_min: float, config: SweepConfig) -> WrittenCron:
    """The cron side's window as its team writes it for ``regime``: the
    hours of :func:`cron_window` and the replicas the history days' peak
    in them needed (:func:`peak_replicas`; nothing from the tuning or held
    back day), or :data:`simulations.tune.sides.CRON_REPLICAS` without
    history days or a per-replica rate."""
    start, end = cron_window(regime, lead_min, config.focus)
    if not config.history_days:
        return WrittenCron(start, end)
    past = TrafficOptions(seed=config.seed, duration_s=config.history_days * 86_400.0)
    history = load_workload(trace, past)
    replicas = peak_replicas(history, REGIMES[regime].hours, SimInputs().max_replicas)
    return WrittenCron(start, end) if replicas is None else WrittenCron(start, end, replicas)


def prescaler_variant(
    config: SweepConfig,
    prewarm: bool,
    forecast: str,
    lead_min: float = 2.5,
    cron: WrittenCron | None = None,
) -> Side:
    """The prescaler side one cell column tunes: ``forecast`` and
    ``prewarm`` held, with the sweep's held keys (``prescaler_set``), told
    the cell's cold start (the floor of a searched fixed lead time);
    ``prescaler-cron``'s window written with ``cron`` (the cell's, as the
    KEDA cron side's)."""
    fixed = (("prewarm", "true" if prewarm else "false"), *config.prescaler_set)
    name = config.prescaler_side
    inputs = SimInputs(lead_time_preset=LEAD_TIMES[lead_min])
    sides = _sides(
        config,
        sides=(name,),
        forecaster=forecast,
        prescaler_fixed=fixed,
        inputs=inputs,
        cron_window=cron,
    )
    return sides[name]


def build_cell(
    regime: str, trace: Path, lead_min: float, config: SweepConfig, storage: str = ""
) -> RegimeCell:
    """One regime's parts at one lead time: what every side is tuned and
    scored on, each part opening as ``prescaler simulate --start`` opens a
    window (the fleet and backfill of the trace before it)."""
    profile = get_profile(PROFILE)
    inputs = SimInputs(lead_time_preset=LEAD_TIMES[lead_min], capacity_error=config.capacity_error)
    bare = inputs.apply(SimConfig(seed=config.seed), profile, None)
    if config.focus and config.history_days:
        tuning, held, starts = focus_parts(regime, trace, config, inputs)
    else:
        before, tuning, held = split_days(
            load_workload(trace, TrafficOptions(seed=config.seed)), config
        )
        starts = part_starts(before, tuning, held, profile, bare, inputs)
    if config.busier:
        # what each side is tuned on; the parts' starts stay the trace's own
        tuning = busier_tuning_part(regime, trace, config)
    sim, held_sim = starts.tuning_config, starts.held_config
    histories = (starts.tuning.history, None if starts.held is None else starts.held.history)
    targets = (
        config.target * slo_ceiling(tuning, PROFILE, sim.slo_ttft_s),
        config.target * slo_ceiling(held, PROFILE, sim.slo_ttft_s),
    )
    days: tuple[tuple[float, float], ...] = ()
    if config.days > 2:
        days, _ = judged_days(tuning, config.target, PROFILE, sim.slo_ttft_s, config.margin)
    cron = written_cron(regime, trace, lead_min, config)
    return RegimeCell(tuning, held, sim, held_sim, histories, targets, config, storage, days, cron)


def run_cell(
    regime: str, trace: Path, lead_min: float, config: SweepConfig, storage: str
) -> dict[str, Any]:
    """One regime at one lead time: the KEDA sides once, prescaler's
    variants (forecast on/off x each pre-warming setting asked for)."""
    cell = build_cell(regime, trace, lead_min, config, storage)
    tuning, held, targets = cell.tuning, cell.held, cell.targets
    histories = cell.histories
    tag = (
        f"{regime}-{lead_min:g}min-t{config.trials}-s{config.seed}-h{config.history_days}"
        f"-g{config.target:g}" + (f"-m{config.margin:g}" if config.margin else "")
        + (f"-b{config.busier:g}" if config.busier else "")
        + (f"-d{config.days}" if config.days != 2 else "")
        + (f"-e{config.capacity_error:g}" if config.capacity_error else "")
        + "".join(f"-{k}{v}" for k, v in config.prescaler_set)
        + ("-focus" if config.focus else "")
        + (f"-p{config.sampler_offset}" if config.sampler_offset else "")
    )  # fmt: skip
    t0 = time.perf_counter()
    sides = keda_sides(config, cell.cron)
    keda = {name: study_side(side, cell, tag) for name, side in sides.items()}
    met = {n: v["cost_at_target_usd"] for n, v in keda.items() if v["cost_at_target_usd"]}
    best_name = min(met, key=lambda n: met[n]) if met else None
    best_keda = met[best_name] if best_name else None
    out: dict[str, Any] = {
        "lead_time_min": lead_min,
        "lead_time_preset": LEAD_TIMES[lead_min],
        "requests": [len(tuning), len(held)],
        "backfill_bins": [0 if h is None else len(h) for h in histories],
        "target_attainment": list(targets),
        "tuning_day_targets": [t for _, t in cell.day_targets],
        # the cron side as written (the study's first trial): hours and replicas
        "cron_written": None if cell.cron is None else dataclasses.asdict(cell.cron),
        "keda": keda,
        "best_keda_side": best_name,
        "best_keda_cost_usd": best_keda,
        "prescaler": {},
    }
    for prewarm in config.prewarm:
        row: dict[str, Any] = {}
        for name, forecast in VARIANTS:
            side = prescaler_variant(config, prewarm, forecast, lead_min, cell.cron)
            label = f"pw{int(prewarm)}-fc-{name}"
            row[f"forecast-{name}"] = study_side(side, cell, f"{tag}-{label}")
        for method in config.forecasters:
            baseline = method if method in BASELINES else None
            fc = "auto" if baseline else method
            side = prescaler_variant(config, prewarm, fc, lead_min, cell.cron)
            label = f"pw{int(prewarm)}-fc-{method}"
            row[f"forecast-{method}"] = study_side(side, cell, f"{tag}-{label}", baseline)
        on = row["forecast-on"]["cost_at_target_usd"]
        off = row["forecast-off"]["cost_at_target_usd"]
        row["ratio_on_vs_best_keda"] = _ratio(on, best_keda)
        row["ratio_off_vs_best_keda"] = _ratio(off, best_keda)
        row["ratio_forecast_on_vs_off"] = _ratio(on, off)
        out["prescaler"]["prewarm-on" if prewarm else "prewarm-off"] = row
    out["wall_s"] = round(time.perf_counter() - t0, 1)
    return out


def focus_parts(
    regime: str, trace: Path, config: SweepConfig, inputs: SimInputs
) -> tuple[Workload, Workload, PartStarts]:
    """(tuning part, held-back part, their starts) for ``focus`` with history:
    the focus hours of the tuning day and of the held-back day in the
    whole-day ``trace``, each opening with the fleet and the backfill of the
    trace before its first hour, as a ``prescaler simulate --start`` window
    does (nothing from the part itself or after it)."""
    profile = get_profile(PROFILE)
    traffic = TrafficOptions(seed=config.seed)
    bare = inputs.apply(SimConfig(seed=config.seed), profile, None)
    parts: list[Workload] = []
    opened: list[WindowStart] = []
    for day in (config.history_days, config.history_days + 1):
        window = focus_window(regime, traffic, day)
        parts.append(load_workload(trace, window))
        opened.append(window_start(trace, traffic, window.start_s, profile, bare))
    starts = PartStarts(
        opened[0],
        opened[1],
        inputs.apply(SimConfig(seed=config.seed), profile, opened[0].opening),
        inputs.apply(SimConfig(seed=config.seed), profile, opened[1].opening),
    )
    return parts[0], parts[1], starts


def busier_tuning_part(regime: str, trace: Path, config: SweepConfig) -> Workload:
    """The tuning part drawn from ``trace`` with its rate scaled by
    ``1 + config.busier / 100`` (the same part, :func:`split_days` or the
    focus hours, a busier day)."""
    scaled = TrafficOptions(seed=config.seed, rate_scale=1.0 + config.busier / 100.0)
    if config.focus and config.history_days:
        return load_workload(trace, focus_window(regime, scaled, config.history_days))
    return split_days(load_workload(trace, scaled), config)[1]


def focus_window(regime: str, traffic: TrafficOptions, day: int) -> TrafficOptions:
    """``traffic`` narrowed to ``regime``'s focus hours of whole-day trace day ``day``."""
    first, hours = REGIMES[regime].focus
    start_s = day * 86_400.0 + first * 3600.0
    return dataclasses.replace(traffic, start_s=start_s, duration_s=hours * 3600.0)


def split_days(
    workload: Workload, config: SweepConfig
) -> tuple[Workload | None, Workload, Workload]:
    """(the history days, the tuning part, the held-back part) of a regime's
    trace, each on its own clock from 0 (the history None without history
    days)."""
    before: Workload | None = None
    rest = workload
    if config.history_days:
        before, tail = split_workload(workload, config.days / config.trace_days)
        assert tail is not None
        rest = tail
    tuning, held = split_workload(rest, 1.0 / config.days)
    assert held is not None
    return before, tuning, held


def _cell_job(args: tuple[str, Path, float, SweepConfig, Path]) -> dict[str, Any]:
    regime, trace, lead, config, directory = args
    storage = f"sqlite:///{directory / f'{regime}-{lead:g}.db'}"
    return run_cell(regime, trace, lead, config, storage)


def run_sweep(config: SweepConfig, directory: Path) -> dict[str, Any]:
    """Every cell of the grid, ``config.jobs`` cells at a time (each in its
    own process, with its own study storage); traces under ``directory``."""
    return run_sweeps([(config, directory)])[0]


def run_sweeps(sweeps: Sequence[tuple[SweepConfig, Path]]) -> list[dict[str, Any]]:
    """Several sweeps' cells in one pool (the first config's ``jobs`` at a
    time), so a sweep over seeds keeps every core busy; each sweep's traces
    and study storage under its own directory, one document per sweep (its
    ``wall_s`` the whole pool's)."""
    from concurrent.futures import ProcessPoolExecutor

    if not sweeps:
        return []
    places = [d.resolve() for _, d in sweeps]
    if len(set(places)) != len(places):
        raise ValueError("each sweep needs its own directory (traces and studies are named alike)")
    t0 = time.perf_counter()
    docs: list[dict[str, Any]] = []
    jobs: list[tuple[int, tuple[str, Path, float, SweepConfig, Path]]] = []
    for k, (config, directory) in enumerate(sweeps):
        directory.mkdir(parents=True, exist_ok=True)
        doc: dict[str, Any] = {
            "profile": PROFILE, "config": dataclasses.asdict(config), "regimes": {},
        }  # fmt: skip
        for regime in config.regimes:
            trace = write_regime_trace(regime, config, directory)
            counts = regime_counts(
                regime, config.trace_days, config.seed, focus=config.joined_focus
            )
            doc["regimes"][regime] = {
                "realism": REGIMES[regime].realism,
                "focus_hours": list(REGIMES[regime].focus) if config.focus else None,
                "expected_requests_per_day": [
                    float(np.round(c.sum())) for c in np.split(counts, config.trace_days)
                ],
                "cells": [],
            }
            jobs.extend((k, (regime, trace, lead, config, directory)) for lead in config.leads_min)
        docs.append(doc)
    workers = min(sweeps[0][0].jobs, len(jobs))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        cells = pool.map(_cell_job, [job for _, job in jobs])
        for (k, job), cell in zip(jobs, cells, strict=True):
            docs[k]["regimes"][job[0]]["cells"].append(cell)
    wall_s = round(time.perf_counter() - t0, 1)
    for doc in docs:
        doc["wall_s"] = wall_s
        doc["targets"] = targets_met(doc)
    return docs


def run_recorded(run: RegimesRun, results: Path, scratch: Path) -> list[dict[str, Any]]:
    """Run ``run``'s sweep once per seed and write what a record cites under
    ``results``: ``regimes.json``, ``.md`` and ``.png`` (the first seed's
    sweep) and, with several seeds, ``regimes-seeds.json`` and ``.md``
    (:mod:`lab.regime_seeds`). Traces and studies go to ``run.directory``,
    else ``scratch``. Every seed's sweep document, in seed order."""
    from lab.regime_seeds import markdown_seeds, run_seeds  # it imports this module

    directory = run.directory or scratch
    results.mkdir(parents=True, exist_ok=True)
    if len(run.seeds) > 1:
        many = run_seeds(run.sweep, run.seeds, directory)
        (results / "regimes-seeds.json").write_text(json.dumps(many, indent=2) + "\n")
        (results / "regimes-seeds.md").write_text(markdown_seeds(many))
        docs: list[dict[str, Any]] = many["sweeps"]
    else:
        docs = [run_sweep(dataclasses.replace(run.sweep, seed=run.seeds[0]), directory)]
    doc = docs[0]
    (results / "regimes.json").write_text(json.dumps(doc, indent=2) + "\n")
    plot_sweep(doc, results / "regimes.png")
    (results / "regimes.md").write_text(markdown_table(doc))
    return docs


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lab.regimes CONFIG.yaml [--results DIR]`` runs the sweep the
    config asks for; ``python -m lab.regimes --report FILE.json [--plot PNG]``
    prints a recorded sweep's table and verdicts (and draws its plot) again."""
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m lab.regimes")
    parser.add_argument("config", type=Path, nargs="?", help="a lab config (lab/configs/)")
    parser.add_argument("--results", type=Path, default=Path("bench-results"))
    parser.add_argument("--report", type=Path, metavar="FILE.json", help="a sweep's JSON")
    parser.add_argument("--plot", type=Path, metavar="PNG", help="with --report: draw it")
    args = parser.parse_args(argv)
    if (args.config is None) == (args.report is None):
        parser.error("give a CONFIG.yaml to run, or --report FILE.json")
    if args.report is not None:
        doc = json.loads(args.report.read_text(encoding="utf-8"))
    else:
        try:
            run = load_run(args.config)
        except ConfigError as exc:
            print(f"python -m lab.regimes: {exc}", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory(prefix="lab-regimes-") as scratch:
            doc = run_recorded(run, args.results, Path(scratch))[0]
    print(markdown_table(doc))
    print(json.dumps(targets_met(doc), indent=2))
    if args.plot is not None:
        plot_sweep(doc, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
