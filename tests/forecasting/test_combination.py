"""The cheap candidates and the error-weighted combination inside prescaler."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forecasting.combination import (
    CANDIDATES,
    TREND_DAMPING,
    SmoothingBank,
    SmoothingParams,
    damped_sum,
    holt_filters,
    holt_state,
    inverse_error_weights,
    lfilter,
    min_abs_error_weights,
    ses_level,
    simplex_grid,
    trend_solve,
    trend_state,
)
from forecasting.prescaler.band import median_and_quantile
from forecasting.prescaler.band import sorted_quantile as _sorted_quantile
from forecasting.prescaler.model import PrescalerConfig, PrescalerForecaster


def _holt_loop(y: np.ndarray, a: float, b: float, phi: float) -> tuple[np.ndarray, np.ndarray]:
    level, trend = y[0], 0.0
    ls, ts = [], []
    for v in y:
        new = a * v + (1 - a) * (level + phi * trend)
        trend = b * (new - level) + (1 - b) * phi * trend
        level = new
        ls.append(level)
        ts.append(trend)
    return np.array(ls), np.array(ts)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.floats(0, 1000), min_size=1, max_size=60),
    st.sampled_from([0.1, 0.3, 0.8]),
    st.sampled_from([0.02, 0.2]),
    st.sampled_from([0.9, 1.0]),
)
def test_filtered_holt_equals_the_recursion(
    values: list[float], a: float, b: float, phi: float
) -> None:
    y = np.array(values)
    level, trend = holt_state(y, a, b, phi)
    ref_l, ref_t = _holt_loop(y, a, b, phi)
    assert np.allclose(level, ref_l, atol=1e-6 * (1 + y.max()))
    assert np.allclose(trend, ref_t, atol=1e-6 * (1 + y.max()))


def test_ses_level_is_the_recursion() -> None:
    y = np.array([4.0, 8.0, 0.0, 2.0])
    expected, s = [], 4.0
    for v in y:
        s = 0.3 * v + 0.7 * s
        expected.append(s)
    assert np.allclose(ses_level(y, 0.3), expected)


def test_damped_sum() -> None:
    assert damped_sum(3, 1.0) == 3.0
    assert abs(damped_sum(2, 0.9) - (0.9 + 0.81)) < 1e-12


def test_trend_is_fitted_and_extrapolated() -> None:
    y = 10.0 + 2.0 * np.arange(200)
    bank = SmoothingBank(y)
    params = bank.select(5, y.size)
    last, ses, holt, trend = bank.forecasts(params, np.array([199]), 5)[:, 0]
    assert last == y[-1]
    assert ses < y[-1]  # a level lags a trend
    assert y[-1] + 2.0 < holt <= y[-1] + 2.0 * 5 + 1.0  # a damped trend: part of the way
    # The least-squares line's slope, exact on a line, fades like Holt's.
    assert abs(trend - (y[-1] + 2.0 * damped_sum(5, TREND_DAMPING))) < 1e-6


def test_inverse_weights_favour_the_smaller_error() -> None:
    err = np.array([[1.0, 1.0], [2.0, 2.0]])
    w = inverse_error_weights(err, 2.0)
    assert abs(w.sum() - 1) < 1e-12 and abs(w[0] - 0.8) < 1e-12


def test_min_mae_weights_see_through_duplicates() -> None:
    """Three copies of a worse forecast do not outvote a better one."""
    rng = np.random.default_rng(3)
    actual = rng.normal(0, 1, 500)
    good = actual + rng.normal(0, 0.1, 500)
    bad = actual + rng.normal(0, 1.0, 500)
    w = min_abs_error_weights(np.vstack([good, bad, bad, bad]), actual)
    assert w[0] >= 0.9 and abs(w.sum() - 1) < 1e-9 and np.all(w >= 0)


def test_combination_weights_are_a_convex_mix_and_forecasts_sane() -> None:
    rng = np.random.default_rng(5)
    y = np.maximum(50 + np.cumsum(rng.normal(0, 2, 1500)), 0.0)
    f = PrescalerForecaster()
    f.fit(y, 60)
    for h in range(1, 13):
        w = f.combination_weights(h)
        assert w is not None and w.shape == (len(CANDIDATES) + 1,)
        assert abs(w.sum() - 1) < 1e-9 and np.all(w >= 0)
        w[:] = -1.0  # a copy: the fitted weights stay
        again = f.combination_weights(h)
        assert again is not None and np.all(again >= 0)
    fc = f.predict(10, (0.1, 0.5, 0.9))
    assert np.all(np.diff(fc.values, axis=0) >= 0)
    assert abs(fc.median[0] - y[-1]) < 15


def test_short_history_without_holdout_falls_back_to_the_ridge() -> None:
    f = PrescalerForecaster()
    f.fit(np.array([3.0, 4.0, 3.5, 3.8, 4.1, 3.9, 4.0, 3.7, 3.6, 4.2]), 30)
    assert f.combination_weights(2) is None
    fc = f.predict(10)
    assert np.all(np.isfinite(fc.values)) and 2.0 < fc.median[0] < 6.0


def test_smoothing_params_default_on_tiny_histories() -> None:
    assert SmoothingBank(np.array([1.0, 2.0])).select(1, 2) == SmoothingParams()


def test_selection_sees_only_targets_before_the_end() -> None:
    """Parameters chosen with ``end`` ignore everything at or after it."""
    rng = np.random.default_rng(4)
    y = rng.normal(100, 5, 400)
    changed = y.copy()
    changed[300:] = 1000.0 * rng.random(100)
    assert SmoothingBank(y).select(3, 300) == SmoothingBank(changed).select(3, 300)


def test_noise_picks_a_slow_level_and_a_walk_a_fast_one() -> None:
    rng = np.random.default_rng(9)
    noise = 50 + rng.normal(0, 5, 2000)
    walk = 500 + np.cumsum(rng.normal(0, 5, 2000))
    assert SmoothingBank(noise).select(1, 2000).ses_alpha <= 0.1
    assert SmoothingBank(walk).select(1, 2000).ses_alpha >= 0.7


def test_the_band_holds_the_point_and_stays_calibrated() -> None:
    """No crossing, sane coverage on a noisy random walk."""
    rng = np.random.default_rng(11)
    y = np.maximum(100 + np.cumsum(rng.normal(0, 1, 3000)) + rng.normal(0, 5, 3000), 0.0)
    for _ in range(1):
        f = PrescalerForecaster()
        f.fit(y[:2000], 60)
        hits = []
        for t in range(2000, 2990, 10):
            f.update(y[:t])
            fc = f.predict(3, (0.1, 0.5, 0.9))
            assert np.all(fc.quantile(0.1) <= fc.median) and np.all(fc.median <= fc.quantile(0.9))
            hits.append(y[t + 2] <= fc.quantile(0.9)[2])
        assert 0.75 <= np.mean(hits) <= 0.99


def test_bad_combination_config_is_rejected() -> None:
    with pytest.raises(ValueError, match="min_holdout"):
        PrescalerConfig(min_holdout=0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=200),
    st.floats(0.01, 0.99),
    st.floats(0.01, 0.99),
)
def test_own_lfilter_matches_scipy(values: list[float], alpha: float, beta: float) -> None:
    """The hand-written first/second-order filter is scipy's, so scipy stays off the hot path."""
    from scipy.signal import lfilter as scipy_lfilter

    x = np.asarray(values, dtype=float)
    for b, a in (
        ([alpha], [1.0, -(1.0 - alpha)]),
        ([alpha, 0.0], [1.0, -(1.0 - alpha) * (1 + beta), beta * (1.0 - alpha)]),
    ):
        np.testing.assert_allclose(lfilter(b, a, x), scipy_lfilter(b, a, x), rtol=1e-12, atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(0.0, 1e4, allow_nan=False), min_size=1, max_size=60),
    st.sampled_from((0.05, 0.2, 0.5)),
    st.sampled_from((0.1, 0.8)),
    st.sampled_from((0.02, 0.2)),
    st.integers(1, 13),
)
def test_last_values_equal_the_full_paths_bit_for_bit(
    values: list[float], alpha: float, h_alpha: float, h_beta: float, h: int
) -> None:
    """predict's end-state shortcut must not change a single forecast bit (the
    recursive smoothers) or more than rounding (the least-squares trend)."""
    y = np.asarray(values)
    params = SmoothingParams(alpha, h_alpha, h_beta)
    full = SmoothingBank(y).forecasts(params, np.array([y.size - 1]), h)[:, 0]
    fresh = SmoothingBank(y)
    for _ in range(2):  # the second call reads the cached end states
        short = np.array(fresh.last_values(params, h))
        assert np.array_equal(short[:3], full[:3])
        assert abs(short[3] - full[3]) <= 1e-6 * (1.0 + float(np.abs(y).max()))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=80),
    st.floats(0.0, 1.0),
)
def test_sorted_quantile_is_numpys_linear_quantile(values: list[float], q: float) -> None:
    """The rank shortcut on presorted residuals reproduces np.quantile exactly."""
    xs = np.sort(np.asarray(values))
    assert _sorted_quantile(xs, q) == float(np.quantile(xs, q))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=80),
    st.floats(0.0, 1.0),
)
def test_median_and_quantile_are_numpys(values: list[float], q: float) -> None:
    """One partition gives np.median and np.quantile bit for bit (the rolling
    holdout reads both of every refit's residuals)."""
    xs = np.asarray(values)
    assert median_and_quantile(xs, q) == (float(np.median(xs)), float(np.quantile(xs, q)))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-1e4, 1e4, allow_nan=False), min_size=1, max_size=120),
    st.floats(0.02, 0.98),
    st.floats(0.01, 0.5),
    st.sampled_from((0.9, 0.95, 0.98, 0.99)),
)
def test_smoother_paths_are_the_filters_bit_for_bit(
    values: list[float], alpha: float, beta: float, lam: float
) -> None:
    """Holt's level and trend, and the trend member's two sums, are filtered in
    one pass each; every path must be :func:`lfilter`'s to the last bit (the
    grid search compares them, and a changed bit can change a choice)."""
    y = np.asarray(values)
    d = y - y[0]
    num_l, num_b, den = holt_filters(alpha, beta, 0.9)
    level, trend = holt_state(y, alpha, beta, 0.9)
    assert np.array_equal(level, lfilter(num_l, den, d) + y[0])
    assert np.array_equal(trend, lfilter(num_b, den, d))
    a = lfilter([1.0], [1.0, -lam], d)
    b = lfilter([0.0, lam], [1.0, -2.0 * lam, lam * lam], d)
    j = np.arange(y.size, dtype=float)
    pw = lam**j
    ref_level, ref_slope = trend_solve(
        a, b, np.cumsum(pw), np.cumsum(pw * j), np.cumsum(pw * j * j)
    )
    line, slope = trend_state(y, lam)
    assert np.array_equal(line, ref_level + y[0]) and np.array_equal(slope, ref_slope)


