"""The efficiency table on real multi-day traffic: each side's held-back
cost as a multiple of the hindsight schedule, at a team's scale.

One cell is one real trace at one replica lead time under one study seed:
every side is tuned by ``prescaler tune``'s own library call
(:func:`simulations.tune.run.tune`: the same TPE, trials, seeded first
trials, stop rules and tie-break for each) on one day and its choice scored
on the next, held back, under the cell's arrival seed and the next ones;
the bound is the hindsight schedule on that held-back day at its target.
The cron side's window is written from the history days before the tuning
day only (:func:`written_window`), as a team writes one from its dashboard.
Each cell is its own JSON file, so a grid runs in pieces and resumes.
``python -m lab.efficiency CONFIG.yaml`` runs a config's grid;
``--report DIR...`` prints the table (:mod:`lab.efficiency_report`; the
sides of one cell tuned in separate runs, one directory each, are merged).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.profiles import get_profile
from lab.config import ConfigError, load_section
from lab.efficiency_ablation import forecast_flipped
from lab.efficiency_report import report
from lab.regime_config import LEAD_TIMES, PROFILE
from simulations.servable import workload_capacity
from simulations.sim_inputs import SimInputs
from simulations.traffic import TrafficOptions, Workload, load_workload
from simulations.tune.report import report_document
from simulations.tune.request import SCREEN_REFIT_MAX_S, TuneRequest, WrittenCron, tune_request
from simulations.tune.run import SideDone, TuneEvent, TuneStart, tune

__all__ = [
    "TRACES",
    "EfficiencyConfig",
    "TraceCase",
    "cell_path",
    "load_config",
    "main",
    "run_cell",
    "written_window",
]

ROOT = Path(__file__).resolve().parents[1]
DAY_S = 86_400.0
HISTORY_S = 3 * DAY_S
"""The days before the tuning day: the tracker's backfill
(:data:`simulations.backfill.BACKFILL_S` less its hour), and what the cron
window is written from."""


@dataclass(frozen=True)
class TraceCase:
    """A real trace as a cell replays it: the tuning day's start (trace
    seconds; at least three days in, so the forecaster has its history), the
    rate scale that puts the bound's fleet in the tens of replicas of the
    profile, and where its token lengths come from (None: a ServeGen rate file's own
    token means, or the default per-request trace)."""

    path: str
    start_s: float
    rate_scale: float
    tokens_from: str | None = None

    def __post_init__(self) -> None:
        if self.start_s < HISTORY_S:
            raise ValueError(f"{self.path}: the tuning day needs three days before it")

    def resolved(self, name: str) -> Path:
        path = ROOT / self.path
        if not path.is_file():
            raise ConfigError("traces", f"{name}: {self.path} is not in this checkout")
        return path


TRACES: dict[str, TraceCase] = {
    # Monday, after Friday to Sunday; token lengths from the same service's
    # 2023 per-request trace
    "azure-coding-2024": TraceCase(
        "simulations/data/azure_llm2024_coding_per_minute.csv",
        3 * DAY_S,
        0.35,
        "lab/data/azure_llm_2023_code.csv",
    ),
    # the fourth of 14 days of one model's fleet rate, in 10-minute windows
    "servegen-m-large": TraceCase(
        "lab/data/servegen_language_m-large_rate_10min.csv", 3 * DAY_S, 0.1
    ),
    # day 60 (counted from 0) of the 1998 World Cup site, inside the
    # tournament; day 61, held back, is one of its two busiest
    "worldcup98": TraceCase(
        "lab/data/worldcup98/worldcup98_days57-61_per_minute.csv", 3 * DAY_S, 0.0125
    ),
}
"""The real traces a cell may name (``lab/data/README.md`` says where each
comes from and under which licence)."""

KEYS = (
    "traces", "leads_min", "seeds", "trials", "jobs", "sides", "target",
    "holdout_seeds", "max_replicas", "screen_refit_s", "margin", "directory",
)  # fmt: skip
DEFAULT_SIDES = ("keda-queue", "keda-queue-kv", "keda-queue-kv-cron", "prescaler")
"""The default sides and the cron side; the gateway sides scale to zero,
which none of these fleets ever does."""


@dataclass(frozen=True)
class EfficiencyConfig:
    """One grid: traces x lead times x study seeds, each side's budget."""

    traces: tuple[str, ...] = tuple(TRACES)
    leads_min: tuple[float, ...] = (2.5, 15.0)
    seeds: tuple[int, ...] = (0, 1, 2)
    trials: int = 40
    jobs: int = 2
    sides: tuple[str, ...] = DEFAULT_SIDES
    target: float = 0.95
    holdout_seeds: int = 3
    max_replicas: int = 320
    screen_refit_s: float = 0.0
    """``tune --screen-refit``: 0, every prescaler trial at the scaler's own
    refit interval, as the table's first cells were run (a cell records it)."""
    margin: float = 0.0
    """``tune --margin``: points each choice must clear the tuning day's target by
    (0, as the table's cells were run; a cell records it)."""
    directory: Path = ROOT / "bench-results" / "efficiency"


