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
from decision.reading import Reading
from decision.seasonal import linear_quantile
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
    peaks = s.window_stats([0.0, 60.0, 200.0, 400.0], 120.0, smooth_bins=4)[0]
    assert peaks[0] == pytest.approx(8.0)  # the four burst bins, (0, 120]
    assert peaks[1] == pytest.approx(8.0)  # (60, 180]: the burst's 1-min mean
    assert peaks[2] == 0.0  # idle
    assert np.isnan(peaks[3])  # beyond the series


def test_a_single_bin_spike_is_smoothed_to_its_one_minute_mean() -> None:
    """One 15-s bin at 8 req/s among idle ones reads 2 req/s over a minute:
    a spike is not a session's level."""
    values = [0.0] * 20
    values[10] = 8.0
    s = _series(values)
    assert s.window_stats([0.0], 300.0, smooth_bins=4)[0][0] == pytest.approx(2.0)
    assert s.window_stats([0.0], 300.0, smooth_bins=1)[0][0] == pytest.approx(8.0)


def test_window_requests_count_the_bins_in_each_window() -> None:
    values = [0.0] * 20
    values[4:8] = [8.0] * 4  # bins ending 75 - 120 s
    s = _series(values)
    got = s.window_stats([0.0, 90.0, 200.0, 400.0], 120.0, 1)[1]
    assert got[0] == pytest.approx(4 * 8.0 * STEP)
    assert got[1] == pytest.approx(2 * 8.0 * STEP)  # (90, 210]: the bins ending 105 and 120
    assert got[2] == 0.0 and np.isnan(got[3])


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
    peak = float(s.window_stats([start], width, k)[0][0])
    ends = STEP * np.arange(1, len(values) + 1)
    inside = np.asarray(values)[(ends > start + 1e-6) & (ends <= start + width + 1e-6)]
    if inside.size == 0:
        assert np.isnan(peak)
        return
    reach = np.asarray(values)[(ends > start - k * STEP) & (ends <= start + width + 1e-6)]
    assert reach.min() - 1e-9 <= peak <= reach.max() + 1e-9
    assert float(s.window_stats([start], width, 1)[0][0]) == pytest.approx(inside.max())


def _tracker(
    days_setting: str, config: TrackerConfig | None = None, wander: str = "0", size: str = "0"
) -> Tracker:
    meta = {
        "seasonalWanderSeconds": wander,
        "seasonalSizeWanderSeconds": size,
        "prometheusAddress": "http://prom:9090",
        "minReplicas": "0",
        "maxReplicas": "16",
        "seasonalPeakDays": days_setting,
        "leadTimeSeconds": "900",
    }
    return Tracker(
        ("ns", "llm"), parse_settings(meta), config or TrackerConfig(), lambda _m: _Flat()
    )


def _event_days(
    days: int, levels: Sequence[float] = (3.0,), shifts_s: Sequence[float] = (0.0,)
) -> tuple[np.ndarray, np.ndarray]:
    """``days`` days of 15-s bins, idle but for a 30-minute session from
    09:00 plus day ``d``'s shift, at day ``d``'s level (both cycle)."""
    times = STEP * np.arange(1, int(days * DAY / STEP) + 1)
    rate = np.zeros(times.size)
    for d in range(days):
        start = d * DAY + 9 * 3600.0 + shifts_s[d % len(shifts_s)]
        rate[(times > start) & (times <= start + 1800.0)] = levels[d % len(levels)]
    return times, rate


def _forecast_at(tracker: Tracker, times: np.ndarray, rate: np.ndarray, t: float) -> Any:
    n = times.size
    tracker.load_history(times, rate, rate * 500, np.zeros(n), np.zeros(n), rate)
    tracker.step(t, Reading(t, 0, 0.0, 0.0, arrival_rate_rps=0.0), t)
    assert tracker.prediction is not None
    return tracker.demand_forecast(t, 900.0)


AT_ZERO = dict(
    ready_replicas=0, waiting=0.0, running=0.0, kv_usage=float("nan"), arrival_rate_rps=0.0,
    prompt_tokens_per_s=0.0, generation_tokens_per_s=0.0, preemptions_per_s=0.0,
    data_age_s=0.0, gateway_rate_rps=0.0,
)  # fmt: skip


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
    # (09:00, 09:05] of each day: 20 bins of 3 req/s x 15 s
    assert on.seasonal_requests == pytest.approx(3.0 * 300.0)
    off = _forecast_at(_tracker("0"), times, rate, t)
    assert off.seasonal_requests_per_s is None and off.seasonal_requests is None
    at_zero = Observation(time_s=t, **AT_ZERO)  # type: ignore[arg-type]
    woken = decide(at_zero, on, _tracker("3").settings, [], capacity)
    assert (woken.replicas, woken.reason) == (2, "forecast")
    assert decide(at_zero, off, _tracker("0").settings, [], capacity).replicas == 0


