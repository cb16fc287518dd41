"""Short histories: the least-squares trend candidate, the rolling-origin
holdout that weighs the pool, and the band's coverage calibration."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forecasting.combination import (
    CANDIDATES,
    SmoothingBank,
    trend_last,
    trend_state,
)
from forecasting.prescaler.band import calibrated, tail_factor
from forecasting.prescaler.members import guarded_weights
from forecasting.prescaler.model import PrescalerConfig, PrescalerForecaster
from tests.support.coverage import rolling_coverage


def _wls_line(y: np.ndarray, lam: float) -> tuple[float, float]:
    """The discounted least-squares line at the end of ``y``, solved directly."""
    age = np.arange(y.size)[::-1].astype(float)
    w = lam**age
    if y.size == 1:
        return float(y[0]), 0.0
    x = np.column_stack([np.ones(y.size), -age])
    level, slope = np.linalg.solve(x.T @ (x * w[:, None]), x.T @ (w * y))
    return float(level), float(slope)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.floats(0.0, 1000.0, allow_nan=False), min_size=1, max_size=40),
    st.sampled_from((0.7, 0.9, 0.99)),
)
def test_trend_state_is_the_discounted_least_squares_line(values: list[float], lam: float) -> None:
    y = np.asarray(values)
    level, slope = trend_state(y, lam)
    for t in {0, y.size // 2, y.size - 1}:
        ref_level, ref_slope = _wls_line(y[: t + 1], lam)
        tol = 1e-6 * (1.0 + float(np.abs(y).max()))
        assert abs(level[t] - ref_level) <= tol * (t + 1)
        assert abs(slope[t] - ref_slope) <= tol
    end = trend_last(y, lam)
    assert abs(end[0] - level[-1]) <= 1e-6 * (1.0 + float(np.abs(y).max()))


def test_a_short_history_already_weighs_its_pool() -> None:
    """30 steps: the rolling-origin holdout has enough origins for h = 1..3
    (a single split at two thirds would have left the ridge alone)."""
    rng = np.random.default_rng(4)
    y = 50 + 0.5 * np.arange(30) + rng.normal(0, 2, 30)
    f = PrescalerForecaster()
    f.fit(y, 30.0)
    for h in (1, 2, 3):
        w = f.combination_weights(h)
        assert w is not None and abs(float(w.sum()) - 1.0) < 1e-9 and np.all(w >= 0)
    fc = f.predict(5, (0.1, 0.5, 0.9))
    assert np.all(np.diff(fc.values, axis=0) >= 0)
    # A drifting level: the pool's trend members carry the median upward.
    assert fc.values[1, -1] > float(np.mean(y[-5:]))


def test_tail_factor_moves_the_level_toward_the_target() -> None:
    # The factor scales tail probabilities: missing too often shrinks them
    # (a wider band), covering too often grows them.
    under = tail_factor(0.80, 10_000, 100)  # missed twice as often as allowed
    over = tail_factor(0.99, 10_000, 100)
    assert under < 1.0 < over
    assert tail_factor(0.90, 10_000, 100) == 1.0
    assert under < tail_factor(0.80, 10, 100) < 1.0  # little evidence, small step
    assert tail_factor(0.0, 10**9, 100) == 0.5  # clipped: at most doubles the band's reach
    assert 1.99 < tail_factor(1.0, 10**9, 100) <= 2.0
    assert calibrated(0.9, under) > 0.9 and calibrated(0.1, under) < 0.1
    assert calibrated(0.5, under) == 0.5


def test_calibration_keeps_white_noise_bands_near_their_level() -> None:
    rng = np.random.default_rng(7)
    y = rng.normal(100, 10, 3000)
    # The ridge's calibrated band (a day-long holdout would otherwise give
    # the holdout band: tests/forecasting/prescaler/test_band.py).
    f = PrescalerForecaster(PrescalerConfig(calibrate_rows=200, band_min_errors=0.0))
    f.fit(y[:2000], 60.0)
    # The calibration acts: the ridge's band (calibrated only where no holdout
    # band is kept) moves from its uncalibrated twin's, the median does not.
    raw = PrescalerForecaster(PrescalerConfig(calibrate_rows=0, band_min_errors=0.0))
    raw.fit(y[:2000], 60.0)
    got, plain = f.predict(2, (0.1, 0.5, 0.9)).values, raw.predict(2, (0.1, 0.5, 0.9)).values
    assert np.array_equal(got[1], plain[1])
    assert not np.array_equal(got[[0, 2]], plain[[0, 2]])
    assert 0.8 <= rolling_coverage(f, y, range(2000, 2990, 10)) <= 0.97


def test_members_outside_the_ridge_band_sit_out_a_forecast() -> None:
    """After a level shift the slow smoothers lag; the guard drops them."""
    # A steady series near 100 with its offset (a quarter of the level) and
    # ridge residual quantiles at 0.1 / 0.9 of about -0.02 / +0.02.
    c, q_low, q_high = 25.0, -0.02, 0.02
    guard = PrescalerConfig().guard
    assert guard > 0
    w = np.full(5, 0.2)
    centre = float(np.log(100.0 + c))

    def guarded(weights: np.ndarray, cands: np.ndarray, guard: float = guard) -> np.ndarray:
        return guarded_weights(weights, cands, centre, q_low, q_high, guard=guard, c=c)

    inside = np.array([100.0, 100.5, 99.5, 101.0, 99.0])
    assert np.array_equal(guarded(w, inside), w)
    memo: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    remembered = guarded_weights(w, inside, centre, q_low, q_high, guard=guard, c=c, memo=memo)
    assert np.array_equal(remembered, w) and memo[0][0] is w
    lagging = np.array([100.0, 100.5, 160.0, 101.0, 40.0])
    kept = guarded(w, lagging)
    assert kept[2] == 0.0 and kept[4] == 0.0 and abs(kept.sum() - 1.0) < 1e-12
    only_outliers = np.array([0.0, 0.0, 1.0, 0.0, 0.0])
    assert np.array_equal(guarded(only_outliers, lagging), [1, 0, 0, 0, 0])
    assert np.array_equal(guarded(w, lagging, guard=0.0), w)  # the guard off
    # End to end: 20 steps after a jump to 300 the median has followed it.
    rng = np.random.default_rng(5)
    y = 100 + rng.normal(0, 2, 500)
    f = PrescalerForecaster()
    f.fit(y, 60)
    f.update(np.concatenate([y, np.full(20, 300.0)]))
    assert f.predict(1).median[0] > 250


def test_a_holdout_of_few_independent_errors_weighs_the_smoothers_equally() -> None:
    """40 steps: the 10-step holdout has ~20 origins but only ~2 independent
    errors (neighbours share 9 of 10 future steps), so the four smoothers
    weigh equally there and the ridge (a regression on those few rows) sits
    out; the 1-step holdout (~20 independent errors) is fitted."""
    rng = np.random.default_rng(11)
    y = 50 + np.cumsum(rng.normal(0, 1, 40))
    f = PrescalerForecaster()
    f.fit(y, 30.0)
    w10, w1 = f.combination_weights(10), f.combination_weights(1)
    assert w10 is not None and w10.size == len(CANDIDATES) + 1
    assert w10[0] == 0.0 and np.allclose(w10[1:], 1.0 / len(CANDIDATES))
    assert w1 is not None and w1[0] > 0.0 and not np.allclose(w1[1:], w1[1])
    # The forecast 10 steps ahead is the smoothers' plain mean.
    bank = SmoothingBank(y)
    point = float(f.predict(10, (0.5,)).values[0, -1])
    params = f.smoothing_params(10)
    assert params is not None
    assert point == pytest.approx(float(np.mean(bank.last_values(params, 10))))
    # 16 steps: the 1-step holdout has 6 origins, the 2-step one 4 (under
    # min_holdout); that horizon gets the equal shares too, not horizon 1's
    # fitted weights. (At a count of 5: at the default 8, 6 origins are too
    # few for horizon 1 as well.)
    g = PrescalerForecaster(PrescalerConfig(min_independent_errors=5.0))
    g.fit(y[:16], 30.0)
    g1, g2 = g.combination_weights(1), g.combination_weights(2)
    assert g1 is not None and g1[0] > 0.0
    assert g2 is not None and g2[0] == 0.0 and np.allclose(g2[1:], 1.0 / len(CANDIDATES))
    # The rule goes with min_independent_errors: off, horizon 2 borrows again.
    g_off = PrescalerForecaster(PrescalerConfig(min_independent_errors=0))
    g_off.fit(y[:16], 30.0)
    g_off1 = g_off.combination_weights(1)
    assert g_off1 is not None and np.array_equal(g_off.combination_weights(2), g_off1)
    # With no holdout at all (10 steps) the ridge alone speaks.
    r = PrescalerForecaster()
    r.fit(y[:10], 30.0)
    assert all(r.combination_weights(h) is None for h in range(1, r.config.fit_horizon + 1))
    off = PrescalerForecaster(PrescalerConfig(min_independent_errors=0))
    off.fit(y, 30.0)
    w10_off = off.combination_weights(10)
    assert w10_off is not None and not np.allclose(w10_off, 1.0 / w10_off.size)
    with pytest.raises(ValueError, match="min_independent_errors"):
        PrescalerConfig(min_independent_errors=-1.0)


def test_a_short_history_keeps_the_default_transform() -> None:
    """Under ``min_independent_errors`` holdout rows per eager horizon (about
    288 steps of history) the offset is not chosen: on such a holdout the
    choice swings between near-multiplicative and near-additive with the
    noise's seed, which is what this test shows happens without the rule."""
    t = np.arange(179)
    chosen = set()
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        y = 50 * (1.5 + np.sin(t / 20)) * np.exp(rng.normal(0, 0.3, t.size))
        free = PrescalerForecaster(PrescalerConfig(min_independent_errors=0.0))
        free.fit(y, 60.0)
        chosen.add(free.offset_fraction)
        ruled = PrescalerForecaster()
        ruled.fit(y, 60.0)
        assert ruled.offset_fraction == ruled.config.default_offset_fraction
    assert len(chosen) == 2  # without the rule, two seeds, two transforms


def test_a_long_history_still_chooses_its_transform() -> None:
    rng = np.random.default_rng(0)
    y = 5 + np.arange(400) * 0.5 + rng.normal(0, 2, 400)  # a ramp: near-additive wins
    f = PrescalerForecaster()
    f.fit(y, 60.0)
    assert f.offset_fraction == 16.0


def test_a_single_configured_offset_is_used_without_scoring() -> None:
    rng = np.random.default_rng(1)
    f = PrescalerForecaster(PrescalerConfig(offset_fractions=(4.0,)))
    assert f.offset_fraction is None  # not fitted yet
    f.fit(rng.poisson(30.0, 400).astype(float), 60.0)
    assert f.offset_fraction == 4.0