def load_config(path: Path) -> EfficiencyConfig:
    """The ``efficiency`` section of the lab config at ``path``."""
    s = load_section(path, "efficiency", KEYS)
    d = EfficiencyConfig()
    traces = s.strs("traces", d.traces)
    for name in traces:
        if name not in TRACES:
            raise s.error("traces", f"unknown trace {name!r} (known: {', '.join(TRACES)})")
    leads = s.floats("leads_min", d.leads_min)
    for lead in leads:
        if lead not in LEAD_TIMES:
            known = ", ".join(f"{x:g}" for x in sorted(LEAD_TIMES))
            raise s.error("leads_min", f"no lead-time preset of {lead:g} min (known: {known})")
    directory = s.path("directory")
    screen = s.get_float("screen_refit_s", d.screen_refit_s)
    if not 0.0 <= screen <= SCREEN_REFIT_MAX_S:
        raise s.error(
            "screen_refit_s",
            f"must be a number from 0 (no screening) to {SCREEN_REFIT_MAX_S:g}, got {screen}",
        )
    margin = s.get_float("margin", d.margin)
    if not 0.0 <= margin <= 100.0:
        raise s.error("margin", f"must be points from 0 to 100, got {margin}")
    return EfficiencyConfig(
        traces=traces, leads_min=leads, seeds=s.ints("seeds", d.seeds),
        trials=s.get_int("trials", d.trials), jobs=s.get_int("jobs", d.jobs),
        sides=s.strs("sides", d.sides), target=s.get_float("target", d.target),
        holdout_seeds=s.get_int("holdout_seeds", d.holdout_seeds),
        max_replicas=s.get_int("max_replicas", d.max_replicas),
        screen_refit_s=screen, margin=margin,
        directory=d.directory if directory is None else directory,
    )  # fmt: skip


WINDOW_SMOOTH_MIN = 60
"""A team reads its daily shape from an hourly mean of its dashboard."""
CRON_GRID_MIN = 15
"""A cron window opens and closes on the quarter hour (the tuner searches it there)."""


