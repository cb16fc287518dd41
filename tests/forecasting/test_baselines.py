"""statsforecast baselines behind the Forecaster protocol (backtest references)."""

from __future__ import annotations

import numpy as np
import pytest

from forecasting import METHODS, make_forecaster
from forecasting import baselines as bl
from forecasting.backtest import backtest
from forecasting.registry import BASELINES, backtest_methods
from forecasting.series import DemandSeries
from tests.forecasting.bench_scoring import best_anchor, best_baseline

pytest.importorskip("statsforecast")

HOUR = 3600.0  # a day is 24 steps: seasonal models stay cheap


def _daily(days: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(days * 24))
    return 100 + 40 * np.sin(2 * np.pi * t / 24) + rng.normal(0, 3, t.size)


@pytest.mark.parametrize("name", BASELINES)
def test_each_baseline_forecasts_ordered_sane_quantiles(name: str) -> None:
    y = _daily(4)
    f = make_forecaster(name)
    f.fit(y[:-10], HOUR)
    fc = f.predict(6, (0.1, 0.5, 0.9))
    assert fc.values.shape == (3, 6)
    assert np.all(np.diff(fc.values, axis=0) >= 0)
    assert np.all((fc.values > 20) & (fc.values < 200))
    # update conditions on the new steps without refitting: the forecast moves.
    f.update(y)
    moved = f.predict(6, (0.1, 0.5, 0.9))
    assert not np.array_equal(moved.values, fc.values)
    assert fc.quantile(0.9)[0] > fc.median[0]  # its own interval, not a point


def test_seasonal_models_follow_the_daily_cycle() -> None:
    """With two days or more, MSTL decomposes the daily season."""
    y = _daily(4)
    f = make_forecaster("sf_mstl")
    f.fit(y, HOUR)
    t = np.arange(y.size, y.size + 24)
    truth = 100 + 40 * np.sin(2 * np.pi * t / 24)
    assert np.mean(np.abs(f.predict(24).median - truth)) < 10


def test_mstl_without_two_seasons_is_autoets() -> None:
    y = _daily(1.5)
    a, b = make_forecaster("sf_mstl"), make_forecaster("sf_autoets")
    a.fit(y, HOUR)
    b.fit(y, HOUR)
    assert np.array_equal(a.predict(5).values, b.predict(5).values)


@pytest.mark.parametrize("name", BASELINES)
def test_a_tiny_history_still_forecasts(name: str) -> None:
    """One or two points: the model's own fit, or the random-walk fallback."""
    for y in (np.array([5.0]), np.array([5.0, 6.0])):
        f = make_forecaster(name)
        f.fit(y, 60.0)
        fc = f.predict(3, (0.1, 0.5, 0.9))
        assert np.all(np.isfinite(fc.values)) and 4.0 <= fc.median[0] <= 7.0


def test_baselines_are_backtest_references_not_scaler_methods() -> None:
    assert not set(BASELINES) & set(METHODS)
    assert backtest_methods()[-1] == "prescaler" and set(BASELINES) <= set(backtest_methods())
    series = DemandSeries(0.0, HOUR, _daily(3), "requests_per_s", "synthetic")
    res = backtest(series, (1, 3), ("last_value", "sf_autoets"), max_origins=20, max_refits=2)
    assert best_baseline(res, 3) == "sf_autoets" and best_anchor(res, 3) == "last_value"
    assert 0.5 < res.scores[1]["sf_autoets"].coverage_p90 <= 1.0


def test_without_statsforecast_asking_for_a_baseline_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bl, "available", lambda: False)
    with pytest.raises(ValueError, match=r"prescaler\[baselines\]"):
        make_forecaster("sf_autoets")
    assert not set(BASELINES) & set(backtest_methods())
