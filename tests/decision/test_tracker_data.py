"""A tracker's cadences: the default fit window holds the daily season."""

from __future__ import annotations

import numpy as np
import pytest

from decision.reading import Reading
from decision.settings import parse_settings
from decision.tracker import Tracker
from decision.tracker_data import TrackerConfig
from forecasting.forecast import daily_period

SETTINGS = parse_settings({"prometheusAddress": "http://prom:9090", "maxReplicas": "16"})


def _fit_request_size(config: TrackerConfig, history_s: float) -> int:
    """Bins the first refit after backfilling ``history_s`` of history fits on."""
    step = config.step_s
    times = np.arange(step, history_s + step / 2, step)
    n = times.size
    rate = 1.0 + np.sin(2 * np.pi * times / 86400.0)
    tracker = Tracker(("ns", "llm"), SETTINGS, config)
    tracker.load_history(times, rate, rate * 500, np.ones(n), np.zeros(n), rate)
    t = float(times[-1] + step)
    pending = tracker.ingest(t, Reading(t, 1, 0.0, 0.0, arrival_rate_rps=1.0), t)
    assert pending is not None
    request = tracker.prediction_request(pending)
    assert request is not None and request.fit_y is not None
    return int(request.fit_y.size)


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