def written_window(history: Workload, lead_min: float, per_replica_s: float | None) -> WrittenCron:
    """The cron window a team writes from the days before the tuning day:
    the longest run of the day (minutes of the day, UTC) where the history's
    rate, averaged over its days and over the hour around each minute, is
    above the midpoint between its daily low and high; opened one lead time
    early on the quarter hour, closed on the quarter hour after; holding the
    replicas the lowest rate inside it needs (so the window is a floor,
    never the peak's fleet)."""
    days = max(1, round(history.duration_s / DAY_S))
    minutes = np.minimum((history.arrival_s // 60.0).astype(np.int64), days * 1440 - 1)
    counts = np.bincount(minutes, minlength=days * 1440).astype(float)
    by_day = counts.reshape(days, 1440).mean(axis=0) / 60.0
    kernel = np.ones(WINDOW_SMOOTH_MIN) / WINDOW_SMOOTH_MIN
    # centred on each minute, around midnight too: the day's shape, not a lagging rate
    shape = np.convolve(np.tile(by_day, 3), kernel, mode="same")[1440:2880]
    above = shape >= (shape.min() + shape.max()) / 2.0
    first, length = _longest_run(above)
    start = math.floor((first - lead_min) / CRON_GRID_MIN) * CRON_GRID_MIN
    end = math.ceil((first + length) / CRON_GRID_MIN) * CRON_GRID_MIN
    if end - start >= 1440:  # busy all day: the longest window a cron trigger can hold
        end = start + 1440 - CRON_GRID_MIN
    low = float(np.take(shape, np.arange(first, first + length) % 1440).min())
    if per_replica_s is None or not per_replica_s > 0:
        return WrittenCron(start % 1440, end % 1440)
    # (the mean's last bit: a flat 2.0 requests/s must not ask for a third replica)
    replicas = max(1, math.ceil(low / per_replica_s - 1e-9))
    return WrittenCron(start % 1440, end % 1440, replicas)


def _longest_run(flags: np.ndarray) -> tuple[int, int]:
    """(first index, length) of the longest circular run of True in ``flags``."""
    n = flags.size
    if flags.all():
        return 0, n
    best, run, best_start = 0, 0, 0
    for i in range(2 * n):
        if flags[i % n]:
            run += 1
            if run > best and run <= n:
                best, best_start = run, (i - run + 1) % n
        else:
            run = 0
    return best_start, best


def cell_path(directory: Path, trace: str, lead_min: float, seed: int) -> Path:
    """Where a cell's JSON lives: one file per (trace, lead time, seed)."""
    return directory / f"{trace}-lead{lead_min:g}-seed{seed}.json"


def _sides_doc(doc: dict[str, Any]) -> dict[str, Any]:
    """Per side, what the table reads (the manifests left out)."""
    keep = ("setting", "tie_break", "holdout", "tuned", "holdout_multiple_of_hindsight",
            "holdout_seeds", "study_wall_s", "trials", "chosen_trial", "screening")  # fmt: skip
    return {name: {k: side.get(k) for k in keep} for name, side in doc["sides"].items()}


def cell_request(
    config: EfficiencyConfig, trace: str, lead_min: float, seed: int, storage: str
) -> tuple[TuneRequest, WrittenCron]:
    """The ``tune`` request of one cell and the cron window written for it."""
    case = TRACES[trace]
    path = case.resolved(trace)
    tokens = None if case.tokens_from is None else ROOT / case.tokens_from
    past = TrafficOptions(
        rate_scale=case.rate_scale, start_s=case.start_s - HISTORY_S, duration_s=HISTORY_S,
        seed=seed, tokens_from=tokens,
    )  # fmt: skip
    history = load_workload(path, past)
    per_s = workload_capacity(history, get_profile(PROFILE)).requests_per_s
    window = written_window(history, lead_min, per_s)
    inputs = SimInputs(max_replicas=config.max_replicas, lead_time_preset=LEAD_TIMES[lead_min])
    request = tune_request(
        trace=str(path), profile=PROFILE, target=config.target, trials=config.trials,
        holdout=0.5, jobs=config.jobs, rate_scale=case.rate_scale, start_s=case.start_s,
        duration_s=2 * DAY_S, seed=seed, tokens_from=None if tokens is None else str(tokens),
        storage=storage, sides=config.sides, cron_window=window,
        holdout_seeds=config.holdout_seeds, inputs=inputs,
        screen_refit_s=config.screen_refit_s, margin=config.margin,
    )  # fmt: skip
    return request, window


def run_cell(config: EfficiencyConfig, trace: str, lead_min: float, seed: int) -> dict[str, Any]:
    """One cell: every side tuned on the trace's tuning day, scored on the
    next, and prescaler's choice again with its forecast mode flipped."""
    tuned: list[int] = []

    def on_event(event: TuneEvent) -> None:
        if isinstance(event, TuneStart):
            tuned.append(event.tune_requests)
        elif isinstance(event, SideDone):
            print(f"  {trace} {lead_min:g} min seed {seed}: {event.name} "
                  f"{event.trials} trials in {event.wall_s:.0f} s", flush=True)  # fmt: skip

    with tempfile.TemporaryDirectory() as tmp:
        storage = f"sqlite:///{Path(tmp) / 'studies.db'}"
        request, window = cell_request(config, trace, lead_min, seed, storage)
        t0 = time.perf_counter()
        result = tune(request, on_event)
        wall = time.perf_counter() - t0
    doc = report_document(result)
    case = TRACES[trace]
    cell = {
        "trace": trace, "lead_min": lead_min, "seed": seed, "path": case.path,
        "start_s": case.start_s, "rate_scale": case.rate_scale, "profile": PROFILE,
        "trials": config.trials, "target": config.target, "max_replicas": config.max_replicas,
        "sides_asked": list(config.sides), "holdout_seeds": config.holdout_seeds,
        "screen_refit_s": config.screen_refit_s, "margin": config.margin,
        "cron_window": {"start_min": window.start_min, "end_min": window.end_min,
                        "replicas": window.replicas},
        "tuned_requests": tuned[0] if tuned else None,
        "held_back_requests": result.held_requests,
        "target_attainment": doc["target_attainment"], "hindsight": doc["hindsight"],
        "sides": _sides_doc(doc), "wall_s": round(wall, 1),
        "warnings": doc["warnings"],
    }  # fmt: skip
    cell["forecast_flipped"] = _flip(config, cell)
    return cell


def _flip(config: EfficiencyConfig, cell: Mapping[str, Any]) -> dict[str, Any] | None:
    """The forecast flip of the cell's prescaler choice (None without one),
    under the budget and bounds the cell was run with where it says them."""
    chosen = (cell["sides"].get("prescaler") or {}).get("setting")
    if not chosen:
        return None
    config = dataclasses.replace(
        config,
        max_replicas=int(cell.get("max_replicas", config.max_replicas)),
        sides=tuple(cell.get("sides_asked", config.sides)),
    )
    with tempfile.TemporaryDirectory() as tmp:
        storage = f"sqlite:///{Path(tmp) / 'unused.db'}"
        request, _ = cell_request(
            config, cell["trace"], float(cell["lead_min"]), cell["seed"], storage
        )
    return forecast_flipped(request, chosen)


def flip_missing(config: EfficiencyConfig, directory: Path) -> None:
    """Add the forecast flip to every cell in ``directory`` written without it."""
    for path in sorted(directory.glob("*.json")):
        cell = json.loads(path.read_text(encoding="utf-8"))
        if cell.get("forecast_flipped") is None:
            cell["forecast_flipped"] = _flip(config, cell)
            path.write_text(json.dumps(cell, indent=2) + "\n", encoding="utf-8")
            print(f"{path.name}: {cell['forecast_flipped']}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Run a config's grid (cells already written are kept), report a
    directory, or add the forecast flip to cells written without it."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) >= 2 and args[0] == "--report":
        try:
            print(report(*(Path(a) for a in args[1:])))
        except ValueError as exc:
            print(f"lab.efficiency: {exc}", file=sys.stderr)
            return 2
        return 0
    if len(args) == 3 and args[0] == "--flip":
        flip_missing(load_config(Path(args[1])), Path(args[2]))
        return 0
    if len(args) != 1:
        print("usage: python -m lab.efficiency CONFIG.yaml | --report DIR... | "
              "--flip CONFIG.yaml DIR", file=sys.stderr)  # fmt: skip
        return 2
    try:
        config = load_config(Path(args[0]))
    except ConfigError as exc:
        print(f"lab.efficiency: {exc}", file=sys.stderr)
        return 2
    config.directory.mkdir(parents=True, exist_ok=True)
    for trace in config.traces:
        for lead in config.leads_min:
            for seed in config.seeds:
                out = cell_path(config.directory, trace, lead, seed)
                if out.exists():
                    print(f"{out.name}: done before, kept", flush=True)
                    continue
                cell = run_cell(config, trace, lead, seed)
                out.write_text(json.dumps(cell, indent=2) + "\n", encoding="utf-8")
                print(f"{out.name}: {cell['wall_s']:.0f} s", flush=True)
    print(report(config.directory))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
