"""History kept per ScaledObject (pure): forecast bins, learned capacity, lead time."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decision.history import BinnedSeries, SaturationCapacity, lead_time_from_samples


def test_a_bin_holds_the_reading_at_its_end_and_closes_there() -> None:
    series = BinnedSeries(step_s=3.0, capacity=10)
    assert series.add(1.0, 2.0, 20.0) == []
    assert series.add(2.0, 4.0, 40.0) == []
    closed = series.add(3.0, 6.0, 60.0)  # the reading at the bin's end closes it
    assert [(b.end_s, b.requests_per_s, b.tokens_per_s) for b in closed] == [(3.0, 6.0, 60.0)]
    series.add(5.0, 1.0, 10.0)
    series.add(7.0, 2.0, 20.0)  # bin (3, 6] closes with its latest reading (at 5)
    assert series.requests().tolist() == [6.0, 1.0]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.one_of(st.floats(0, 100), st.just(math.nan)), min_size=1, max_size=40),
    st.integers(1, 12),
)
def test_loading_history_equals_adding_each_bin(values: list[float], capacity: int) -> None:
    """A backfilled series (load) holds exactly the bins of a live one (add)."""
    times = np.arange(1, len(values) + 1, dtype=float) * 5.0
    live, loaded = BinnedSeries(5.0, capacity), BinnedSeries(5.0, capacity)
    for t, v in zip(times, values, strict=True):
        live.add(float(t), v, v * 2)
    arr = np.array(values)
    loaded.load(times, arr, arr * 2)
    assert np.array_equal(live.requests(), loaded.requests())
    assert np.array_equal(live.tokens(), loaded.tokens())
    assert live.last_end == loaded.last_end
    live.add(times[-1] + 5.0, 7.0, 1.0)
    loaded.add(times[-1] + 5.0, 7.0, 1.0)
    assert np.array_equal(live.requests(), loaded.requests())


def test_empty_bins_repeat_the_last_value_and_nan_is_a_gap() -> None:
    series = BinnedSeries(step_s=1.0, capacity=10)
    series.add(1.0, 5.0, 0.0)
    series.add(2.0, math.nan, 0.0)  # gap: carries 5.0
    closed = series.add(5.0, 1.0, 0.0)  # bins 3 and 4 had no reading
    assert [b.end_s for b in closed] == [3.0, 4.0, 5.0]
    assert series.requests().tolist() == [5.0, 5.0, 5.0, 5.0, 1.0]


def test_ring_keeps_the_last_bins_and_windows_by_time() -> None:
    series = BinnedSeries(step_s=1.0, capacity=4)
    for t in range(1, 11):
        series.add(float(t), float(t), 0.0)
    assert len(series) == 4
    assert series.requests().tolist() == [7.0, 8.0, 9.0, 10.0]
    assert series.requests(until_s=9.0, last=2).tolist() == [8.0, 9.0]
    assert series.last_end == 10.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0, 100), min_size=1, max_size=60), st.integers(1, 8))
def test_backfilled_and_live_series_are_identical(values: list[float], capacity: int) -> None:
    """Adding readings in one go or one by one gives the same bins (statelessness)."""
    a, b = BinnedSeries(2.0, capacity), BinnedSeries(2.0, capacity)
    for i, v in enumerate(values):
        a.add(float(i + 1), v, v * 10)
    for i, v in enumerate(values):
        b.add(float(i + 1), v, v * 10)
    assert np.array_equal(a.requests(), b.requests())
    assert a.requests().size == min(capacity, len(values) // 2)


def test_capacity_is_learned_only_while_saturated() -> None:
    learner = SaturationCapacity(window_s=100.0)
    learner.add(0.0, ready=2, waiting=0.0, requests_per_s=4.0, tokens_per_s=800.0, target_waiting=3)
    assert learner.estimate(0.0) == (None, None)
    learner.add(
        1.0, ready=2, waiting=9.0, requests_per_s=6.0, tokens_per_s=1200.0, target_waiting=3
    )
    assert learner.estimate(1.0) == (3.0, 600.0)
    assert learner.estimate(500.0) == (None, None)  # forgotten: memory defaults to the window


def test_learned_capacity_outlives_an_idle_spell_within_its_memory() -> None:
    """A fleet that saturates only at a daily event still knows its capacity
    at the next one; the estimate is the median of the newest window."""
    learner = SaturationCapacity(window_s=100.0, memory_s=86_400.0)
    for t, rps in ((0.0, 10.0), (1000.0, 2.0), (1050.0, 4.0), (1060.0, 6.0)):
        learner.add(
            t, ready=1, waiting=9.0, requests_per_s=rps, tokens_per_s=rps * 100, target_waiting=3
        )
    # the sample at t=0 is outside the newest 100 s: the median of 2, 4, 6
    assert learner.estimate(1060.0) == (4.0, 400.0)
    assert learner.estimate(80_000.0) == (4.0, 400.0)  # an idle day later
    assert learner.estimate(1060.0 + 86_401.0) == (None, None)  # past the memory


def test_lead_time_is_a_high_quantile_of_measured_starts() -> None:
    assert lead_time_from_samples([]) is None
    assert lead_time_from_samples([100.0] * 9 + [300.0]) == pytest.approx(120.0)


_CAP_VALUES = st.one_of(st.floats(-2.0, 20.0), st.just(math.nan), st.just(math.inf))


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 4), _CAP_VALUES, _CAP_VALUES, _CAP_VALUES), max_size=40),
    max_samples=st.integers(1, 8),
    target=st.floats(0.0, 6.0),
)
def test_loading_capacity_history_equals_adding_each_point(
    rows: list[tuple[int, float, float, float]], max_samples: int, target: float
) -> None:
    """A restart's backfill learns what the live refreshes would have,
    bad readings included (only the newest ``max_samples`` are kept)."""
    times = 10.0 * np.arange(len(rows))
    ready, waiting, rps, tps = (np.array([r[k] for r in rows], dtype=float) for k in range(4))
    loaded = SaturationCapacity(window_s=100.0, max_samples=max_samples, memory_s=150.0)
    loaded.load(times, ready, waiting, rps, tps, target, until_s=float(len(rows) * 10))
    added = SaturationCapacity(window_s=100.0, max_samples=max_samples, memory_s=150.0)
    for i, t in enumerate(times):
        if t > len(rows) * 10 - 150.0:
            added.add(float(t), int(ready[i]), waiting[i], rps[i], tps[i], target)
    now = float(len(rows) * 10)
    assert loaded.estimate(now) == added.estimate(now)
