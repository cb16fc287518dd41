"""Forecast-accuracy ledger: forecasts made at ``t`` for ``t + h``, settled at ``t + h``.

Pure bookkeeping (no clock, no I/O, no metrics client), so a tracker and the
simulator score forecasts alike; whoever exports accuracy reads its figures
(``mean_ape``, ``coverage``).
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
    """Forecasts made at ``t`` for ``t + h``, settled when ``t + h`` arrives:
    one ledger per ScaledObject, pure bookkeeping (no clock, no I/O)."""

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
        """Record a forecast made at ``made_at_s`` for ``horizon_s`` later."""
        if not (math.isfinite(median) and math.isfinite(upper) and math.isfinite(made_at_s)):
            return
        queue = self._pending.setdefault((signal, float(horizon_s), float(quantile)), deque())
        queue.append(_Pending(made_at_s, made_at_s + horizon_s, median, upper))
        while len(queue) > self.max_pending:
            queue.popleft()

    def settle(self, signal: str, now_s: float, actual: float) -> list[SettledForecast]:
        """Settle every pending forecast of ``signal`` whose target is at or
        before ``now_s`` against ``actual``; one older than ``now_s -
        max_lateness_s`` (a data gap) is dropped unsettled."""
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
        """Mean APE of the last ``window`` settled with a non-zero actual (NaN: none)."""
        values = self._apes.get((signal, float(horizon_s)))
        return sum(values) / len(values) if values else math.nan

    def coverage(self, signal: str, quantile: float) -> float:
        """Share of the last ``window`` settled at or under the upper quantile (NaN: none)."""
        values = self._covered.get((signal, float(quantile)))
        return sum(values) / len(values) if values else math.nan

    def keys(self) -> list[tuple[str, float, float]]:
        """The (signal, horizon_s, quantile) of every forecast kept, to export."""
        return sorted(self._pending)


def _push(store: dict[Any, deque[Any]], key: tuple[Any, ...], value: object, window: int) -> None:
    queue = store.get(key)
    if queue is None:
        queue = store[key] = deque(maxlen=window)
    queue.append(value)
