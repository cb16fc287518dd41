"""The recent days' peak at the coming hours: the seasonal term the forecast
also sizes for (pure: no I/O, no clock).

A forecaster's median blurs an event that comes at a slightly different
minute each day into a low bump; the past days' own peaks over the same
hours size the event's whole fleet a lead time ahead. *When*: the lead-time
window widened by ``wander_s`` on each side, its peaks at ``quantile``
across the days. *How big* (``size_wander_s`` above ``wander_s``, once the
*when* window expects a request): at least the ``quantile`` across the days
of each day's peak over the window widened by ``size_wander_s``, since a
session's size drawn afresh each day is as likely big at 14:00 as at 11:00.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from decision.history import BinnedSeries
from decision.policy import WAKE_REQUESTS
from decision.settings import ScalerSettings

log = logging.getLogger(__name__)

DAY_S = 86_400.0


@dataclass(frozen=True)
class SeasonalWindows:
    """Where and how the past days are read (validated by the caller)."""

    days: int
    """Past days read, at least two (one day is an anecdote, not a pattern)."""
    wander_s: float
    """Half the widening of the *when* window."""
    size_wander_s: float
    """Half the widening of the *how big* window; at most ``wander_s``
    (0 included) turns it off."""
    smooth_bins: int
    """Bins each peak is a mean over (one bin's noise is not a level)."""


def _quantile_held(values: np.ndarray, quantile: float) -> float | None:
    held = [v for v in values.tolist() if math.isfinite(v)]
    if len(held) < 2:
        return None
    return linear_quantile(held, quantile)


def linear_quantile(values: list[float], quantile: float) -> float:
    """``np.quantile(values, quantile)`` (method linear) of a few finite
    values, bit for bit: the same index, weight and interpolation as numpy's,
    in plain Python, since numpy's call costs ~200 us on a handful of days.
    A ``quantile`` outside [0, 1] raises ValueError, as numpy's does."""
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {quantile!r}")
    ordered = sorted(values)
    n = len(ordered)
    virtual = (n - 1) * quantile
    if virtual >= n - 1:
        return ordered[-1]
    below = math.floor(virtual)
    gamma = virtual - below
    a, b = ordered[below], ordered[below + 1]
    diff = b - a
    # numpy's _lerp: from the nearer end, so the weight's rounding is smaller
    return b - diff * (1 - gamma) if gamma >= 0.5 else a + diff * gamma


def seasonal_peak(
    series: BinnedSeries, t: float, horizon_s: float, quantile: float, windows: SeasonalWindows
) -> tuple[float | None, float | None]:
    """(peak request rate, request count) the past days show over
    ``(t, t + horizon_s]`` at the same time of day, each the ``quantile``
    across the days; the peak raised to the days' peaks over the size
    window when an event is due (the module's docstring); (None, None) when
    fewer than two days hold any of it."""
    offsets = [d * DAY_S for d in range(1, windows.days + 1)]
    when = [t - o - windows.wander_s for o in offsets]
    peaks, counts = series.window_stats(when, horizon_s + 2 * windows.wander_s, windows.smooth_bins)
    peak = _quantile_held(peaks, quantile)
    count = _quantile_held(counts, quantile)
    if peak is None or count is None:
        return None, None
    # no wider than a day: adjacent days' windows must not share a session
    reach = min(windows.size_wander_s, max(0.0, (DAY_S - horizon_s) / 2))
    if reach > windows.wander_s and count >= WAKE_REQUESTS:
        wide = [t - o - reach for o in offsets]
        sizes, _ = series.window_stats(wide, horizon_s + 2 * reach, windows.smooth_bins)
        size = _quantile_held(sizes, quantile)
        if size is not None:
            peak = max(peak, size)
    return peak, count


SMOOTH_S = 60.0
"""The days' peaks are of one-minute means: a single 15-s bin's Poisson
noise would pass for a level half again as high."""


def reach_s(settings: ScalerSettings) -> float:
    """How far before the oldest day's hour the days' peak reads."""
    return max(settings.seasonal_wander_seconds, settings.seasonal_size_wander_seconds)


def reach_bins(settings: ScalerSettings, step_s: float) -> tuple[int, int]:
    """(bins of the wander, further bins of the size window) a tracker's ring
    holds before its oldest day."""
    wander = math.ceil(settings.seasonal_wander_seconds / step_s)
    return wander, math.ceil(reach_s(settings) / step_s) - wander


class SeasonalReader:
    """The days' peak over one tracker's series: which days its ring holds,
    what to say when the settings ask for more, and a small cache (the
    policy asks at the lead time, pre-warming at the node's, every refresh;
    the answer changes only when a bin closes)."""

    def __init__(self, series: BinnedSeries, size_bins: int, name: str) -> None:
        self._series = series
        self._size_bins = size_bins
        self._name = name
        self._cache: dict[tuple[float, ...], tuple[float | None, float | None]] = {}

    @property
    def days_held(self) -> int:
        """Whole days the ring spans besides the size window's reach: the
        most ``seasonalPeakDays`` can use (the ring also holds the oldest
        day's wander and size window)."""
        series = self._series
        return math.floor((series.capacity - self._size_bins) * series.step_s / DAY_S)

    def _spare_s(self, days: int) -> float:
        """Seconds the ring holds before the oldest of ``days`` days."""
        return max(0.0, self._series.capacity * self._series.step_s - days * DAY_S)

    def warn_days(self, settings: ScalerSettings) -> None:
        """Say, when set, that ``seasonalPeakDays`` asks for more days than
        the fit window keeps: the peak uses the days held, and is off under two."""
        asked, held = settings.seasonal_peak_days, self.days_held
        if asked <= held:
            return
        uses = f"uses the {held} held" if held >= 2 else "is off (it needs two days)"
        log.warning(
            "%s: seasonalPeakDays %d asks for more days than the tracker keeps "
            "(%d, the fit window); the days' peak %s",
            self._name, asked, held, uses,
        )  # fmt: skip

    def warn_changes(self, old: ScalerSettings, new: ScalerSettings) -> None:
        """Say what a settings change cannot do on a ring already sized."""
        if new.seasonal_peak_days != old.seasonal_peak_days:
            self.warn_days(new)
        if reach_s(new) > reach_s(old):
            log.warning(
                "%s: seasonalWanderSeconds/seasonalSizeWanderSeconds raised to %g s; "
                "this tracker's history reaches %g s before its oldest day, so the "
                "days' peak reads that much until the scaler restarts",
                self._name, reach_s(new), self._spare_s(self.days_held),
            )  # fmt: skip

    def peak(
        self, settings: ScalerSettings, t: float, horizon_s: float, quantile: float
    ) -> tuple[float | None, float | None]:
        """:func:`seasonal_peak` over the last ``seasonalPeakDays`` days (at
        most the days held); (None, None) when off or under two days."""
        days = min(settings.seasonal_peak_days, self.days_held)
        if days < 2:
            return None, None
        # a wander raised after the ring was sized reads only what it holds,
        # rather than a partial oldest day that would bias the quantile down
        spare_s = self._spare_s(days)
        wander = min(settings.seasonal_wander_seconds, spare_s)
        size_wander = min(settings.seasonal_size_wander_seconds, spare_s)
        key = (t, horizon_s, quantile, days, wander, size_wander, self._series.version)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        smooth = max(1, round(SMOOTH_S / self._series.step_s))
        windows = SeasonalWindows(days, wander, size_wander, smooth)
        value = seasonal_peak(self._series, t, horizon_s, quantile, windows)
        if len(self._cache) >= 4:
            self._cache.clear()
        self._cache[key] = value
        return value
