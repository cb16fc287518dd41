"""The forecaster's fit window: what three days of history buy over two hours, and cost.

prescaler's forecaster adds its daily seasonal terms only when its history
holds two full days (:mod:`forecasting.prescaler.model`), and the regimes
(:mod:`lab.regime_generator`) are built around once-a-day events a
forecaster that sees two hours cannot know are coming. This bench compares
a tracker's forecaster fitted on the last 2 h with one fitted on the last
3 days, on each regime's requests as the tracker reads them through the
emulated Prometheus (:func:`simulations.backfill.scraped_history`): accuracy
(a rolling-origin backtest over the held-back day's focus hours: MAE and
pinball at 0.9 at the 2.5 to 15 min lead times), refit cost (one refit and
a steady update + predict, median of ``repeats``) and a tracker's memory.
``python -m lab.fit_window CONFIG.yaml`` runs it (lab/tests/test_fit_window_bench.py too).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from decision.reading import Reading
from decision.settings import parse_settings
from decision.tracker import Tracker
from decision.tracker_data import DEFAULT_FIT_WINDOW_S, TrackerConfig
from forecasting.backtest import backtest
from forecasting.forecast import DEFAULT_QUANTILES, Forecast
from forecasting.registry import make_forecaster
from forecasting.series import DemandSeries
from lab.config import ConfigError, load_section
from lab.regime_config import SweepConfig
from lab.regime_generator import REGIMES
from lab.regimes import write_regime_trace
from simulations.backfill import scraped_history
from simulations.policies import REFRESH_S
from simulations.sim_types import SimConfig
from simulations.traffic import TrafficOptions, load_workload

__all__ = ["HORIZONS_MIN", "WINDOWS_S", "FitWindowConfig", "run", "run_recorded"]

WINDOWS_S: dict[str, float] = {"2h": 7200.0, "3d": DEFAULT_FIT_WINDOW_S}
"""The windows compared: the old default and the new one."""
HORIZONS_MIN: tuple[float, ...] = (2.5, 5.0, 10.0, 15.0)
"""Lead times of the regime sweep's presets, in minutes."""
STEP_S = TrackerConfig(refresh_interval_s=REFRESH_S).step_s
"""The forecast bin the simulator's trackers use (the live default too)."""


@dataclass(frozen=True)
class FitWindowConfig:
    """Which regimes, how many origins, how many timing repeats."""

    regimes: tuple[str, ...] = tuple(REGIMES)
    history_days: int = 3
    origin_every_s: float = 1200.0
    repeats: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        unknown = [r for r in self.regimes if r not in REGIMES]
        if unknown:
            known = ", ".join(REGIMES)
            raise ConfigError("regimes", f"unknown regime(s) {unknown} (known: {known})")

    @classmethod
    def load(cls, path: Path) -> FitWindowConfig:
        """The ``fit_window`` section of the lab config at ``path`` (its
        ``regimes``; every regime when absent)."""
        s = load_section(path, "fit_window", ("regimes",))
        with s.fields():
            return cls(regimes=s.strs("regimes", tuple(REGIMES)))


class WindowedForecaster:
    """prescaler's forecaster as a tracker with a fit window drives it: it
    only ever sees the last ``bins`` of the history it is given."""

    name = "prescaler"

    def __init__(self, bins: int) -> None:
        self.bins = bins
        self.model = make_forecaster("prescaler")

    def fit(self, y: np.ndarray, step_s: float) -> None:
        self.model.fit(y[-self.bins :], step_s)

    def update(self, y: np.ndarray) -> None:
        self.model.update(y[-self.bins :])

    def predict(
        self, horizon_steps: int, quantiles: Sequence[float] = DEFAULT_QUANTILES
    ) -> Forecast:
        return self.model.predict(horizon_steps, quantiles)


def tracker_series(regime: str, config: FitWindowConfig) -> tuple[np.ndarray, np.ndarray]:
    """(bin end times from the trace's start, requests/s) of the regime's
    sweep trace as the tracker reads it (I/O: a temporary trace file)."""
    sweep = SweepConfig(regimes=(regime,), history_days=config.history_days, seed=config.seed)
    with tempfile.TemporaryDirectory() as tmp:
        workload = load_workload(
            write_regime_trace(regime, sweep, Path(tmp)), TrafficOptions(seed=config.seed)
        )
    sim = SimConfig()
    history = scraped_history(
        workload,
        scrape_interval_s=sim.scrape_interval_s,
        rate_window_s=sim.rate_window_s,
        bin_s=STEP_S,
    )
    assert history is not None
    return history.times_s + workload.duration_s, history.requests_per_s


