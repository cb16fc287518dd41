"""The forecaster's fit window: what three days of history buy over two hours, and cost.

prescaler's forecaster adds its daily seasonal terms only when the history
it is fitted on holds two full days (:mod:`forecasting.prescaler.model`).
The regimes (:mod:`simulations.regimes`) are built around once-a-day events
(a 09:00 ramp, a 02:00 batch, working sessions at set hours), which a
forecaster that sees two hours cannot know are coming. This bench compares
a tracker's forecaster fitted on the last 2 h with one fitted on the last
3 days (``decision.tracker_data.DEFAULT_FIT_WINDOW_S``), on what the
tracker sees: each regime's requests (the sweep's trace: history days, the
tuning day, the held-back day) scraped and read through the emulated
Prometheus at the 15 s forecast bins the live scaler and the simulator use
(:func:`simulations.backfill.scraped_history`).

- Accuracy: a rolling-origin backtest (:func:`forecasting.backtest.backtest`,
  refitted at every origin as the tracker refits at a boundary) over the
  held-back day's focus hours, every ``origin_every_s``: MAE of the median
  and pinball loss at 0.9 at the lead-time horizons 2.5, 5, 10 and 15 min.
- Refit cost: seconds of one refit as the tracker pays it (``fit``, then
  the first ``predict`` of the horizons a 15 min lead needs, which fits the
  longer horizons lazily) and of a steady ``update`` + ``predict``, median of
  ``repeats``.
- Memory: bytes one tracker holds after loading its window and forecasting
  (traced allocations, numpy's included), and so for 1,000 ScaledObjects.

The test ``tests/benchmarks/test_fit_window_bench.py`` runs it and writes
``bench-results/fit_window.json``.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.regimes import SweepConfig, write_regime_trace
from decision.prediction import run_prediction
from decision.reading import Reading
from decision.settings import parse_settings
from decision.tracker import Tracker
from decision.tracker_data import DEFAULT_FIT_WINDOW_S, TrackerConfig
from forecasting.backtest import backtest
from forecasting.forecast import DEFAULT_QUANTILES, Forecast
from forecasting.registry import make_forecaster
from forecasting.series import DemandSeries
from simulations.backfill import scraped_history
from simulations.policies import REFRESH_S
from simulations.regimes import REGIMES
from simulations.sim_types import SimConfig
from simulations.traffic import TrafficOptions, load_workload

__all__ = ["HORIZONS_MIN", "WINDOWS_S", "FitWindowConfig", "run"]

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
    pending = tracker.ingest(t, reading, t)
    assert pending is not None
    request = tracker.prediction_request(pending)
    assert request is not None
    tracker.finish_prediction(request, run_prediction(request))
    tracker.conclude(pending)
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
