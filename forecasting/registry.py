"""Method names -> forecaster factories (the only place that lists them)."""

from __future__ import annotations

from collections.abc import Callable

from forecasting.anchors import Arima, FftMax, HoltWinters, Kalman, LastValue, SeasonalNaive
from forecasting.forecast import Forecaster
from forecasting.prescaler_model import PrescalerForecaster

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


def make_forecaster(name: str) -> Forecaster:
    """A fresh, unfitted forecaster; an unknown name is a ValueError listing all."""
    try:
        factory = _FACTORIES[name]
    except KeyError:
        raise ValueError(f"unknown forecast method {name!r}; known: {', '.join(METHODS)}") from None
    return factory()
