"""The regime workloads: seeded, day by day, each with the shape it is named for."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.regime_generator import REGIMES, regime_counts

RPS_PER_REPLICA = 0.6
"""About what one default-profile replica serves of the shipped trace's lengths."""


def _rps(name: str, seed: int = 0, days: int = 2) -> np.ndarray:
    return regime_counts(name, days, seed) / 60.0


def _at(rate: np.ndarray, hour: float, day: int = 0) -> float:
    return float(rate[day * 1440 + int(hour * 60)])


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), name=st.sampled_from(sorted(REGIMES)))
def test_every_regime_is_seeded_bounded_and_day_by_day(seed: int, name: str) -> None:
    """The same seed gives the same curve; a day does not depend on how many
    follow; rates are never negative and stay within the default bound of 16
    replicas; the focus hours are those hours of each day, back to back."""
    two = regime_counts(name, 2, seed)
    assert np.array_equal(two, regime_counts(name, 2, seed))
    assert np.array_equal(two[:1440], regime_counts(name, 1, seed))
    assert two.shape == (2880,)
    assert two.min() >= 0.0
    assert two.max() / 60.0 < 16 * RPS_PER_REPLICA
    first, hours = REGIMES[name].focus
    days = two.reshape(2, 1440)[:, first * 60 : (first + hours) * 60]
    assert np.array_equal(regime_counts(name, 2, seed, focus=True), days.ravel())


@pytest.mark.parametrize("name", sorted(REGIMES))
def test_day_two_is_not_day_one_replayed(name: str) -> None:
    rate = _rps(name)
    assert not np.array_equal(rate[:1440], rate[1440:])
    assert not np.array_equal(_rps(name, seed=1), rate)


def test_sparse_bursts_are_a_few_sessions_with_idle_hours_between() -> None:
    rate = _rps("sparse-bursts")
    for day in (0, 1):
        busy = rate[day * 1440 : (day + 1) * 1440] > 0
        starts = np.flatnonzero(np.diff(busy.astype(int)) == 1)
        assert len(starts) == 4
        assert busy.mean() < 0.15  # idle most of the day
        assert _at(rate, 3.0, day) == 0.0 and _at(rate, 22.0, day) == 0.0


def test_business_hours_steps_from_a_trickle_to_the_plateau_in_minutes() -> None:
    rate = _rps("business-hours")
    for day in (0, 1):
        assert _at(rate, 3.0, day) < 0.05
        assert _at(rate, 8.9, day) < 0.05
        assert _at(rate, 9.4, day) > 2.5
        assert _at(rate, 12.5, day) < 0.8 * _at(rate, 10.5, day)  # lunch dip
        assert _at(rate, 20.0, day) < 0.05


def test_the_scheduled_batch_runs_at_two_every_night() -> None:
    rate = _rps("scheduled-batch")
    for day in (0, 1):
        assert _at(rate, 2.25, day) > 4.0 * max(_at(rate, 1.5, day), _at(rate, 4.0, day))
        assert _at(rate, 1.9, day) < 1.0


def test_the_daily_cycle_is_smooth_with_its_peak_at_six_in_the_evening() -> None:
    rate = _rps("daily-cycle")[:1440]
    assert int(np.argmax(rate)) == 18 * 60
    assert int(np.argmin(rate)) == 6 * 60
    assert np.abs(np.diff(rate)).max() < 0.02


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="unknown regime 'weekly'"):
        regime_counts("weekly", 2)
    with pytest.raises(ValueError, match="days must be an integer >= 1"):
        regime_counts("daily-cycle", 0)
