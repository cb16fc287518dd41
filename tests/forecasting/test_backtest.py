"""Rolling-origin backtest: no look-ahead, metrics, origin planning."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from forecasting import DemandSeries, Forecast, point_forecast
from forecasting.backtest import backtest, pinball, plan_origins


class Recorder:
    """A forecaster that records every history it is shown."""

    name = "recorder"

    def __init__(self, log: list[np.ndarray]) -> None:
        self.log = log
        self._last = 0.0

    def fit(self, y: np.ndarray, step_s: float) -> None:
        self.log.append(np.array(y))
        self._last = float(y[-1])

    def update(self, y: np.ndarray) -> None:
        self.log.append(np.array(y))
        self._last = float(y[-1])

    def predict(self, horizon_steps: int, quantiles: Sequence[float] = (0.5, 0.9)) -> Forecast:
        return point_forecast(np.full(horizon_steps, self._last), 60, quantiles)


def test_no_look_ahead() -> None:
    """At each origin the model has seen exactly the steps before it."""
    y = np.arange(100, dtype=float)
    log: list[np.ndarray] = []
    series = DemandSeries(0, 60, y, "requests_per_s", "test")
    res = backtest(series, (1, 5), ["recorder"], factory=lambda _n: Recorder(log), max_refits=3)
    traj = res.trajectories[5]["recorder"]
    for seen, target in zip(log, traj.target_index, strict=True):
        # history is a prefix, and the scored value lies strictly after it
        np.testing.assert_array_equal(seen, y[: seen.size])
        assert target >= seen.size
    # The last-value forecast of a ramp is off by exactly the horizon.
    assert res.scores[5]["recorder"].mae == pytest.approx(5.0)
    assert res.scores[1]["recorder"].mae == pytest.approx(1.0)


def test_metrics_by_hand() -> None:
    actual = np.array([1.0, 2.0, 3.0])
    assert pinball(actual, np.array([2.0, 2.0, 2.0]), 0.9) == pytest.approx((0.1 + 0 + 0.9) / 3)
    s = DemandSeries(0, 60, np.array([0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1.0]), "r", "t")
    res = backtest(s, (1,), ["last_value"], initial=4)
    sc = res.scores[1]["last_value"]
    assert sc.mae == pytest.approx(1.0) and sc.mase == pytest.approx(1.0)
    assert sc.coverage_p90 == pytest.approx(0.5)
    assert sc.pinball_p90 == pytest.approx(0.5)


def test_plan_origins_subsamples_and_rejects_short_series() -> None:
    origins, first, _stride = plan_origins(10_000, 10, max_origins=100)
    assert first == 2500 and origins.size <= 100 and origins[-1] <= 10_000 - 10
    with pytest.raises(ValueError, match="too short"):
        plan_origins(12, 10)


def test_unknown_method_fails_fast() -> None:
    s = DemandSeries(0, 60, np.ones(50), "r", "t")
    with pytest.raises(ValueError, match="unknown forecast method"):
        backtest(s, (1,), ["last_value", "nope"])
