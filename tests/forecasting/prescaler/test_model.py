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
from hypothesis import given, settings
from hypothesis import strategies as st

from forecasting.prescaler.features import TrainRows, features, local_scale, origin_ranges
from forecasting.prescaler.model import PrescalerConfig, PrescalerForecaster


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


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(min_value=40, max_value=400),
    seasons=st.sampled_from([(), (16,), (16, 32)]),
    h=st.integers(min_value=1, max_value=12),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_training_rows_are_the_features_of_their_origins(
    n: int, seasons: tuple[int, ...], h: int, seed: int
) -> None:
    """Fit slices one pass over the training origins (``TrainRows``) where
    predict builds rows per origin (``features``, ``local_scale``); both
    must give the same floats, or a fitted coefficient would meet other
    features at predict time than it was fitted on."""
    z = np.log(np.random.default_rng(seed).poisson(20.0, n) + 1.0)
    periods = tuple(p for p in seasons if n >= 2 * p)
    rows = TrainRows.build(z, periods, 4, use_scale=True)
    start, count, _, _ = origin_ranges(n, h, max(periods, default=0), None)
    if count == 0:
        return
    idx = np.arange(start, start + count)
    assert np.array_equal(rows.features(h, 0, count), features(z, idx, h, periods, 4))
    floor = rows.scale_floor
    assert np.array_equal(rows.scale(0, count, floor), local_scale(z, idx, floor))