def test_the_days_are_combined_at_the_forecast_quantile() -> None:
    """Sessions at 2, 4 and 1 req/s, the last one 10 minutes late (outside
    (08:50, 09:05], so that day counts 0): the peak is the 0.9 quantile of
    (2, 4, 0), not their largest or their mean."""
    times, rate = _event_days(3, levels=(2.0, 4.0, 1.0), shifts_s=(0.0, 0.0, 600.0))
    t = 3 * DAY + 8 * 3600.0 + 50 * 60.0
    tracker = _tracker("3")
    got = _forecast_at(tracker, times, rate, t)
    q = tracker.settings.forecast_quantile
    assert got.seasonal_requests_per_s == pytest.approx(np.quantile([2.0, 4.0, 0.0], q))
    assert got.seasonal_requests == pytest.approx(np.quantile([600.0, 1200.0, 0.0], q))


def test_the_wander_widens_the_window_to_the_days_own_event_times() -> None:
    """Sessions 25, 30 and 20 minutes late on the three days (09:25, 09:30,
    09:20): at 08:50 the lead-time window (08:50, 09:05] holds none of them,
    so the fleet at zero waits for live requests. With a 30-minute wander
    the days are read over (08:20, 09:35], which holds 10, 5 and 15 minutes
    of them: the fleet wakes, sized for the session's rate."""
    times, rate = _event_days(3, shifts_s=(1500.0, 1800.0, 1200.0))
    t = 3 * DAY + 8 * 3600.0 + 50 * 60.0
    capacity = ReplicaCapacity(requests_per_s=1.5)
    at_zero = Observation(time_s=t, **AT_ZERO)  # type: ignore[arg-type]
    plain = _tracker("3")
    narrow = _forecast_at(plain, times, rate, t)
    assert narrow.seasonal_requests == 0.0
    assert decide(at_zero, narrow, plain.settings, [], capacity).replicas == 0
    widened = _tracker("3", wander="1800")
    wide = _forecast_at(widened, times, rate, t)
    q = widened.settings.forecast_quantile
    assert wide.seasonal_requests_per_s == pytest.approx(3.0)
    minutes = np.array([10.0, 5.0, 15.0])
    assert wide.seasonal_requests == pytest.approx(np.quantile(3.0 * 60.0 * minutes, q))
    woken = decide(at_zero, wide, widened.settings, [], capacity)
    assert (woken.replicas, woken.reason) == (2, "forecast")


def test_the_window_moves_off_an_event_once_it_has_passed() -> None:
    """At 09:40 the days' sessions (09:00 - 09:30) are behind the window:
    nothing is expected and a fleet at zero stays there."""
    times, rate = _event_days(3)
    t = 3 * DAY + 9 * 3600.0 + 40 * 60.0
    got = _forecast_at(_tracker("3"), times, rate, t)
    assert got.seasonal_requests_per_s == 0.0 and got.seasonal_requests == 0.0
    capacity = ReplicaCapacity(requests_per_s=1.5)
    at_zero = Observation(time_s=t, **AT_ZERO)  # type: ignore[arg-type]
    assert decide(at_zero, got, _tracker("3").settings, [], capacity).replicas == 0


def test_at_the_default_wander_the_fleet_is_held_until_the_event_plus_the_wander() -> None:
    """With the shipped 30-minute wander the days' session (09:00 - 09:30)
    still counts at 09:40, as today's session may run that late; from
    10:00 on (its end plus the wander) nothing is expected."""
    times, rate = _event_days(3)
    default = parse_settings({"prometheusAddress": "http://p:9090"}).seasonal_wander_seconds
    assert default == 1800.0
    during = _forecast_at(_tracker("3", wander="1800"), times, rate, 3 * DAY + 9 * 3600.0 + 2400)
    assert during.seasonal_requests_per_s == pytest.approx(3.0)
    after = _forecast_at(_tracker("3", wander="1800"), times, rate, 3 * DAY + 10 * 3600.0 + 60)
    assert after.seasonal_requests == 0.0


def test_the_oldest_days_wander_is_held_by_the_ring() -> None:
    """The ring keeps the oldest day's wander before it. At 01:00 on day 3
    the oldest day's window opens at 00:30 of day 0; a session there
    (00:30 - 00:40) lies before a ring sized for the fit and scale-in
    windows alone (about 15 minutes past 3 days), and still counts."""
    tracker = _tracker("3", wander="1800")
    assert tracker.series.capacity * STEP >= 3 * DAY + 1800.0
    t = 3 * DAY + 3600.0
    times = STEP * np.arange(1, int(t / STEP))
    rate = np.zeros(times.size)
    rate[(times > 1800.0) & (times <= 2400.0)] = 2.0
    got = _forecast_at(tracker, times, rate, t)
    q = tracker.settings.forecast_quantile
    assert got.seasonal_requests_per_s == pytest.approx(np.quantile([0.0, 0.0, 2.0], q))
    assert got.seasonal_requests == pytest.approx(np.quantile([0.0, 0.0, 2.0 * 600.0], q))


