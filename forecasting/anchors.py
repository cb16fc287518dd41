"""The anchors' forecasting methods, as the field ships them (point forecasts).

Baselines reproduced faithfully rather than improved: ``last_value``
(Dynamo planner's ``constant``), ``seasonal_naive`` (a week ago, else a day
ago, else the last value), ``holt_winters`` (the Predictive HPA's additive
ExponentialSmoothing on its four stored seasons), ``arima`` (Dynamo's fixed
(1,1,1) on a recent window), ``kalman`` (a local-linear-trend state-space
model) and ``fft_max`` (Crane's EffectiveHPA: the dominant FFT periods
extended, then the window's maximum plus a margin). Each returns a
:func:`point_forecast` (all quantiles equal); statsmodels warnings are
silenced because the anchors are scored as they ship.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np

from forecasting.forecast import (
    DEFAULT_QUANTILES,
    Forecast,
    check_history,
    daily_period,
    point_forecast,
)


class _Base:
    name = "base"

    def __init__(self) -> None:
        self._y: np.ndarray | None = None
        self._step_s = 0.0

    def _require(self) -> np.ndarray:
        if self._y is None:
            raise RuntimeError(f"{self.name}: predict() called before fit()")
        return self._y

    def fit(self, y: np.ndarray, step_s: float) -> None:
        self._y = check_history(y, step_s)
        self._step_s = float(step_s)

    def update(self, y: np.ndarray) -> None:
        """Default: these models have nothing to re-estimate, so refit."""
        self.fit(y, self._step_s)

    def _point(self, horizon_steps: int) -> np.ndarray:
        raise NotImplementedError

    def predict(
        self, horizon_steps: int, quantiles: Sequence[float] = DEFAULT_QUANTILES
    ) -> Forecast:
        self._require()
        return point_forecast(self._point(int(horizon_steps)), self._step_s, quantiles)


class LastValue(_Base):
    """Tomorrow looks like now: the reactive scalers' implicit forecast."""

    name = "last_value"

    def _point(self, horizon_steps: int) -> np.ndarray:
        return np.full(horizon_steps, self._require()[-1])


