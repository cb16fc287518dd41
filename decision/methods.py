"""The forecast methods a ScaledObject may name (its ``forecast`` key).

A leaf of plain names, so trigger metadata is validated without importing
``forecasting`` (pandas, statsmodels); a test holds it equal to
``forecasting.METHODS``.
"""

from __future__ import annotations

__all__ = ["FORECAST_METHODS"]

FORECAST_METHODS: tuple[str, ...] = (
    "last_value",
    "seasonal_naive",
    "holt_winters",
    "arima",
    "kalman",
    "fft_max",
    "prescaler",
)
"""Every method, anchors first, ``prescaler`` (the scaler's default) last."""