def test_the_weight_grid_is_the_row_by_row_build() -> None:
    """The simplex grid built a block at a time is the row-by-row one (the
    MAE-optimal weights index it)."""

    def rows_one_by_one(k: int, steps: int) -> np.ndarray:
        if k == 1:
            return np.ones((1, 1))
        rows = []
        for i in range(steps + 1):
            subs = rows_one_by_one(k - 1, steps - i) if steps - i > 0 else [np.zeros(k - 1)]
            for rest in subs:
                rows.append(np.concatenate(([i / steps], np.asarray(rest) * (steps - i) / steps)))
        grid = np.unique(np.round(np.array(rows), 9), axis=0)
        return np.asarray(grid / grid.sum(axis=1, keepdims=True))

    for k, steps in ((1, 10), (2, 3), (3, 7), (5, 10)):
        assert np.array_equal(simplex_grid(k, steps), rows_one_by_one(k, steps))


def test_few_independent_errors_choose_the_parameters_on_one_step_errors() -> None:
    """40 steps hold ~3 independent 10-step errors: the smoothers' parameters
    come from the one-step errors; 400 steps hold ~39: from the 10-step ones."""
    rng = np.random.default_rng(5)
    y = 50 + np.cumsum(rng.normal(0, 1, 400)) + rng.normal(0, 3, 400)
    bank = SmoothingBank(y)
    assert bank.select(10, 40, 5.0) == bank.select(1, 40)
    assert bank.select(10, 40, 0.0) != bank.select(1, 40)  # the rule changes the choice here
    assert bank.select(10, 400, 5.0) == bank.select(10, 400)


