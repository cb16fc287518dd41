"""Method names -> forecaster factories (the only place that lists them)."""

from __future__ import annotations

from collections.abc import Callable

from forecasting import baselines
from forecasting.anchors import Arima, FftMax, HoltWinters, Kalman, LastValue, SeasonalNaive
from forecasting.baselines import BASELINES, StatsForecastBaseline
from forecasting.forecast import Forecaster
from forecasting.prescaler.model import PrescalerForecaster

_FACTORIES: dict[str, Callable[[], Forecaster]] = {
    "last_value": LastValue,
    "seasonal_naive": SeasonalNaive,
    "holt_winters": HoltWinters,
    "arima": Arima,
    "kalman": Kalman,
    "fft_max": FftMax,
    "prescaler": PrescalerForecaster,
}

METHODS: tuple[str, ...] = tuple(_FACTORIES)
"""Every method, anchors first, ``prescaler`` (the scaler's default) last."""

ANCHORS: tuple[str, ...] = tuple(m for m in METHODS if m != "prescaler")

__all__ = ["ANCHORS", "BASELINES", "METHODS", "backtest_methods", "make_forecaster"]
"""``BASELINES`` (statsforecast's automatic models, :mod:`forecasting.baselines`)
are backtest references, not scaler methods: ``make_forecaster`` builds them,
``METHODS`` (what the scaler may run) leaves them out."""


def backtest_methods() -> tuple[str, ...]:
    """What ``prescaler backtest`` scores by default: the anchors, the
    baselines when statsforecast is installed, and ``prescaler`` last."""
    extra = BASELINES if baselines.available() else ()
    return (*ANCHORS, *extra, "prescaler")


def make_forecaster(name: str) -> Forecaster:
    """A fresh, unfitted forecaster; an unknown name is a ValueError listing all."""
    if name in BASELINES:
        return StatsForecastBaseline(name)
    try:
        factory = _FACTORIES[name]
    except KeyError:
        known = ", ".join((*METHODS, *BASELINES))
        raise ValueError(f"unknown forecast method {name!r}; known: {known}") from None
    return factory()
