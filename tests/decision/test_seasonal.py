"""Timing from the hour, size from the wider stretch of the day: what
``seasonalSizeWanderSeconds`` adds to the days' peak."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decision.history import BinnedSeries
from decision.seasonal import DAY_S, SeasonalWindows, seasonal_peak
from decision.settings import SettingsError, parse_settings
from decision.tracker import Tracker
from decision.tracker_data import TrackerConfig

STEP = 15.0
Q = 0.9


def _days(
    sessions: list[list[tuple[float, float]]], stray_at_s: float | None = None
) -> BinnedSeries:
    """Three days of 15-s bins, idle but for day ``d``'s sessions, each
    (start hour, req/s) for 30 minutes, and one request in the bin at
    ``stray_at_s``; the ring holds all of it."""
    times = STEP * np.arange(1, int(3 * DAY_S / STEP) + 1)
    rate = np.zeros(times.size)
    for d, day in enumerate(sessions):
        for hour, level in day:
            start = d * DAY_S + hour * 3600.0
            rate[(times > start) & (times <= start + 1800.0)] = level
    if stray_at_s is not None:
        rate[int(stray_at_s / STEP)] = 1.0 / STEP
    series = BinnedSeries(STEP, times.size + 1)
    series.load(times, rate, np.zeros(times.size))
    return series


# a morning session of 2 req/s each day, and a smaller one at 14:00 (1.0-1.2 req/s)
DAYS = [[(9.0, 2.0), (14.0, 1.0)], [(9.0, 1.9), (14.0, 1.2)], [(9.0, 2.0), (14.0, 1.1)]]
AT_14 = 3 * DAY_S + 13.75 * 3600.0  # 13:45 on day 3, a 15-minute lead ahead of the session


def _peak(series: BinnedSeries, t: float, size_wander_s: float) -> tuple[float | None, ...]:
    return seasonal_peak(series, t, 900.0, Q, SeasonalWindows(3, 1800.0, size_wander_s, 4))


def test_off_the_hour_alone_sizes_the_session() -> None:
    """Without a size window the 14:00 session is sized for 14:00's days alone."""
    peak, count = _peak(_days(DAYS), AT_14, 0.0)
    assert peak == pytest.approx(np.quantile([1.0, 1.2, 1.1], Q))
    assert count is not None and count > 1.0


def test_a_due_session_is_sized_for_the_days_biggest_in_the_size_window() -> None:
    """With six hours each side the 14:00 session, due by its hour, is sized
    for the days' 09:00 sessions (2, 1.9, 2 req/s at the quantile); the
    count, which says how many requests to expect, stays the hour's."""
    series = _days(DAYS)
    _, hour_count = _peak(series, AT_14, 0.0)
    peak, count = _peak(series, AT_14, 6 * 3600.0)
    assert peak == pytest.approx(np.quantile([2.0, 1.9, 2.0], Q))
    assert count == hour_count


def test_an_hour_with_no_session_stays_idle() -> None:
    """At 11:45 no day had a session within the wandered window: nothing is
    due, and the size window, which reaches both sessions, adds nothing."""
    peak, count = _peak(_days(DAYS), 3 * DAY_S + 11.75 * 3600.0, 6 * 3600.0)
    assert (peak, count) == (0.0, 0.0)


def test_one_stray_request_does_not_make_an_hour_due() -> None:
    """One request on one past day at 12:00 is not a session: the hour is
    not sized for the morning's."""
    series = _days(DAYS, stray_at_s=DAY_S + 12 * 3600.0)
    peak, count = _peak(series, 3 * DAY_S + 11.75 * 3600.0, 6 * 3600.0)
    assert count is not None and 0.0 < count < 1.0
    assert peak is not None and 0.0 < peak < 0.1


def test_a_size_window_no_wider_than_the_wander_changes_nothing() -> None:
    series = _days(DAYS)
    assert _peak(series, AT_14, 1800.0) == _peak(series, AT_14, 0.0)


@settings(max_examples=30, deadline=None)
@given(
    levels=st.lists(st.floats(0.5, 3.0), min_size=6, max_size=6),
    size_wander_h=st.floats(0.6, 12.0),
)
def test_the_size_window_only_adds(levels: list[float], size_wander_h: float) -> None:
    """Sizing from a wider window never plans for less than the hour does,
    and never for more than the largest peak of the days read."""
    days = [[(9.0, levels[2 * d]), (14.0, levels[2 * d + 1])] for d in range(3)]
    series = _days(days)
    hour, _ = _peak(series, AT_14, 0.0)
    wide, _ = _peak(series, AT_14, size_wander_h * 3600.0)
    assert hour is not None and wide is not None
    assert hour - 1e-9 <= wide <= max(levels) + 1e-9


def test_the_key_is_parsed_and_bounded() -> None:
    base = {"prometheusAddress": "http://p:9090"}
    assert parse_settings(base).seasonal_size_wander_seconds == 0.0
    got = parse_settings({**base, "seasonalSizeWanderSeconds": "21600"})
    assert got.seasonal_size_wander_seconds == 21600.0
    assert parse_settings(
        {**base, "seasonalSizeWanderSeconds": "43200"}
    ).seasonal_size_wander_seconds
    with pytest.raises(SettingsError, match="seasonalSizeWanderSeconds"):
        parse_settings({**base, "seasonalSizeWanderSeconds": "50000"})


def test_the_trackers_ring_holds_the_oldest_days_size_window() -> None:
    """The size window reaches further back than the wander: the tracker's
    ring keeps the oldest day's stretch of it too."""
    meta = {"prometheusAddress": "http://p:9090", "seasonalSizeWanderSeconds": "21600"}
    wide = Tracker(("ns", "llm"), parse_settings(meta), TrackerConfig())
    plain = Tracker(("ns", "llm"), parse_settings(meta | {"seasonalSizeWanderSeconds": "0"}),
                    TrackerConfig())  # fmt: skip
    held = wide.series.capacity * wide.series.step_s
    assert held >= 3 * DAY_S + 21600.0
    assert held - plain.series.capacity * plain.series.step_s == pytest.approx(21600.0 - 1800.0)