def focus_origins(times: np.ndarray, regime: str, day: int) -> tuple[int, int]:
    """(first origin, end of the scored span) as series indices: the focus
    hours of ``day`` (the held-back day)."""
    first_h, hours = REGIMES[regime].focus
    start = day * 86400.0 + first_h * 3600.0
    end = start + hours * 3600.0
    return int(np.searchsorted(times, start, "right")), int(np.searchsorted(times, end, "right"))


def accuracy(
    y: np.ndarray, lo: int, hi: int, bins: int, config: FitWindowConfig
) -> dict[str, dict[str, float]]:
    """Backtest scores per horizon (minutes) of a ``bins``-bin window over
    origins ``lo .. hi``, refitted at each origin."""
    horizons = [round(m * 60.0 / STEP_S) for m in HORIZONS_MIN]
    span = y[: hi + max(horizons)]
    origins = max(1, math.ceil((hi - lo) * STEP_S / config.origin_every_s))
    result = backtest(
        DemandSeries(0.0, STEP_S, span, "requests_per_s", "regime"),
        horizons,
        ("prescaler",),
        initial=lo,
        max_origins=origins,
        max_refits=origins,
        factory=lambda _name: WindowedForecaster(bins),
    )
    out: dict[str, dict[str, float]] = {}
    for minutes, h in zip(HORIZONS_MIN, horizons, strict=True):
        s = result.scores[h]["prescaler"]
        out[f"{minutes:g}"] = {
            "mae": s.mae,
            "pinball_p90": s.pinball_p90,
            "coverage_p90": s.coverage_p90,
            "origins": float(s.origins),
        }
    return out


def refit_cost(y: np.ndarray, origin: int, bins: int, repeats: int) -> dict[str, Any]:
    """Seconds of one refit (fit + the first predict of a 15 min lead's
    horizons) and of a steady update + predict, median of ``repeats``; and
    the seasons the fit found."""
    steps = math.ceil((HORIZONS_MIN[-1] * 60.0 + STEP_S) / STEP_S) + 1
    refits, steady = [], []
    model = WindowedForecaster(bins)
    for _ in range(repeats):
        model = WindowedForecaster(bins)
        t0 = time.perf_counter()
        model.fit(y[:origin], STEP_S)
        model.predict(steps, (0.5, 0.9))
        refits.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        model.update(y[: origin + 1])
        model.predict(steps, (0.5, 0.9))
        steady.append(time.perf_counter() - t0)
    periods = list(getattr(model.model, "_periods", ()))
    return {
        "refit_s": statistics.median(refits),
        "update_predict_s": statistics.median(steady),
        "seasonal_periods_bins": periods,
    }


def tracker_memory(times: np.ndarray, y: np.ndarray, origin: int, window_s: float) -> int:
    """Bytes one tracker with a ``window_s`` fit window keeps after loading
    the history up to ``origin`` and forecasting once."""
    _loaded_tracker(times, y, 480, 3600.0)  # imports and caches, not one tracker's
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tracker = _loaded_tracker(times, y, origin, window_s)
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert tracker.fitted
    return int(held)


def _loaded_tracker(times: np.ndarray, y: np.ndarray, origin: int, window_s: float) -> Tracker:
    """A tracker backfilled with the bins before ``origin`` that has forecast once."""
    settings = parse_settings(
        {"prometheusAddress": "http://prom:9090", "leadTimeSeconds": "900", "maxReplicas": "16"}
    )
    config = TrackerConfig(refresh_interval_s=REFRESH_S, fit_window_s=window_s)
    tracker = Tracker(("bench", "llm"), settings, config)
    n = origin
    zeros = np.zeros(n)
    tracker.load_history(times[:n], y[:n], y[:n] * 500.0, np.ones(n), zeros, y[:n])
    t = float(times[n])
    reading = Reading(t, 1, 0.0, 0.0, arrival_rate_rps=float(y[n]), completion_rate_rps=0.0)
    tracker.step(t, reading, t)
    assert tracker.prediction is not None
    return tracker


