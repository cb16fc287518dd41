"""Invariants for any history: non-negative, ordered quantiles, no look-ahead."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from forecasting import METHODS, DemandSeries, make_forecaster
from forecasting.backtest import backtest

histories = arrays(
    float,
    st.integers(min_value=1, max_value=80),
    elements=st.one_of(st.just(0.0), st.floats(0, 1e4, allow_nan=False)),
)
FAST = [m for m in METHODS if m not in ("arima", "kalman", "holt_winters")]


@settings(max_examples=40, deadline=None)
@given(y=histories, method=st.sampled_from(FAST), horizon=st.integers(1, 12))
def test_forecasts_non_negative_and_quantiles_ordered(
    y: np.ndarray, method: str, horizon: int
) -> None:
    f = make_forecaster(method)
    f.fit(y, 60)
    fc = f.predict(horizon, (0.1, 0.5, 0.9, 0.99))
    assert fc.values.shape == (4, horizon)
    assert np.all(np.isfinite(fc.values)) and np.all(fc.values >= 0)
    assert np.all(np.diff(fc.values, axis=0) >= 0)


@settings(max_examples=10, deadline=None)
@given(y=histories, method=st.sampled_from(["holt_winters", "arima", "kalman"]))
def test_statsmodels_anchors_non_negative(y: np.ndarray, method: str) -> None:
    f = make_forecaster(method)
    f.fit(y, 60)
    fc = f.predict(3)
    assert np.all(np.isfinite(fc.values)) and np.all(fc.values >= 0)


@settings(max_examples=15, deadline=None)
@given(
    y=arrays(float, st.integers(30, 120), elements=st.floats(0, 100, allow_nan=False)),
    cut=st.integers(0, 1000),
)
def test_backtest_scores_ignore_the_future(y: np.ndarray, cut: int) -> None:
    """Changing values after the last scored target never changes any score."""
    series = DemandSeries(0, 60, y, "r", "t")
    base = backtest(series, (1,), ["prescaler", "last_value"], initial=10, max_origins=15)
    last_target = int(base.trajectories[1]["prescaler"].target_index[-1])
    y2 = y.copy()
    y2[last_target + 1 :] = cut
    again = backtest(
        DemandSeries(0, 60, y2, "r", "t"),
        (1,),
        ["prescaler", "last_value"],
        initial=10,
        max_origins=15,
    )
    for m in ("prescaler", "last_value"):
        assert again.scores[1][m].mae == base.scores[1][m].mae
        assert again.scores[1][m].pinball_p90 == base.scores[1][m].pinball_p90
