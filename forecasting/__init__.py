"""Demand series, forecasters with calibrated quantiles, rolling backtests.

Pure: imports nothing from the project but ``prescaler_native.loader``
(which picks compiled copies of hot modules). Public API used by the scaler and the
simulator::

    from forecasting import Forecast, Forecaster, make_forecaster, METHODS
"""

from prescaler_native.loader import compiled_first

# the compiled smoother loops (``make native``) come first while they match these
# sources exactly (prescaler_native/loader.py); before any module of the package loads
__path__ = compiled_first(__path__, __file__)

from forecasting.forecast import DEFAULT_QUANTILES, Forecast, Forecaster, point_forecast
from forecasting.registry import ANCHORS, METHODS, make_forecaster
from forecasting.series import SIGNALS, DemandSeries, bin_events, regularize

__all__ = [
    "ANCHORS",
    "DEFAULT_QUANTILES",
    "METHODS",
    "SIGNALS",
    "DemandSeries",
    "Forecast",
    "Forecaster",
    "bin_events",
    "make_forecaster",
    "point_forecast",
    "regularize",
]