def run(config: FitWindowConfig) -> dict[str, Any]:
    """Every regime under both windows: accuracy, refit cost, memory."""
    doc: dict[str, Any] = {
        "step_s": STEP_S,
        "windows_s": WINDOWS_S,
        "horizons_min": list(HORIZONS_MIN),
        "config": {
            "history_days": config.history_days,
            "origin_every_s": config.origin_every_s,
            "repeats": config.repeats,
            "seed": config.seed,
        },
        "regimes": {},
    }
    held_day = config.history_days + 1
    for regime in config.regimes:
        times, y = tracker_series(regime, config)
        lo, hi = focus_origins(times, regime, held_day)
        row: dict[str, Any] = {"bins": int(y.size), "origins_span": [lo, hi]}
        for label, window_s in WINDOWS_S.items():
            bins = int(window_s / STEP_S)
            row[label] = {
                "accuracy": accuracy(y, lo, hi, bins, config),
                "cost": refit_cost(y, lo, bins, config.repeats),
                "tracker_bytes": tracker_memory(times, y, lo, window_s),
            }
        row["mae_ratio_3d_vs_2h"] = {
            k: row["3d"]["accuracy"][k]["mae"] / row["2h"]["accuracy"][k]["mae"]
            for k in row["2h"]["accuracy"]
        }
        row["pinball_ratio_3d_vs_2h"] = {
            k: row["3d"]["accuracy"][k]["pinball_p90"] / row["2h"]["accuracy"][k]["pinball_p90"]
            for k in row["2h"]["accuracy"]
        }
        doc["regimes"][regime] = row
    return doc


def markdown(doc: dict[str, Any]) -> str:
    """The figures as a Markdown table: per regime and horizon, MAE and
    pinball (0.9) under each window; refit cost and memory per tracker."""
    lines = [
        "| regime | lead | MAE 2h | MAE 3d | 3d/2h | pinball 2h | pinball 3d | 3d/2h |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for regime, row in doc["regimes"].items():
        for k in row["2h"]["accuracy"]:
            a, b = row["2h"]["accuracy"][k], row["3d"]["accuracy"][k]
            lines.append(
                f"| {regime} | {k} min | {a['mae']:.3f} | {b['mae']:.3f} | "
                f"{row['mae_ratio_3d_vs_2h'][k]:.2f} | {a['pinball_p90']:.3f} | "
                f"{b['pinball_p90']:.3f} | {row['pinball_ratio_3d_vs_2h'][k]:.2f} |"
            )
    lines += [
        "",
        "| regime | window | refit (s) | update + predict (s) | seasons (bins) | tracker (MB) |",
        "|---|---|---|---|---|---|",
    ]
    for regime, row in doc["regimes"].items():
        for label in WINDOWS_S:
            c = row[label]["cost"]
            lines.append(
                f"| {regime} | {label} | {c['refit_s']:.3f} | {c['update_predict_s']:.4f} | "
                f"{c['seasonal_periods_bins'] or '-'} | {row[label]['tracker_bytes'] / 1e6:.2f} |"
            )
    return "\n".join(lines) + "\n"


def run_recorded(config: FitWindowConfig, results: Path) -> dict[str, Any]:
    """Run the bench and write ``fit_window.json`` and ``.md`` under ``results``."""
    doc = run(config)
    results.mkdir(parents=True, exist_ok=True)
    (results / "fit_window.json").write_text(json.dumps(doc, indent=2) + "\n")
    (results / "fit_window.md").write_text(markdown(doc))
    return doc


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m lab.fit_window CONFIG.yaml [--results DIR]``: the bench over
    the regimes a lab config's ``fit_window`` section names."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m lab.fit_window")
    parser.add_argument("config", type=Path, help="a lab config (lab/configs/)")
    parser.add_argument("--results", type=Path, default=Path("bench-results"))
    args = parser.parse_args(argv)
    try:
        config = FitWindowConfig.load(args.config)
    except ConfigError as exc:
        print(f"python -m lab.fit_window: {exc}", file=sys.stderr)
        return 2
    print(markdown(run_recorded(config, args.results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
