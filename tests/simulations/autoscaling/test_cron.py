"""KEDA's cron trigger: the window rule of pkg/scalers/cron_scaler.go over
robfig/cron/v3's five-field schedules (Schedule.Next is strictly after now)."""

from __future__ import annotations

import datetime as dt
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulations.autoscaling.cron import DEFAULT_EPOCH, CronWindow, parse_cron

HOUR = 3600.0


def _window(start: str, end: str, tz: str = "UTC", replicas: int = 6) -> CronWindow:
    return CronWindow(parse_cron(start), parse_cron(end), tz, replicas)


def test_default_epoch_is_a_monday_midnight_utc() -> None:
    assert DEFAULT_EPOCH.weekday() == 0 and DEFAULT_EPOCH.hour == 0


def test_business_hours_window_is_start_inclusive_end_exclusive() -> None:
    """start 0 8 * * 1-5, end 0 20 * * 1-5 in Europe/Paris (UTC+1 in January):
    from Monday 07:00 UTC (08:00 local) up to, not including, 19:00 UTC. At
    08:00 local the next start is tomorrow's and the next end today's 20:00, so
    the end comes first: inside. At 20:00 local the next start comes first: outside."""
    w = _window("0 8 * * 1-5", "0 20 * * 1-5", "Europe/Paris")
    assert not w.inside(6.99 * HOUR)
    assert w.inside(7 * HOUR) and w.value(7 * HOUR) == 6.0
    assert w.inside(18.99 * HOUR)
    assert not w.inside(19 * HOUR) and w.value(19 * HOUR) == 0.0
    saturday = 5 * 24 * HOUR
    assert not w.inside(saturday + 10 * HOUR)


def test_a_window_across_midnight() -> None:
    """22:00 to 06:30: inside from 22:00 through the night until 06:30."""
    w = _window("0 22 * * *", "30 6 * * *")
    assert [w.inside(h * HOUR) for h in (3.0, 6.49, 6.5, 12.0, 21.99, 22.0, 23.5)] == [
        True,
        True,
        False,
        False,
        False,
        True,
        True,
    ]


def test_schedule_syntax() -> None:
    """Lists, ranges, steps (N/step means N to the maximum), names, '?'."""
    s = parse_cron("*/15 9-17/4 1,15 JAN-MAR mon,WED")
    assert s.minutes == {0, 15, 30, 45} and s.hours == {9, 13, 17}
    assert s.days == {1, 15} and s.months == {1, 2, 3} and s.weekdays == {1, 3}
    assert parse_cron("5/20 0 ? * *").minutes == {5, 25, 45}


def test_day_of_month_or_day_of_week_when_both_restricted() -> None:
    """Standard cron (robfig dayMatches): both fields restricted means either matches.

    '0 12 1 * 1' from Tuesday 2024-01-02: next is Monday 2024-01-08 (a Monday)
    before Thursday 2024-02-01 (the 1st)."""
    s = parse_cron("0 12 1 * 1")
    assert s.next_after(dt.datetime(2024, 1, 2)) == dt.datetime(2024, 1, 8, 12, 0)
    star = parse_cron("0 12 1 * *")
    assert star.next_after(dt.datetime(2024, 1, 2)) == dt.datetime(2024, 2, 1, 12, 0)


@pytest.mark.parametrize(
    "start,end,tz,replicas,message",
    [
        ("0 8 * * *", "0 8 * * *", "UTC", 2, "same time"),
        ("0 8 * * *", "0 9 * * *", "UTC", 0, "desiredReplicas"),
        ("0 8 * *", "0 9 * * *", "UTC", 2, "expected 5 fields"),
        ("61 8 * * *", "0 9 * * *", "UTC", 2, "minute"),
        ("0 8 * * 7", "0 9 * * *", "UTC", 2, "day of week"),
        ("0 8 * * *", "0 9 * * *", "Mars/Olympus", 2, "IANA"),
    ],
)
def test_keda_validation(start: str, end: str, tz: str, replicas: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        CronWindow(parse_cron(start), parse_cron(end), tz, replicas)


def test_a_window_survives_pickling() -> None:
    """Policies cross process boundaries (--jobs)."""
    w = _window("0 8 * * *", "0 20 * * *", "America/Los_Angeles")
    w.inside(0.0)
    copy = pickle.loads(pickle.dumps(w))
    assert [copy.inside(h * HOUR) for h in range(0, 48, 3)] == [
        w.inside(h * HOUR) for h in range(0, 48, 3)
    ]


@settings(max_examples=60, deadline=None)
@given(
    start_h=st.integers(0, 23),
    end_h=st.integers(0, 23),
    times=st.lists(st.floats(0.0, 7 * 24 * HOUR), min_size=1, max_size=20),
)
def test_daily_window_matches_the_wall_clock(start_h: int, end_h: int, times: list[float]) -> None:
    """A daily window [start, end) in UTC: inside exactly when the hour of day is
    in it (wrapping midnight), whatever order the times come in (the cache)."""
    if start_h == end_h:
        return
    w = _window(f"0 {start_h} * * *", f"0 {end_h} * * *")
    for t in times:
        hour = (t % (24 * HOUR)) / HOUR
        wraps = start_h > end_h
        expected = (hour >= start_h or hour < end_h) if wraps else (start_h <= hour < end_h)
        assert w.inside(t) == expected
