"""The recent days' peak over the coming lead time: what sizes an event's
fleet ahead of it when the forecaster's median blurs the event."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decision.history import BinnedSeries
from decision.policy import DemandForecast, Observation, ReplicaCapacity, decide
from decision.prediction import run_prediction
from decision.reading import Reading
from decision.settings import parse_settings
from decision.tracker import Tracker
from decision.tracker_data import TrackerConfig

DAY = 86_400.0
STEP = 15.0


class _Flat:
    """A forecaster that forecasts nothing, so only the seasonal term shows."""

    def fit(self, y: np.ndarray, step_s: float) -> None:
        pass

    def update(self, y: np.ndarray) -> None:
        pass

    def predict(self, horizon_steps: int, quantiles: Sequence[float] = (0.5,)) -> Any:
        zeros = np.zeros(horizon_steps)

        class _F:
            def quantile(self, q: float) -> np.ndarray:
                return zeros

        return _F()


def _series(values: Sequence[float]) -> BinnedSeries:
    s = BinnedSeries(STEP, len(values) + 1)
    times = STEP * np.arange(1, len(values) + 1)
    s.load(times, np.asarray(values, dtype=float), np.zeros(len(values)))
    return s


def test_window_peaks_are_one_minute_means_of_the_bins_in_each_window() -> None:
    # bins end at 15, 30, ..., 300; a 4-bin burst of 8 req/s ending at 120 s
    values = [0.0] * 20
    values[4:8] = [8.0] * 4
    s = _series(values)
    peaks = s.window_peaks([0.0, 60.0, 200.0, 400.0], 120.0, smooth_bins=4)
    assert peaks[0] == pytest.approx(8.0)  # the four burst bins, (0, 120]
    assert peaks[1] == pytest.approx(8.0)  # (60, 180]: the burst's 1-min mean
    assert peaks[2] == 0.0  # idle
    assert np.isnan(peaks[3])  # beyond the series


@settings(max_examples=50, deadline=None)
@given(
    values=st.lists(st.floats(0.0, 50.0), min_size=1, max_size=60),
    start=st.floats(-100.0, 1000.0),
    width=st.floats(1.0, 600.0),
    k=st.integers(1, 6),
)
def test_a_window_peak_lies_between_the_window_bins_min_and_max(
    values: list[float], start: float, width: float, k: int
) -> None:
    """A moving mean never leaves the range of what it averages (the window's
    bins and the ``k - 1`` before them), and one bin's mean is the window's
    largest bin."""
    s = _series(values)
    peak = float(s.window_peaks([start], width, k)[0])
    ends = STEP * np.arange(1, len(values) + 1)
    inside = np.asarray(values)[(ends > start + 1e-6) & (ends <= start + width + 1e-6)]
    if inside.size == 0:
        assert np.isnan(peak)
        return
    reach = np.asarray(values)[(ends > start - k * STEP) & (ends <= start + width + 1e-6)]
    assert reach.min() - 1e-9 <= peak <= reach.max() + 1e-9
    assert float(s.window_peaks([start], width, 1)[0]) == pytest.approx(inside.max())


def _tracker(days_setting: str) -> Tracker:
    meta = {
        "prometheusAddress": "http://prom:9090",
        "minReplicas": "0",
        "maxReplicas": "16",
        "seasonalPeakDays": days_setting,
        "leadTimeSeconds": "900",
    }
    return Tracker(("ns", "llm"), parse_settings(meta), TrackerConfig(), lambda _m: _Flat())


def _event_days(days: int) -> tuple[np.ndarray, np.ndarray]:
    """``days`` days of 15-s bins, idle but for 3 req/s from 09:00 to 09:30
    (09:05 on the middle day, an event's daily wander)."""
    times = STEP * np.arange(1, int(days * DAY / STEP) + 1)
    rate = np.zeros(times.size)
    for d in range(days):
        start = d * DAY + 9 * 3600.0 + (300.0 if d == 1 else 0.0)
        rate[(times > start) & (times <= start + 1800.0)] = 3.0
    return times, rate


def _forecast_at(tracker: Tracker, times: np.ndarray, rate: np.ndarray, t: float) -> Any:
    n = times.size
    tracker.load_history(times, rate, rate * 500, np.zeros(n), np.zeros(n), rate)
    pending = tracker.ingest(t, Reading(t, 0, 0.0, 0.0, arrival_rate_rps=0.0), t)
    assert pending is not None
    request = tracker.prediction_request(pending)
    assert request is not None
    tracker.finish_prediction(request, run_prediction(request))
    return tracker.demand_forecast(t, 900.0)


def test_the_days_peak_sizes_and_wakes_an_event_the_forecaster_misses() -> None:
    """Three idle days with a 09:00 session each; at 08:50 on day 4 the
    forecaster says nothing, the days' peak says 3 req/s: the fleet at zero
    wakes with the session's fleet (3 / 1.5 per replica = 2), a lead time
    ahead. Off (0 days), nothing wakes it."""
    times, rate = _event_days(3)
    t = 3 * DAY + 8 * 3600.0 + 50 * 60.0
    capacity = ReplicaCapacity(requests_per_s=1.5)
    on = _forecast_at(_tracker("3"), times, rate, t)
    assert on.upper_requests_per_s == 0.0 and on.median_requests_per_s == 0.0
    assert on.seasonal_requests_per_s == pytest.approx(3.0)
    off = _forecast_at(_tracker("0"), times, rate, t)
    assert off.seasonal_requests_per_s is None
    at_zero = Observation(
        time_s=t, ready_replicas=0, waiting=0.0, running=0.0, kv_usage=float("nan"),
        arrival_rate_rps=0.0, prompt_tokens_per_s=0.0, generation_tokens_per_s=0.0,
        preemptions_per_s=0.0, data_age_s=0.0, gateway_rate_rps=0.0,
    )  # fmt: skip
    woken = decide(at_zero, on, _tracker("3").settings, [], capacity)
    assert (woken.replicas, woken.reason) == (2, "forecast")
    assert decide(at_zero, off, _tracker("0").settings, [], capacity).replicas == 0


def test_one_day_of_history_is_not_a_daily_pattern() -> None:
    times, rate = _event_days(1)
    t = DAY + 8 * 3600.0 + 50 * 60.0
    assert _forecast_at(_tracker("3"), times, rate, t).seasonal_requests_per_s is None


def test_the_days_peak_only_adds_to_the_forecast() -> None:
    """The planned rate is the larger of the upper quantile and the peak."""
    low = DemandForecast(900.0, 0.9, 5.0, 4.0, None, 1.0, None)
    high = DemandForecast(900.0, 0.9, 1.0, 0.0, None, 5.0, None)
    assert low.planned_requests_per_s == 5.0 and high.planned_requests_per_s == 5.0
    assert high.expected_requests_per_s == 5.0
    assert DemandForecast(900.0, 0.9, 1.0, 0.5).planned_requests_per_s == 1.0
