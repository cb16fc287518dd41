"""Where prediction pays: prescaler tuned against the best tuned KEDA set-up, per regime.

For each traffic regime (:mod:`simulations.regimes`), replica lead time
(:mod:`simulations.lead_time` presets, 2.5 to 15 minutes) and node
pre-warming on or off, every side is tuned the same way, by the study
``prescaler tune`` runs (:func:`simulations.tune.study.run_study`: optuna
TPE, its stop rules, the same trial budget and seed, the side's
ScaledObject as written as its first trial), on one day, and its chosen
setting is scored on the next, held back, at 0.95 of what an idle fleet
attains on each day. The regime's trace starts ``history_days`` (3) days
before the tuning day, so each part starts as ``prescaler tune`` starts
one inside a trace (:mod:`simulations.tune.inputs`): the fleet the day
before left, and prescaler's tracker backfilled with what the emulated
Prometheus scraped over the days before that part (the tuning day: the
history days; the held-back day: the tuning day and the history days before
it), never a sample from the part itself. The forecaster's daily seasonal
terms need two full days of it (:data:`decision.tracker_data.DEFAULT_FIT_WINDOW_S`).
The KEDA sides get no history: they keep none in production either.

- prescaler's trigger with the forecast on (``forecast: auto``) and with it
  off (``forecast: off``), each with ``prewarm`` held at ``true`` or
  ``false``; by default as the ``prescaler-gateway`` side (the gateway's
  request rate as demand, ``minReplicas`` searched from 0), the
  information of the ``keda-gateway`` side; ``prescaler_side``
  ``prescaler-cron`` adds the written cron window, the information of the
  ``keda-gateway-cron`` side, and ``prescaler`` reads vLLM's metrics alone;
- the KEDA set-ups a competent engineer would run: the queue trigger, queue
  plus KV cache, the same plus a daily ``cron`` window, scale to zero on
  the gateway's request rate, and all of those in one ScaledObject at a
  floor of 0 (pre-warming is prescaler's: the KEDA studies do not depend
  on it and run once per regime and lead time).

A side's figure is its chosen setting's cost on the held-back day when it
meets the held-back target there, else "missed"; a cell's ratio is
prescaler's over the cheapest KEDA side's. Unlike ``prescaler tune``, only
the chosen setting is re-scored (not up to four points of the Pareto set:
a sixth of the simulations). A sweep of only each regime's focus hours
(``focus``) tunes on the tuning day's focus hours and scores the held-back
day's; with ``history_days`` each part starts as a ``prescaler simulate``
window inside the whole-day trace starts (the fleet and the backfill from
the trace before the part's first hour, :func:`simulations.sim_inputs.window_start`),
about a quarter of a whole day's simulation per trial; without, the focus
hours are cut from each day and joined, and nothing is backfilled (one
day's focus hours are not what precedes the next day's). The bench test
(``tests/benchmarks/test_regimes_bench.py``) runs the sweep and writes JSON,
a table and a plot; this module holds the sweep and the verdicts
(``python -m benchmarks.regimes FILE.json`` prints them again).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from decision.settings import SettingsError, parse_settings
from engine.profiles import get_profile
from forecasting import METHODS as FORECAST_METHODS
from forecasting.baselines import BASELINES
from simulations.backfill import DemandHistory
from simulations.regimes import REGIMES, regime_counts
from simulations.servable import workload_capacity
from simulations.sim_inputs import SimInputs, WindowStart, window_start
from simulations.simulation import SimConfig
from simulations.traffic import TrafficOptions, Workload, load_workload
from simulations.tune.each_day import judged_days
from simulations.tune.inputs import PartStarts, part_starts
from simulations.tune.manifest import apply_setting
from simulations.tune.run import TuneRequest
from simulations.tune.search import score, slo_ceiling, split_workload
from simulations.tune.sides import Side, WrittenCron, make_sides
from simulations.tune.study import TuneContext, run_study, study_fingerprint

__all__ = [
    "KEDA_SIDES",
    "LEAD_TIMES",
    "PRESCALER_SIDES",
    "PROFILE",
    "RegimeCell",
    "SweepConfig",
    "build_cell",
    "busier_tuning_part",
    "cost_text",
    "focus_parts",
    "focus_window",
    "ratio_text",
    "run_sweep",
    "run_sweeps",
    "split_days",
    "study_side",
    "targets_met",
    "write_regime_trace",
]

PROFILE = "llama-3-8b@g5.xlarge"
LEAD_TIMES: dict[float, str] = {
    2.5: "8b-cached",
    5.0: "8b-cold-engine",
    10.0: "8b-uncached-image",
    15.0: "70b-uncached",
}
"""Minutes from a replica asked for to it Ready -> the lead-time preset of that length."""
KEDA_SIDES = (
    "keda-queue",
    "keda-queue-kv",
    "keda-queue-kv-cron",
    "keda-gateway",
    "keda-gateway-cron",
)
"""The KEDA family every cell tunes (``keda_sides``), one study a side: a
cell's "best tuned KEDA" is the cheapest of the sides it ran, so two
sweeps compare only over the same family."""
PRESCALER_SIDES = ("prescaler-gateway", "prescaler", "prescaler-cron")
"""The prescaler sides the sweep can tune as its forecast on/off variants."""
VARIANTS: tuple[tuple[str, str], ...] = (("on", "auto"), ("off", "off"))
"""(forecast label, the ``forecast`` value held)."""
NEVER_WORSE = 1.0
MUCH_BETTER = 0.8
FORECAST_PAYS = 0.85
LONG_LEAD_MIN = 10.0
MISSED_Y = 1.2
"""Where the plot marks a cell prescaler's chosen setting missed (no ratio)."""


