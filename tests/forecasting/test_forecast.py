"""The Forecast value type and the method registry."""

from __future__ import annotations

import numpy as np
import pytest

from forecasting import METHODS, Forecast, Forecaster, make_forecaster
from forecasting.forecast import MAX_DEMAND


def test_forecast_clamps_negatives_and_uncrosses_quantiles() -> None:
    """Demand is never negative and quantiles never cross, whatever a model says."""
    fc = Forecast(60, 2, (0.5, 0.9), np.array([[-1.0, 3.0], [2.0, 1.0]]))
    np.testing.assert_allclose(fc.median, [0, 3])
    np.testing.assert_allclose(fc.quantile(0.9), [2, 3])
    assert not fc.values.flags.writeable


def test_quantile_interpolates_inside_and_refuses_outside() -> None:
    fc = Forecast(60, 1, (0.1, 0.5, 0.9), np.array([[1.0], [2.0], [4.0]]))
    np.testing.assert_allclose(fc.quantile(0.7), [3.0])
    with pytest.raises(ValueError, match="not forecast"):
        fc.quantile(0.95)


def test_forecast_validation() -> None:
    with pytest.raises(ValueError, match="shape"):
        Forecast(60, 2, (0.5,), np.zeros((1, 3)))
    with pytest.raises(ValueError, match="increasing"):
        Forecast(60, 1, (0.9, 0.5), np.zeros((2, 1)))
    with pytest.raises(ValueError, match="step_s"):
        Forecast(0, 1, (0.5,), np.zeros((1, 1)))


def test_registry_names_and_unknown_method() -> None:
    assert set(METHODS) == {
        "last_value",
        "seasonal_naive",
        "holt_winters",
        "arima",
        "kalman",
        "fft_max",
        "prescaler",
    }
    for name in METHODS:
        f = make_forecaster(name)
        assert isinstance(f, Forecaster) and f.name == name
    with pytest.raises(ValueError, match=r"unknown forecast method 'prophet'.*prescaler"):
        make_forecaster("prophet")


@pytest.mark.parametrize("name", METHODS)
def test_predict_before_fit_and_bad_history(name: str) -> None:
    f = make_forecaster(name)
    with pytest.raises(RuntimeError, match="before fit"):
        f.predict(3)
    with pytest.raises(ValueError, match="NaN"):
        f.fit(np.array([1.0, np.nan]), 60)
    with pytest.raises(ValueError, match="empty"):
        f.fit(np.array([]), 60)
    # Past ~1e154 the combination's squared errors overflowed and prescaler's
    # forecast turned NaN; an absurd value is refused at the boundary instead.
    with pytest.raises(ValueError, match="largest plausible demand"):
        f.fit(np.full(50, 1e200), 60)


@pytest.mark.parametrize("name", METHODS)
def test_the_largest_plausible_demand_is_forecast(name: str) -> None:
    """The bound itself is data: every method gives a finite, ordered forecast."""
    f = make_forecaster(name)
    f.fit(np.full(200, MAX_DEMAND), 60)
    values = f.predict(3, (0.1, 0.5, 0.9)).values
    assert np.all(np.isfinite(values)) and np.all(np.diff(values, axis=0) >= 0)
