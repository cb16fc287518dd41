"""The one place where raw samples become a clean series."""

from __future__ import annotations

import numpy as np
import pytest

from forecasting.series import DemandSeries, bin_events, regularize
from tests.forecasting.bench_scoring import series_until


def test_regularize_all_nan_is_an_error() -> None:
    with pytest.raises(ValueError, match="src: no usable samples"):
        regularize(np.array([0.0, 1.0]), np.array([np.nan, np.nan]), 1, signal="s", source="src")


def test_negative_rate_is_garbage() -> None:
    with pytest.raises(ValueError, match="negative demand"):
        regularize(np.array([0.0, 1.0]), np.array([1.0, -1.0]), 1, signal="s", source="src")


def test_zero_policy_for_counts() -> None:
    s = regularize(
        np.array([0.0, 3.0]), np.array([1.0, 4.0]), 1, signal="s", source="x", missing="zero"
    )
    np.testing.assert_allclose(s.values, [1, 0, 0, 4])


def test_bin_events_drops_partial_last_bin_and_keeps_empty_bins() -> None:
    """On/off traffic: empty bins are real zeros; the partial tail is dropped."""
    t = np.array([0.0, 0.5, 1.2, 5.1, 5.2, 6.9])
    s = bin_events(t, 2.0, source="x")
    np.testing.assert_allclose(s.values, [1.5, 0.0, 1.0])  # [6, 6.9) is partial


def test_bin_events_needs_one_full_step() -> None:
    with pytest.raises(ValueError, match="less than one"):
        bin_events(np.array([0.0, 0.5]), 10, source="x")


def test_series_validation_and_resample() -> None:
    with pytest.raises(ValueError, match="finite"):
        DemandSeries(0, 1, np.array([1.0, np.nan]), "s", "x")
    with pytest.raises(ValueError, match=">= 0"):
        DemandSeries(0, 1, np.array([-1.0]), "s", "x")
    s = DemandSeries(0, 10, np.arange(7.0), "s", "x")
    r = s.resample(20)
    np.testing.assert_allclose(r.values, [0.5, 2.5, 4.5])
    with pytest.raises(ValueError, match="whole multiple"):
        s.resample(15)
    w = s.window(3)
    assert w.start_s == 40 and list(w.values) == [4, 5, 6]
    assert not s.values.flags.writeable


def test_zero_policy_interpolates_explicit_missing_samples() -> None:
    """Counts: an absent step is 0, a step holding only NaN is a lost sample (interpolated)."""
    s = regularize(
        np.array([0.0, 1.0, 2.0, 4.0, 5.0]),
        np.array([4.0, np.nan, 2.0, np.nan, 6.0]),
        1,
        signal="s",
        source="x",
        missing="zero",
    )
    # 0: 4, 1: lost (4..2 -> 3), 2: 2, 3: absent -> 0, 4: lost (0..6 -> 3), 5: 6
    np.testing.assert_allclose(s.values, [4, 3, 2, 0, 3, 6])


def test_zero_policy_missing_samples_outside_the_span_are_dropped() -> None:
    """The series still starts and ends at a finite sample; a NaN beside a value is ignored."""
    s = regularize(
        np.array([-2.0, 0.0, 0.2, 1.0, 9.0]),
        np.array([np.nan, 1.0, np.nan, 3.0, np.nan]),
        1,
        signal="s",
        source="x",
        missing="zero",
    )
    assert s.start_s == 0
    np.testing.assert_allclose(s.values, [1, 3])


def test_interpolate_policy_unchanged_by_missing_samples() -> None:
    s = regularize(
        np.array([0.0, 1.0, 3.0]), np.array([2.0, np.nan, 8.0]), 1, signal="s", source="x"
    )
    np.testing.assert_allclose(s.values, [2, 4, 6, 8])


def test_series_until_keeps_the_steps_that_end_by_then() -> None:
    """A row that must not see a held-out span stops where that span begins:
    no kept step reaches past the end, and every step that ends by it stays."""
    s = DemandSeries(100.0, 60.0, np.arange(10.0), "requests_per_s", "x")
    cut = series_until(s, 100.0 + 4 * 60.0)
    assert cut.start_s == 100.0 and cut.step_s == 60.0
    np.testing.assert_array_equal(cut.values, [0.0, 1.0, 2.0, 3.0])
    assert len(series_until(s, 100.0 + 4 * 60.0 + 59.0)) == 4  # the fifth step ends later
    assert series_until(s, 1e9) is s
    with pytest.raises(ValueError, match="no step ends by"):
        series_until(s, 159.0)
    with pytest.raises(ValueError, match="end_s must be finite"):
        series_until(s, float("nan"))
