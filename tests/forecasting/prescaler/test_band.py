"""The holdout band: quantiles from the shipped point's own out-of-sample errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from forecasting.prescaler.band import BAND_LEVELS as _BAND_LEVELS
from forecasting.prescaler.band import (
    band_level,
    holdout_error_band,
    level_spread,
    recency_quantiles,
)
from forecasting.prescaler.band import sorted_quantile as _sorted_quantile
from forecasting.prescaler.model import PrescalerConfig, PrescalerForecaster
from tests.support.coverage import rolling_coverage


def band_spread(band: np.ndarray, q: float, scale: float, widen: float) -> float:
    """Offset of quantile ``q`` from the point, from a whole holdout band (what
    the forecaster computes in two steps, keeping the level between calls)."""
    return level_spread(band_level(band, q), q, scale, widen)


def test_band_is_the_quantile_function_of_the_holdout_log_errors() -> None:
    rng = np.random.default_rng(1)
    point = rng.uniform(5, 50, 400)
    actual = point * np.exp(rng.normal(0, 0.2, 400))
    scale = np.full(400, 0.5)
    band = holdout_error_band(point, actual, scale, 2.0, 0.0)  # every error alike
    err = (np.log(actual + 2.0) - np.log(point + 2.0)) / 0.5
    assert band.shape == _BAND_LEVELS.shape
    assert np.allclose(band, np.quantile(err, _BAND_LEVELS))
    assert np.all(np.diff(band) >= 0)
    default_half_life = PrescalerConfig().band_half_life
    assert default_half_life > 0
    half_life = default_half_life * err.size
    assert np.allclose(
        holdout_error_band(point, actual, scale, 2.0, default_half_life),
        recency_quantiles(err, half_life, _BAND_LEVELS),
    )


def test_recency_quantiles_with_equal_weights_are_hazens() -> None:
    v = np.random.default_rng(7).normal(size=301)
    assert np.allclose(
        recency_quantiles(v, 1e15, _BAND_LEVELS), np.quantile(v, _BAND_LEVELS, method="hazen")
    )


def test_recent_errors_weigh_more_in_the_band() -> None:
    """A holdout whose later errors are wider (traffic that turned burstier)
    gives a wider weighted band than an unweighted one, and a narrower one
    when the later errors are the calm ones."""
    rng = np.random.default_rng(8)
    calm, wild = rng.normal(0, 0.1, 300), rng.normal(0, 1.0, 300)
    levels = np.array([0.1, 0.9])

    def width(q: np.ndarray) -> float:
        return float(q[1] - q[0])

    late_wild = np.concatenate([calm, wild])
    late_calm = np.concatenate([wild, calm])
    plain = width(np.quantile(late_wild, levels, method="hazen"))
    assert width(recency_quantiles(late_wild, 60.0, levels)) > 1.2 * plain
    assert width(recency_quantiles(late_calm, 60.0, levels)) < 0.8 * plain


@settings(max_examples=50, deadline=None)
@given(
    arrays(np.float64, st.integers(1, 200), elements=st.floats(-50, 50)),
    st.floats(0.5, 1e6),
)
def test_recency_quantiles_are_ordered_and_within_the_data(v: np.ndarray, half_life: float) -> None:
    q = recency_quantiles(v, half_life, _BAND_LEVELS)
    assert np.all(np.diff(q) >= -1e-12)
    assert q[0] >= v.min() - 1e-12 and q[-1] <= v.max() + 1e-12


def test_horizons_with_enough_independent_errors_get_the_band() -> None:
    """n holdout origins hold about n / h independent h-step errors."""
    rng = np.random.default_rng(2)
    y = rng.poisson(40.0, 600).astype(float)
    # Not the default count: at 50 errors the longest eager horizon falls short.
    f = PrescalerForecaster(PrescalerConfig(band_min_errors=50.0))
    f.fit(y, 60.0)
    assert f.holdout_band(1) is not None and f.holdout_band(5) is not None
    assert f.holdout_band(12) is None  # 12 * 50 = 600 origins: more than the history holds
    horizons = range(1, f.config.fit_horizon + 1)
    short = PrescalerForecaster()
    short.fit(y[:25], 60.0)  # about 15 holdout origins
    assert all(short.holdout_band(h) is None for h in horizons)
    off = PrescalerForecaster(PrescalerConfig(band_min_errors=0.0))
    off.fit(y, 60.0)
    assert all(off.holdout_band(h) is None for h in horizons)


def test_predict_puts_the_band_around_the_combined_point() -> None:
    rng = np.random.default_rng(3)
    y = rng.poisson(40.0, 600).astype(float)
    f = PrescalerForecaster()
    f.fit(y, 60.0)
    # Fewer rows than local_scale_rows: unscaled errors, so the arithmetic below is exact.
    assert y.size < f.config.local_scale_rows
    band, c = f.holdout_band(1), f.offset
    assert band is not None and c is not None
    low, high = float(np.interp(0.1, _BAND_LEVELS, band)), float(np.interp(0.9, _BAND_LEVELS, band))
    assert low < 0.0 < high  # an unbiased law: no clipping below
    fc = f.predict(1, (0.1, 0.5, 0.9))
    centre = math.log(fc.values[1, 0] + c)
    assert fc.values[2, 0] == pytest.approx(math.exp(centre + high) - c)
    assert fc.values[0, 0] == pytest.approx(math.exp(centre + low) - c)
    for i, q in enumerate((0.1, 0.5, 0.9)):
        assert fc.values[i, 0] == pytest.approx(
            math.exp(centre + band_spread(band, q, 1.0, 1.0)) - c
        )
    # The band's offsets are the law's errors at each level ...
    assert band_spread(np.linspace(-0.3, 0.3, _BAND_LEVELS.size), 0.9, 1.0, 1.0) == pytest.approx(
        0.24
    )
    assert band_spread(np.linspace(-0.3, 0.3, _BAND_LEVELS.size), 0.1, 1.0, 1.0) == pytest.approx(
        -0.24
    )
    # ... and a biased law is clipped so that the band still holds the point.
    biased = np.linspace(0.1, 0.2, _BAND_LEVELS.size)
    assert band_spread(biased, 0.1, 1.0, 1.0) == 0.0
    assert band_spread(biased, 0.9, 1.0, 1.0) > 0.0
    assert band_spread(-biased, 0.9, 1.0, 1.0) == 0.0


def test_white_noise_band_covers_its_level() -> None:
    """A day-long holdout of white noise: the 0.9 quantile covers ~90 %."""
    rng = np.random.default_rng(7)
    y = rng.normal(100, 10, 4000)
    f = PrescalerForecaster()
    f.fit(y[:2000], 60.0)
    assert f.holdout_band(2) is not None
    assert 0.85 <= rolling_coverage(f, y, range(2000, 3990, 10)) <= 0.95


def test_negative_band_min_errors_is_rejected() -> None:
    with pytest.raises(ValueError, match="band_min_errors"):
        PrescalerConfig(band_min_errors=-1.0)


@settings(max_examples=15, deadline=None)
@given(
    y=arrays(
        float,
        st.integers(300, 700),
        elements=st.one_of(st.just(0.0), st.floats(0, 1e4, allow_nan=False)),
    ),
    horizon=st.integers(1, 14),
)
def test_banded_forecasts_are_ordered_and_non_negative(y: np.ndarray, horizon: int) -> None:
    f = PrescalerForecaster()
    f.fit(y, 60.0)
    fc = f.predict(horizon, (0.05, 0.1, 0.5, 0.9, 0.99))
    assert np.all(np.isfinite(fc.values)) and np.all(fc.values >= 0)
    assert np.all(np.diff(fc.values, axis=0) >= 0)


def test_banded_horizons_keep_the_guard_quantiles_of_the_ridge_law_exactly() -> None:
    """Where the band is the holdout's, the ridge's residual law shrinks to its
    percent grid (memory), and the guard's 0.1 / 0.9 quantiles do not move."""
    rng = np.random.default_rng(9)
    y = rng.poisson(30.0, 600).astype(float)
    banded = PrescalerForecaster()
    banded.fit(y, 60.0)
    full = PrescalerForecaster(PrescalerConfig(band_min_errors=0.0))
    full.fit(y, 60.0)
    assert banded.holdout_band(1) is not None and full.holdout_band(1) is None
    kept, every = banded.ridge_residuals(1), full.ridge_residuals(1)
    assert kept is not None and every is not None
    assert kept.size == _BAND_LEVELS.size < every.size
    for q in (0.1, 0.9):
        assert _sorted_quantile(kept, q) == _sorted_quantile(every, q)
    assert np.array_equal(banded.predict(12, (0.5,)).values, full.predict(12, (0.5,)).values)
    # After a jump the guard drops members (the median moves from the
    # unguarded twin's), and it reads the same quantiles: the medians agree.
    jump = np.concatenate([y, np.full(8, 90.0)])
    unguarded = PrescalerForecaster(PrescalerConfig(guard=0.0))
    unguarded.fit(y, 60.0)
    for g in (banded, full, unguarded):
        g.update(jump)
    median = banded.predict(12, (0.5,)).values
    assert np.array_equal(median, full.predict(12, (0.5,)).values)
    assert not np.array_equal(median, unguarded.predict(12, (0.5,)).values)


def test_negative_history_values_read_as_zero_in_the_band() -> None:
    """A history may hold negative rates (counter resets differenced upstream);
    the band's errors clip them like the model's transform, never NaN."""
    rng = np.random.default_rng(0)
    y = rng.normal(5, 5, 600)
    assert (y < 0).any()
    f = PrescalerForecaster()
    f.fit(y, 60.0)
    band = f.holdout_band(1)
    assert band is not None and np.all(np.isfinite(band))
    fc = f.predict(5, (0.1, 0.5, 0.9))
    assert np.all(fc.values[2] > fc.values[1] + 1.0)
