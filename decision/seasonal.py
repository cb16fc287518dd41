"""The recent days' peak at the coming hours: the seasonal term the forecast
also sizes for (pure: no I/O, no clock).

A forecaster's median blurs an event that comes at a slightly different
minute each day into a low bump; the past days' own peaks over the same
hours size the event's whole fleet a lead time ahead. Two windows on each
past day answer two questions:

- *when*: the lead-time window widened by ``wander_s`` on each side (how
  far the event moves from day to day). Its peaks, at ``quantile`` across
  the days, are the term.
- *how big*: with ``size_wander_s`` above ``wander_s``, and when the
  *when* window says an event is due (at least one request there, the
  policy's wake bar, at the same quantile), the term is at least the ``quantile``
  across the days of each day's peak over the window widened by
  ``size_wander_s`` instead. Working sessions whose size is drawn afresh
  each day are as likely to be big at 14:00 as at 11:00: three days of one
  hour's sessions are three samples, the whole day's are a dozen, and a
  session twice any seen at that hour is ordinary among them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from decision.history import BinnedSeries

DAY_S = 86_400.0
DUE_REQUESTS = 1.0
"""Requests the *when* window must hold for an event to be due: one stray
request on a past day does not make an hour a session's."""


@dataclass(frozen=True)
class SeasonalWindows:
    """Where and how the past days are read (validated by the caller)."""

    days: int
    """Past days read, at least two (one day is an anecdote, not a pattern)."""
    wander_s: float
    size_wander_s: float
    """0, or at most ``wander_s``: the *when* window also sizes."""
    smooth_bins: int
    """Bins each peak is a mean over (one bin's noise is not a level)."""


def _quantile_held(values: np.ndarray, quantile: float) -> float | None:
    held = values[np.isfinite(values)]
    if held.size < 2:
        return None
    return float(np.quantile(held, quantile))


def seasonal_peak(
    series: BinnedSeries, t: float, horizon_s: float, quantile: float, windows: SeasonalWindows
) -> tuple[float | None, float | None]:
    """(peak request rate, request count) the past days show over
    ``(t, t + horizon_s]`` at the same time of day, each the ``quantile``
    across the days; (None, None) when fewer than two days hold any of it."""
    offsets = [d * DAY_S for d in range(1, windows.days + 1)]
    when: Sequence[float] = [t - o - windows.wander_s for o in offsets]
    peaks, counts = series.window_stats(when, horizon_s + 2 * windows.wander_s, windows.smooth_bins)
    peak = _quantile_held(peaks, quantile)
    count = _quantile_held(counts, quantile)
    if peak is None or count is None:
        return None, None
    if windows.size_wander_s > windows.wander_s and count >= DUE_REQUESTS:
        wide = [t - o - windows.size_wander_s for o in offsets]
        sizes, _ = series.window_stats(
            wide, horizon_s + 2 * windows.size_wander_s, windows.smooth_bins
        )
        size = _quantile_held(sizes, quantile)
        if size is not None:
            peak = max(peak, size)
    return peak, count