def _select_by_loops(bank: SmoothingBank, h: int, end: int) -> SmoothingParams:
    """The grid search written as plain loops, one mean per grid point."""
    from forecasting.combination import (
        _HOLT_ALPHAS,
        _HOLT_BETAS,
        _SES_ALPHAS,
        _TREND_LAMBDAS,
        HOLT_DAMPING,
    )

    origins = np.arange(0, max(end - h, 0))
    if origins.size < 4:
        return SmoothingParams()
    actual = bank.y[origins + h]

    def mae(fc: np.ndarray) -> float:
        return float(np.mean(np.abs(actual - fc)))

    ses = min(_SES_ALPHAS, key=lambda a: mae(bank.ses(a)[origins]))
    carry = damped_sum(h, HOLT_DAMPING)
    holt = min(
        ((a, b) for a in _HOLT_ALPHAS for b in _HOLT_BETAS),
        key=lambda ab: mae(
            np.maximum(bank.holt(*ab)[0][origins] + carry * bank.holt(*ab)[1][origins], 0.0)
        ),
    )
    tcarry = damped_sum(h, TREND_DAMPING)
    lam = min(
        _TREND_LAMBDAS,
        key=lambda v: mae(
            np.maximum(bank.trend(v)[0][origins] + tcarry * bank.trend(v)[1][origins], 0.0)
        ),
    )
    return SmoothingParams(ses, holt[0], holt[1], HOLT_DAMPING, lam)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 12), st.integers(5, 300))
def test_select_equals_the_plain_grid_search(seed: int, h: int, end: int) -> None:
    """The search picks what a plain scan of the grid picks (first minimum on
    ties), and remembers it: a faster search must not move the backtest."""
    rng = np.random.default_rng(seed)
    y = np.maximum(20 + np.cumsum(rng.normal(0, 1, 300)) + rng.normal(0, 2, 300), 0.0)
    bank = SmoothingBank(y)
    assert bank.select(h, end) == _select_by_loops(bank, h, end)
    assert bank.select(h, end) is bank.select(h, end)  # remembered per (h, end)
