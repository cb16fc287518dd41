"""A tracker's cadences: the default fit window holds the daily season."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from decision.reading import Reading
from decision.settings import parse_settings
from decision.tracker import Tracker
from decision.tracker_data import TrackerConfig
from forecasting.forecast import daily_period

SETTINGS = parse_settings({"prometheusAddress": "http://prom:9090", "maxReplicas": "16"})


class _FitSize:
    """A forecaster that records the size of each fit and predicts nothing."""

    def __init__(self, fitted: list[int]) -> None:
        self.fitted = fitted

    def fit(self, y: np.ndarray, step_s: float) -> None:
        self.fitted.append(int(y.size))

    def update(self, y: np.ndarray) -> None:
        pass

    def predict(self, horizon_steps: int, quantiles: Sequence[float] = ()) -> Any:
        raise RuntimeError("not needed")


def _fit_request_size(config: TrackerConfig, history_s: float) -> int:
    """Bins the first refit after backfilling ``history_s`` of history fits on."""
    step = config.step_s
    times = np.arange(step, history_s + step / 2, step)
    n = times.size
    rate = 1.0 + np.sin(2 * np.pi * times / 86400.0)
    fitted: list[int] = []
    tracker = Tracker(("ns", "llm"), SETTINGS, config, lambda _method: _FitSize(fitted))
    tracker.load_history(times, rate, rate * 500, np.ones(n), np.zeros(n), rate)
    t = float(times[-1] + step)
    tracker.step(t, Reading(t, 1, 0.0, 0.0, arrival_rate_rps=1.0), t)
    (size,) = fitted
    return size


def test_the_default_window_fits_on_the_two_full_days_the_daily_season_needs() -> None:
    """The forecaster adds its daily terms from two full days of history: a
    backfilled tracker at the default window gives a refit that many bins;
    the old two hours could never."""
    config = TrackerConfig()
    day = daily_period(config.step_s)
    assert config.step_s == 15.0
    assert _fit_request_size(config, 4 * 86400.0) >= 2 * day
    assert _fit_request_size(TrackerConfig(fit_window_s=7200.0), 4 * 86400.0) < 2 * day


@pytest.mark.parametrize("window", [0.0, -1.0])
def test_a_window_that_holds_nothing_is_refused(window: float) -> None:
    with pytest.raises(ValueError, match="fit_window_s"):
        TrackerConfig(fit_window_s=window)