@dataclass(frozen=True)
class SweepConfig:
    """The grid and the budget: every side gets ``trials`` trials; ``jobs``
    cells run at once."""

    regimes: tuple[str, ...] = tuple(REGIMES)
    leads_min: tuple[float, ...] = tuple(LEAD_TIMES)
    prewarm: tuple[bool, ...] = (True, False)
    trials: int = 40
    days: int = 2
    """Days after the history: the tuning part, then one held back. With more
    than one tuning day a chosen setting must meet the target on each of them
    (:mod:`simulations.tune.each_day`), for every side alike."""
    seed: int = 0
    jobs: int = 2
    keda_sides: tuple[str, ...] = KEDA_SIDES
    target: float = 0.95
    focus: bool = False
    """Only each regime's focus hours of each day (:mod:`simulations.regimes`)."""
    history_days: int = 3
    """Days of the regime before the tuning day, backfilled into prescaler's
    tracker (at most :data:`simulations.backfill.BACKFILL_S` before a part)."""
    prescaler_side: str = "prescaler-gateway"
    """Which of :data:`PRESCALER_SIDES` the forecast on/off variants tune."""
    margin: float = 0.0
    """Points of attainment above the tuning day's target a chosen setting
    must reach there (``prescaler tune --margin``), for every side alike:
    a setting that meets the target by a hair on one day can miss it on
    the next."""
    busier: float = 0.0
    """Percent more traffic on the tuning day than the trace holds (its
    rate scaled by ``1 + busier / 100``), for every side alike: a setting
    chosen for a busier day than the one at hand holds on a day that grows,
    where one chosen for the day itself may fit only its sessions. The
    held-back day and every backfill are the trace's own."""
    capacity_error: float = 0.0
    """prescaler believes each replica carries (1 + e) x the profile's
    capacity (``prescaler simulate --capacity-error``): below 0 the fleet it
    sizes from the forecast is larger by 1 / (1 + e), headroom against an
    event bigger than the days it has seen. KEDA's sides ignore it."""
    prescaler_set: tuple[tuple[str, str], ...] = ()
    """Trigger keys held at a value on every prescaler trial (forecast on
    and off alike), beside ``prewarm``: a default under test, which the
    tuner does not search. KEDA's sides ignore it."""
    forecasters: tuple[str, ...] = ()
    """Further forecasters, each tuned as one more prescaler variant beside
    forecast on (``auto``) and off, to compare forecasters by the cost each
    buys: a method of the trigger's ``forecast:`` key, or statsforecast's
    ``sf_*`` (simulation only: the tracker forecasts with it, the key
    stays ``auto``)."""
    sampler_offset: int = 0
    """Added to ``seed`` for every study's sampler (the traces keep
    ``seed``): another TPE path over the same parts, for every side alike,
    to measure how far one study's path moves a result."""

    def __post_init__(self) -> None:
        unknown = [r for r in self.regimes if r not in REGIMES]
        if unknown:
            raise ValueError(f"unknown regime(s) {unknown} (known: {', '.join(REGIMES)})")
        leads = [x for x in self.leads_min if x not in LEAD_TIMES]
        if leads:
            raise ValueError(f"lead time(s) {leads} min have no preset (known: {list(LEAD_TIMES)})")
        if self.trials < 1 or self.days < 2 or self.jobs < 1:
            raise ValueError(
                f"trials and jobs must be >= 1 and days >= 2 (one to tune, one held back), "
                f"got trials={self.trials}, days={self.days}, jobs={self.jobs}"
            )
        if self.prescaler_side not in PRESCALER_SIDES:
            raise ValueError(
                f"prescaler_side {self.prescaler_side!r} is not one of {', '.join(PRESCALER_SIDES)}"
            )
        if self.history_days < 0:
            raise ValueError(f"history_days must be >= 0, got {self.history_days}")
        if self.focus and self.days > 2:
            raise ValueError("a focus sweep tunes on one day's focus hours: days must be 2")
        if not 0.0 <= self.margin < 100.0:
            raise ValueError(f"margin must be in [0, 100) points, got {self.margin}")
        if not (math.isfinite(self.capacity_error) and self.capacity_error > -1.0):
            raise ValueError(f"capacity_error must be > -1, got {self.capacity_error}")
        if not 0.0 <= self.busier <= 100.0:
            raise ValueError(f"busier must be in [0, 100] percent, got {self.busier}")
        # "prescaler" is what forecast on (auto) runs: the same study twice
        known = (*(m for m in FORECAST_METHODS if m != "prescaler"), *BASELINES)
        odd = [m for m in self.forecasters if m not in known]
        if odd or len(set(self.forecasters)) != len(self.forecasters):
            raise ValueError(
                f"forecasters must be distinct, of {', '.join(known)}; got {list(self.forecasters)}"
            )
        held = dict(self.prescaler_set)
        for key, knob in (("prewarm", "prewarm"), ("forecast", "forecast on/off variants")):
            if key in held:
                raise ValueError(f"prescaler_set cannot hold {key}: the sweep's {knob} set it")
        try:
            parse_settings({"prometheusAddress": "http://prometheus:9090", **held})
        except SettingsError as exc:
            raise ValueError(f"prescaler_set: {exc}") from exc

    @property
    def joined_focus(self) -> bool:
        """The trace holds only the focus hours, joined day after day (focus
        without history); else whole days."""
        return self.focus and not self.history_days

    @property
    def trace_days(self) -> int:
        """Days in a regime's trace: the history, then the tuning and held-back days."""
        return self.history_days + self.days


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
    request = TuneRequest(trace=None, profile=PROFILE, **kw)
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
    (:attr:`simulations.regimes.Regime.hours`), opened one replica lead time
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


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.regimes bench-results/regimes.json [PLOT.png]``:
    the table and the verdicts of a sweep's JSON (and its plot, again)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m benchmarks.regimes")
    parser.add_argument("json_path", type=Path)
    parser.add_argument("plot_path", type=Path, nargs="?")
    args = parser.parse_args(argv)
    doc = json.loads(args.json_path.read_text(encoding="utf-8"))
    print(markdown_table(doc))
    print(json.dumps(targets_met(doc), indent=2))
    if args.plot_path is not None:
        plot_sweep(doc, args.plot_path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