def test_one_stray_request_on_a_past_day_does_not_wake_a_fleet_at_zero() -> None:
    """One request two days ago at 09:05 (one 15-s bin at 1/15 req/s): its
    one-minute peak rate held over a 900-s horizon would be several
    requests, but it was one request, and the wake bar counts requests."""
    times = STEP * np.arange(1, int(3 * DAY / STEP) + 1)
    rate = np.zeros(times.size)
    rate[int((DAY + 9 * 3600.0 + 300.0) / STEP)] = 1.0 / STEP
    t = 3 * DAY + 9 * 3600.0
    got = _forecast_at(_tracker("3"), times, rate, t)
    assert got.seasonal_requests_per_s is not None and got.seasonal_requests_per_s > 0.0
    assert got.seasonal_requests is not None and got.seasonal_requests < 1.0
    capacity = ReplicaCapacity(requests_per_s=1.5)
    at_zero = Observation(time_s=t, **AT_ZERO)  # type: ignore[arg-type]
    assert decide(at_zero, got, _tracker("3").settings, [], capacity).replicas == 0


def test_one_day_of_history_is_not_a_daily_pattern() -> None:
    times, rate = _event_days(1)
    t = DAY + 8 * 3600.0 + 50 * 60.0
    assert _forecast_at(_tracker("3"), times, rate, t).seasonal_requests_per_s is None


def test_days_beyond_the_fit_window_are_said_and_not_used(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A one-day fit window keeps one day: seasonalPeakDays 3 is logged as
    asking too much, and the days' peak is off rather than quietly partial."""
    with caplog.at_level("WARNING", logger="decision.seasonal"):
        tracker = _tracker("3", TrackerConfig(fit_window_s=DAY))
    assert "seasonalPeakDays 3 asks for more days" in caplog.text
    assert "is off" in caplog.text
    times, rate = _event_days(3)
    t = 3 * DAY + 8 * 3600.0 + 50 * 60.0
    assert _forecast_at(tracker, times, rate, t).seasonal_requests_per_s is None


def test_the_days_peak_only_adds_to_the_forecast() -> None:
    """The planned rate is the larger of the upper quantile and the peak; the
    wake bar's count the larger of the median's over the horizon and the
    days' count; a NaN hides neither."""
    low = DemandForecast(900.0, 0.9, 5.0, 4.0, None, 1.0, None)
    high = DemandForecast(900.0, 0.9, 1.0, 0.0, None, 5.0, None, 30.0)
    assert low.planned_requests_per_s == 5.0 and high.planned_requests_per_s == 5.0
    assert low.expected_requests == 3600.0 and high.expected_requests == 30.0
    assert DemandForecast(900.0, 0.9, 1.0, 0.5).planned_requests_per_s == 1.0
    nan = float("nan")
    blind = DemandForecast(900.0, 0.9, nan, nan, None, 2.0, None, 3.0)
    assert blind.planned_requests_per_s == 2.0 and blind.expected_requests == 3.0


def test_a_due_session_is_sized_from_the_wider_stretch_of_the_day() -> None:
    """A 09:00 session at 3 req/s and a 14:00 one at 1 req/s on each of
    three days: at 13:50 the 14:00 session is due, and with a six-hour size
    window it is sized for the morning's 3 req/s (two replicas at 1.5 each,
    not one); the request count, what wakes the fleet, stays the hour's."""
    times, rate = _event_days(3)
    afternoon = (times % DAY > 14 * 3600.0) & (times % DAY <= 14 * 3600.0 + 1800.0)
    rate = np.where(afternoon, 1.0, rate)
    t = 3 * DAY + 13 * 3600.0 + 50 * 60.0
    hour = _forecast_at(_tracker("3", wander="1800"), times, rate, t)
    wide_tracker = _tracker("3", wander="1800", size="21600")
    wide = _forecast_at(wide_tracker, times, rate, t)
    assert hour.seasonal_requests_per_s == pytest.approx(1.0)
    assert wide.seasonal_requests_per_s == pytest.approx(3.0)
    assert wide.seasonal_requests == pytest.approx(hour.seasonal_requests)
    capacity = ReplicaCapacity(requests_per_s=1.5)
    at_zero = Observation(time_s=t, **AT_ZERO)  # type: ignore[arg-type]
    assert decide(at_zero, wide, wide_tracker.settings, [], capacity).replicas == 2
    # at 11:30 nothing is due within the half-hour wander: the size window adds nothing
    idle = _forecast_at(
        _tracker("3", wander="1800", size="21600"), times, rate, 3 * DAY + 11.5 * 3600.0
    )
    assert idle.seasonal_requests_per_s == 0.0


def test_the_size_windows_reach_does_not_count_as_a_day_held(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A 2.5-day fit window keeps two days; the ring grown by twelve hours
    for the size window still counts two (counted whole, it would pass for
    three), so the shortfall of days is still said, and the two days are
    read through their full wander."""
    config = TrackerConfig(fit_window_s=2.5 * DAY)
    with caplog.at_level("WARNING", logger="decision.seasonal"):
        wide = _tracker("3", config, wander="1800", size="43200")
    assert "seasonalPeakDays 3 asks for more days" in caplog.text
    assert "uses the 2 held" in caplog.text
    times, rate = _event_days(3, shifts_s=(1500.0,))
    t = 3 * DAY + 8 * 3600.0 + 50 * 60.0
    # sessions 25 minutes late: read only through the full half-hour wander
    assert _forecast_at(wide, times, rate, t).seasonal_requests_per_s == pytest.approx(3.0)


def test_raising_the_reach_on_a_running_tracker_is_said(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The ring is sized when the tracker is made: a size window raised later
    reads what the ring holds, and the log says so."""
    tracker = _tracker("3", wander="1800")
    raised = parse_settings({**_meta_of(tracker), "seasonalSizeWanderSeconds": "21600"})
    with caplog.at_level("WARNING", logger="decision.seasonal"):
        tracker.update_settings(raised)
    assert "until the scaler restarts" in caplog.text
    assert tracker.settings.seasonal_size_wander_seconds == 21600.0


def _meta_of(tracker: Tracker) -> dict[str, str]:
    s = tracker.settings
    return {
        "prometheusAddress": "http://prom:9090",
        "seasonalWanderSeconds": str(s.seasonal_wander_seconds),
        "seasonalPeakDays": str(s.seasonal_peak_days),
        "leadTimeSeconds": "900",
    }


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(0.0, 1e6, allow_nan=False), min_size=2, max_size=14),
    st.one_of(st.sampled_from([0.0, 0.5, 0.9, 0.95, 0.99, 1.0]), st.floats(0.0, 1.0)),
)
def test_linear_quantile_is_numpys_bit_for_bit(values: list[float], quantile: float) -> None:
    """The days' quantile in plain Python must give numpy's exact float."""
    assert linear_quantile(values, quantile) == float(np.quantile(np.array(values), quantile))


