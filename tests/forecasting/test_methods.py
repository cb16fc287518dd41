"""Each method on synthetic series with known structure."""

from __future__ import annotations

import numpy as np
import pytest

from forecasting import METHODS, make_forecaster
from forecasting.prescaler.model import PrescalerForecaster

STEP = 600.0  # 10-minute steps: 144 per day keeps seasonal fits fast
DAY = 144


def daily_sine(days: float) -> np.ndarray:
    t = np.arange(int(days * DAY))
    return 100 + 50 * np.sin(2 * np.pi * t / DAY)


@pytest.mark.parametrize("name", ["seasonal_naive", "holt_winters", "prescaler"])
def test_pure_daily_sine_is_forecast_almost_exactly(name: str) -> None:
    """Seasonal methods and prescaler learn a clean daily cycle."""
    y = daily_sine(4.3)
    f = make_forecaster(name)
    f.fit(y, STEP)
    fc = f.predict(12)
    t = np.arange(y.size, y.size + 12)
    truth = 100 + 50 * np.sin(2 * np.pi * t / DAY)
    assert np.max(np.abs(fc.median - truth)) < 2.0  # 2 % of the level


def test_step_change_is_followed_within_a_few_steps() -> None:
    """A level shift (burst onset) is tracked after a few steps, not days."""
    rng = np.random.default_rng(1)
    y = np.concatenate([50 + rng.normal(0, 1, 300), 150 + rng.normal(0, 1, 300)])
    f = make_forecaster("prescaler")
    f.fit(y[:304], 60)
    assert 110 < f.predict(3).median[0] < 200  # most of the way after 4 steps
    f.fit(y[:312], 60)
    assert abs(f.predict(3).median[0] - 150) < 0.1 * 150
    f.fit(y, 60)
    assert abs(f.predict(3).median[2] - 150) < 5


def test_white_noise_gets_calibrated_quantiles() -> None:
    """Coverage of the 0.9 quantile on fresh white noise is close to 0.9."""
    rng = np.random.default_rng(7)
    y = 100 + rng.normal(0, 10, 4000)
    f = make_forecaster("prescaler")
    f.fit(y[:2000], 60)
    hits = []
    for t in range(2000, 3990, 5):
        f.update(y[:t])
        hits.append(y[t] <= f.predict(1).quantile(0.9)[0])
    assert 0.85 <= np.mean(hits) <= 0.95


def test_no_invented_season_with_less_than_two_days() -> None:
    """Below two cycles the daily term is absent: a sine fragment is not a season."""
    y = daily_sine(1.5)
    f = make_forecaster("prescaler")
    assert isinstance(f, PrescalerForecaster)
    f.fit(y, STEP)
    assert f.periods == ()
    f.fit(daily_sine(2.2), STEP)
    assert f.periods == (DAY,)


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("n", [1, 2, 5, 30])
def test_minutes_of_history_give_a_sane_forecast(name: str, n: int) -> None:
    """With a handful of points every method returns finite, plausible values."""
    y = 10 + np.arange(n) % 3
    f = make_forecaster(name)
    f.fit(y.astype(float), 60)
    fc = f.predict(5, (0.1, 0.5, 0.9))
    assert np.all(np.isfinite(fc.values)) and np.all(fc.values >= 0)
    assert 5 <= fc.median[0] <= 20
    assert fc.quantile(0.9)[-1] < 100


@pytest.mark.parametrize("name", METHODS)
def test_all_zero_history(name: str) -> None:
    f = make_forecaster(name)
    f.fit(np.zeros(50), 30)
    fc = f.predict(4)
    np.testing.assert_allclose(fc.median, 0, atol=1e-6)


def test_on_off_traffic_never_negative() -> None:
    rng = np.random.default_rng(3)
    y = np.where(rng.random(400) < 0.3, 0.0, rng.exponential(5, 400))
    for name in METHODS:
        f = make_forecaster(name)
        f.fit(y, 30)
        assert np.all(f.predict(10).values >= 0)


def test_anchor_quantiles_are_their_point() -> None:
    f = make_forecaster("last_value")
    f.fit(np.array([1.0, 2.0, 3.0]), 60)
    fc = f.predict(2, (0.5, 0.9))
    np.testing.assert_allclose(fc.values, 3.0)


def test_fft_max_takes_window_max_plus_margin() -> None:
    y = daily_sine(3)
    f = make_forecaster("fft_max")
    f.fit(y, STEP)
    fc = f.predict(DAY)
    assert np.allclose(fc.median, fc.median[0])  # constant over the window
    assert fc.median[0] == pytest.approx(150 * 1.15, rel=0.01)


def test_seasonal_naive_prefers_week_when_available() -> None:
    y = np.arange(8 * DAY, dtype=float)
    f = make_forecaster("seasonal_naive")
    f.fit(y, STEP)
    assert f.predict(1).median[0] == y.size - 7 * DAY


def test_update_keeps_parameters_but_uses_new_data() -> None:
    """update() conditions on the longer history without refitting."""
    rng = np.random.default_rng(5)
    y = 100 + rng.normal(0, 2, 600)
    f = make_forecaster("prescaler")
    f.fit(y[:500], 60)
    before = f.predict(24, (0.1, 0.5, 0.9)).values
    y2 = np.concatenate([y[:500], np.full(20, 300.0)])
    f.update(y2)
    assert f.predict(1).median[0] > 250  # the new data is used ...
    refit = make_forecaster("prescaler")
    refit.fit(y2, 60)
    # ... by the old fit: not what a fit on the longer history forecasts, and
    # back on the first history, exactly the first forecasts.
    assert not np.array_equal(
        f.predict(24, (0.1, 0.5, 0.9)).values, refit.predict(24, (0.1, 0.5, 0.9)).values
    )
    f.update(y[:500])
    assert np.array_equal(f.predict(24, (0.1, 0.5, 0.9)).values, before)


def test_long_horizon_beyond_eager_fit() -> None:
    """Horizons past the eagerly fitted ones are fitted on first use."""
    y = daily_sine(3)
    f = make_forecaster("prescaler")
    f.fit(y, STEP)
    fc = f.predict(60, (0.1, 0.5, 0.9))
    t = np.arange(y.size, y.size + 60)
    truth = 100 + 50 * np.sin(2 * np.pi * t / DAY)
    assert np.max(np.abs(fc.median - truth)) < 5.0
