"""Forecast-accuracy ledger: forecasts made at ``t`` for ``t + h``, settled at ``t + h``.

Split from ``scaler.telemetry`` because it is pure bookkeeping (no clock, no
I/O, no Prometheus client): the tracker and the simulator can score forecasts
with it, and it is tested without a metrics registry. ``scaler.telemetry``
re-exports :class:`ForecastLedger` and :class:`SettledForecast` and exports the
ledger's figures as ``prescaler_forecast_abs_percentage_error`` and
``prescaler_forecast_coverage``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

__all__ = ["ForecastLedger", "SettledForecast"]


@dataclass(frozen=True)
class SettledForecast:
    """One forecast matched with what really came."""

    signal: str
    horizon_s: float
    quantile: float
    made_at_s: float
    target_s: float
    median: float
    upper: float
    actual: float
    abs_pct_error: float  # NaN when actual == 0 (APE undefined)
    covered: bool  # actual <= upper


@dataclass(frozen=True)
class _Pending:
    made_at_s: float
    target_s: float
    median: float
    upper: float


class ForecastLedger:
    """Forecasts made at ``t`` for ``t + h``, settled when ``t + h`` arrives.

    Pure bookkeeping (no clock, no I/O): one ledger per ScaledObject.

    * ``add(signal, horizon_s, quantile, made_at_s, median, upper)`` -- record
      a forecast (call each time a forecast is made, e.g. every refresh).
    * ``settle(signal, now_s, actual)`` -- with the actual value of
      ``signal`` observed at ``now_s``, settle every pending forecast whose
      target time is <= ``now_s``; those whose target is older than
      ``now_s - max_lateness_s`` (a data gap) are dropped unsettled. Returns
      the settled records.
    * ``mean_ape(signal, horizon_s)`` -- mean APE over the last ``window``
      settled forecasts with a non-zero actual (NaN if none);
      ``coverage(signal, quantile)`` -- fraction of the last ``window`` whose
      actual was <= the upper quantile (NaN if none).
    * ``keys()`` -- the (signal, horizon_s, quantile) tuples with results,
      to export each through ScalerTelemetry.record_forecast_error /
      record_coverage.
    """

    def __init__(
        self, window: int = 120, max_pending: int = 2048, max_lateness_s: float = 120.0
    ) -> None:
        if window < 1 or max_pending < 1 or max_lateness_s < 0:
            raise ValueError("window and max_pending must be >= 1, max_lateness_s >= 0")
        self.window = window
        self.max_pending = max_pending
        self.max_lateness_s = max_lateness_s
        self._pending: dict[tuple[str, float, float], deque[_Pending]] = {}
        self._apes: dict[tuple[str, float], deque[float]] = {}
        self._covered: dict[tuple[str, float], deque[bool]] = {}

    def add(
        self,
        signal: str,
        horizon_s: float,
        quantile: float,
        made_at_s: float,
        median: float,
        upper: float,
    ) -> None:
        if not (math.isfinite(median) and math.isfinite(upper) and math.isfinite(made_at_s)):
            return
        queue = self._pending.setdefault((signal, float(horizon_s), float(quantile)), deque())
        queue.append(_Pending(made_at_s, made_at_s + horizon_s, median, upper))
        while len(queue) > self.max_pending:
            queue.popleft()

    def settle(self, signal: str, now_s: float, actual: float) -> list[SettledForecast]:
        if not math.isfinite(actual):
            return []
        settled: list[SettledForecast] = []
        for (sig, horizon, quantile), queue in self._pending.items():
            if sig != signal:
                continue
            # Forecasts are added in time order, so matured ones are at the front.
            while queue and queue[0].target_s <= now_s:
                p = queue.popleft()
                if now_s - p.target_s > self.max_lateness_s:
                    continue
                ape = abs(actual - p.median) / abs(actual) if actual != 0 else math.nan
                record = SettledForecast(
                    sig,
                    horizon,
                    quantile,
                    p.made_at_s,
                    p.target_s,
                    p.median,
                    p.upper,
                    actual,
                    ape,
                    actual <= p.upper,
                )
                settled.append(record)
                if not math.isnan(ape):
                    _push(self._apes, (sig, horizon), ape, self.window)
                _push(self._covered, (sig, quantile), record.covered, self.window)
        return settled

    def mean_ape(self, signal: str, horizon_s: float) -> float:
        values = self._apes.get((signal, float(horizon_s)))
        return sum(values) / len(values) if values else math.nan

    def coverage(self, signal: str, quantile: float) -> float:
        values = self._covered.get((signal, float(quantile)))
        return sum(values) / len(values) if values else math.nan

    def keys(self) -> list[tuple[str, float, float]]:
        return sorted(self._pending)


def _push(store: dict[Any, deque[Any]], key: tuple[Any, ...], value: object, window: int) -> None:
    queue = store.get(key)
    if queue is None:
        queue = store[key] = deque(maxlen=window)
    queue.append(value)