def test_window_stats_cache_follows_new_bins() -> None:
    """The cached running sum is rebuilt once a bin closes."""
    s = BinnedSeries(STEP, 16)
    for i in range(1, 9):
        s.add(i * STEP, 1.0, 0.0)
    before = s.window_stats([0.0], 20 * STEP, 1)
    s.add(9 * STEP, 50.0, 0.0)
    after = s.window_stats([0.0], 20 * STEP, 1)
    assert before[0][0] == 1.0 and after[0][0] == 50.0
    assert after[1][0] == before[1][0] + 50.0 * STEP


def test_window_stats_answer_is_per_window() -> None:
    """Asked again for the same bins, the same answer; for other bins, theirs."""
    s = _series([1.0, 2.0, 9.0, 3.0, 4.0, 5.0])
    first = s.window_stats([0.0], 2 * STEP, 1)
    assert s.window_stats([1.0], 2 * STEP, 1)[0][0] == first[0][0] == 2.0
    assert s.window_stats([0.0], 3 * STEP, 1)[0][0] == 9.0
    assert s.window_stats([0.0], 3 * STEP, 2)[0][0] == 5.5
    assert s.window_stats([0.0], 2 * STEP, 1)[1][0] == first[1][0] == 3.0 * STEP


@pytest.mark.parametrize("quantile", [-0.1, 1.5, float("nan")])
def test_linear_quantile_refuses_a_quantile_outside_0_1(quantile: float) -> None:
    with pytest.raises(ValueError, match="quantile"):
        linear_quantile([1.0, 2.0, 3.0], quantile)


def test_window_stats_keeps_answers_at_alternating_windows() -> None:
    series = BinnedSeries(step_s=15.0, capacity=400)
    for i in range(300):
        series.add(15.0 * i, float(i % 7), float(i % 5))
    first = series.window_stats([100.0, 1000.0], 600.0, 4)
    second = series.window_stats([200.0, 2000.0], 900.0, 4)
    first[0][0] = -1.0  # a caller's change must not reach the cache
    again = series.window_stats([100.0, 1000.0], 600.0, 4)
    assert len(series._windows_cache) == 2
    assert again[0][0] != -1.0
    assert series.window_stats([200.0, 2000.0], 900.0, 4)[1].tolist() == second[1].tolist()
