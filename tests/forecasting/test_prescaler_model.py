"""What prescaler's forecaster remembers between calls never changes a forecast.

The forecaster keeps, for speed, the training rows during a fit, the
quantiles of its residual laws, its renormalised member weights and the
smoothers' end states. A forecast must be the same to the last bit whether
or not the instance has fitted or predicted before: the backtest refits one
instance many times, and the scaler predicts from one fit for minutes.
"""

from __future__ import annotations

import numpy as np
import pytest

from forecasting.prescaler_model import PrescalerConfig, PrescalerForecaster


def _series(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return rng.poisson(30 * (1 + 0.4 * np.sin(2 * np.pi * t / 96))).astype(float)


@pytest.mark.parametrize(
    ("n", "step_s"),
    [(60, 15.0), (400, 15.0), (3 * 96, 900.0)],  # short, offset chosen, a daily season
)
def test_a_refitted_instance_forecasts_as_a_fresh_one(n: int, step_s: float) -> None:
    """Refit on other data, an instance that has predicted (its remembered
    quantiles, weights and rows) forecasts exactly as a new one."""
    first, second = _series(1, n), _series(2, n)
    used = PrescalerForecaster()
    used.fit(first, step_s)
    used.predict(20, (0.1, 0.5, 0.9))
    used.fit(second, step_s)
    fresh = PrescalerForecaster()
    fresh.fit(second, step_s)
    for quantiles in ((0.1, 0.5, 0.9), (0.05, 0.5, 0.97)):
        assert np.array_equal(
            used.predict(20, quantiles).values, fresh.predict(20, quantiles).values
        )


def test_repeated_and_updated_predictions_are_those_of_a_first_call() -> None:
    """Predicting twice, or after ``update``, gives what the first prediction
    from that history gives (horizons past ``fit_horizon`` are fitted lazily
    on the first call)."""
    y = _series(3, 300)
    config = PrescalerConfig(fit_horizon=6)
    f = PrescalerForecaster(config)
    f.fit(y[:280], 15.0)
    first = f.predict(14, (0.1, 0.5, 0.9)).values
    assert np.array_equal(f.predict(14, (0.1, 0.5, 0.9)).values, first)
    f.update(y)
    other = PrescalerForecaster(config)
    other.fit(y[:280], 15.0)
    other.update(y)
    assert np.array_equal(
        f.predict(14, (0.1, 0.5, 0.9)).values, other.predict(14, (0.1, 0.5, 0.9)).values
    )