class SeasonalNaive(_Base):
    """The value one season ago (weekly where history allows, else daily)."""

    name = "seasonal_naive"

    def _period(self) -> int:
        y = self._require()
        day = daily_period(self._step_s)
        if day and y.size >= 7 * day:
            return 7 * day
        if day and y.size >= day:
            return day
        return 0

    def _point(self, horizon_steps: int) -> np.ndarray:
        y = self._require()
        period = self._period()
        if period == 0:
            return np.full(horizon_steps, y[-1])
        idx = y.size + np.arange(horizon_steps) - period
        # Horizons longer than a season reuse the last season again.
        idx = np.where(idx >= y.size, idx - period * ((idx - y.size) // period + 1), idx)
        return y[idx]


T = TypeVar("T")


def _quietly(fit: Callable[[], T]) -> T | None:
    """``fit()`` with statsmodels' warnings silenced; None when it cannot fit.

    Convergence and frequency warnings are expected on short or flat
    windows; a model that fails outright leaves the anchor on its
    last-value fallback instead of raising mid-backtest.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return fit()
        except (ValueError, np.linalg.LinAlgError):
            return None


def _quiet_forecast(res: Any, horizon_steps: int) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(res.forecast(horizon_steps), dtype=float)


def _forecast_or_last(fitted: Any, history: np.ndarray, horizon_steps: int) -> np.ndarray:
    """The fitted model's forecast, or the last value where there is no usable fit.

    A statsmodels fit that failed or diverged must not leave the anchor
    without an answer: the field's planners fall back to "same as now".
    """
    if fitted is None:
        return np.full(horizon_steps, history[-1])
    out = _quiet_forecast(fitted, horizon_steps)
    if not np.all(np.isfinite(out)):
        return np.full(horizon_steps, history[-1])
    return out


class HoltWinters(_Base):
    """statsmodels ExponentialSmoothing as the Predictive HPA runs it."""

    name = "holt_winters"
    stored_seasons = 4

    def __init__(self) -> None:
        super().__init__()
        self._params: dict[str, float] | None = None
        self._seasonal = 0
        self._fitted: Any = None

    def _model(self, y: np.ndarray) -> Any:
        from statsmodels.tsa.holtwinters import ExponentialSmoothing

        if self._seasonal:
            window = y[-self.stored_seasons * self._seasonal :]
            return ExponentialSmoothing(
                window,
                trend="add",
                seasonal="add",
                seasonal_periods=self._seasonal,
                initialization_method="heuristic",
            )
        window = y[-512:]
        return ExponentialSmoothing(window, trend="add", initialization_method="estimated")

    def fit(self, y: np.ndarray, step_s: float) -> None:
        super().fit(y, step_s)
        arr = self._require()
        day = daily_period(step_s)
        self._seasonal = day if day and arr.size >= 2 * day + 10 else 0
        self._fitted = None
        self._params = None
        if arr.size < 4:
            return
        res = _quietly(self._model(arr).fit)
        self._fitted = res
        if res is not None:
            self._params = {
                k: float(res.params[k])
                for k in ("smoothing_level", "smoothing_trend", "smoothing_seasonal")
                if res.params.get(k) is not None and np.isfinite(res.params[k])
            }

    def update(self, y: np.ndarray) -> None:
        arr = check_history(y, self._step_s)
        day = daily_period(self._step_s)
        seasonal = day if day and arr.size >= 2 * day + 10 else 0
        if self._params is None or seasonal != self._seasonal:
            self.fit(arr, self._step_s)
            return
        self._y = arr
        params = self._params
        self._fitted = _quietly(lambda: self._model(arr).fit(optimized=False, **params))

    def _point(self, horizon_steps: int) -> np.ndarray:
        return _forecast_or_last(self._fitted, self._require(), horizon_steps)


class _StateSpace(_Base):
    """Shared fit-on-a-window / re-filter-on-update logic for statsmodels SSMs."""

    window = 512
    min_points = 8

    def __init__(self) -> None:
        super().__init__()
        self._res: Any = None

    def _build(self, y: np.ndarray) -> Any:
        raise NotImplementedError

    def _fit_model(self, model: Any) -> Any:
        return model.fit(disp=False)

    def fit(self, y: np.ndarray, step_s: float) -> None:
        super().fit(y, step_s)
        arr = self._require()
        self._res = None
        if arr.size < self.min_points or np.ptp(arr[-self.window :]) == 0:
            return
        window = arr[-self.window :]
        self._res = _quietly(lambda: self._fit_model(self._build(window)))

    def update(self, y: np.ndarray) -> None:
        arr = check_history(y, self._step_s)
        if self._res is None:
            self.fit(arr, self._step_s)
            return
        self._y = arr
        res, window = self._res, arr[-self.window :]
        self._res = _quietly(lambda: res.apply(window))

    def _point(self, horizon_steps: int) -> np.ndarray:
        return _forecast_or_last(self._res, self._require(), horizon_steps)


class Arima(_StateSpace):
    """ARIMA(1,1,1) on the last 512 points (Dynamo planner style)."""

    name = "arima"
    order = (1, 1, 1)

    def _build(self, y: np.ndarray) -> Any:
        from statsmodels.tsa.arima.model import ARIMA

        return ARIMA(y, order=self.order)

    def _fit_model(self, model: Any) -> Any:
        return model.fit()  # ARIMA's fit() takes no ``disp``


class Kalman(_StateSpace):
    """Local linear trend (level + slope random walks), MLE noise variances."""

    name = "kalman"

    def _build(self, y: np.ndarray) -> Any:
        from statsmodels.tsa.statespace.structural import UnobservedComponents

        return UnobservedComponents(y, level="local linear trend")


class FftMax(_Base):
    """Crane-style: dominant periods by FFT, reconstruct, max over window + margin."""

    name = "fft_max"
    top_k = 5
    margin = 0.15
    max_history_days = 7.0

    def _point(self, horizon_steps: int) -> np.ndarray:
        y = self._require()
        day = daily_period(self._step_s)
        cap = int(self.max_history_days * day) if day else 4096
        x = y[-cap:]
        n = x.size
        if n < 4:
            return np.full(horizon_steps, x[-1] * (1 + self.margin))
        mean = float(x.mean())
        spec = np.fft.rfft(x - mean)
        # Only periods seen at least twice in the history (k >= 2).
        ks = np.arange(2, spec.size)
        if ks.size == 0:
            return np.full(horizon_steps, x[-1] * (1 + self.margin))
        amp = np.abs(spec[ks])
        top = ks[np.argsort(amp)[::-1][: self.top_k]]
        t = n + np.arange(horizon_steps)
        recon = np.full(horizon_steps, mean)
        for k in top:
            a = spec[k]
            scale = 1.0 if (n % 2 == 0 and k == n // 2) else 2.0
            recon += scale / n * np.abs(a) * np.cos(2 * np.pi * k * t / n + np.angle(a))
        peak = max(float(recon.max()), 0.0)
        return np.full(horizon_steps, peak * (1 + self.margin))
