"""prescaler's ridge features: what is known at an origin about the change to come.

For an origin ``j`` (the last observed index of ``z = log(y + c)``) and a
horizon ``h``, the ridge regresses ``z[j + h] - z[j]`` on a constant, the
recent means over :data:`MEAN_WINDOWS` relative to the last value and, for
each season ``p`` (daily, weekly), the seasonal profile's expected change
``S(j + h) - S(j)`` and distance ``S(j + h) - z[j]``. Residuals and errors are
divided by the local scale, the mean one-step change over the last
:data:`SCALE_WINDOW` steps, so that a band widens in bursts.

Two paths give the same floats: :func:`features` builds the rows of given
origins (predict: one origin, every horizon), :class:`TrainRows` every
training origin once per history, each horizon's rows being slices of it
(fit: a dozen horizons on the same origins). Pure numpy.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MEAN_WINDOWS = (3, 12, 48)
"""Steps averaged by the recent-mean features."""
SCALE_WINDOW = 12
"""Steps whose mean absolute change is the local scale."""


def features(
    z: np.ndarray,
    idx: np.ndarray,
    h: int | np.ndarray,
    periods: tuple[int, ...],
    max_seasons: int,
    cs: np.ndarray | None = None,
) -> np.ndarray:
    """Rows of features known at origins ``idx`` (last observed index) for
    horizon ``h``, or row by row for horizons ``h`` (an array like ``idx``:
    predict() builds every horizon's row in one pass, not one per step);
    ``cs`` is ``z``'s cumulative sum with a leading 0, if already at hand."""
    if cs is None:
        cs = np.concatenate(([0.0], np.cumsum(z)))
    last = z[idx]
    cols = [np.ones(idx.size)]
    for k in MEAN_WINDOWS:
        lo = np.maximum(idx - k + 1, 0)
        cols.append((cs[idx + 1] - cs[lo]) / (idx + 1 - lo) - last)
    for p in periods:
        s_future = profile(z, cs, idx + h, p, max_seasons)
        s_now = profile(z, cs, idx, p, max_seasons)
        cols.append(s_future - s_now)
        cols.append(s_future - last)
    return np.column_stack(cols)


def profile(z: np.ndarray, cs: np.ndarray, j: np.ndarray, p: int, max_seasons: int) -> np.ndarray:
    """Mean over up to ``max_seasons`` past seasons of the phase of ``j``,
    smoothed over +-w steps.

    Only values at ``j - k p + w`` with ``k >= 1`` are read, all of which lie
    at or before the origin as long as ``h + w <= p``.
    """
    w = max(0, p // 96)
    total = np.zeros(j.size)
    count = np.zeros(j.size)
    for k in range(1, max_seasons + 1):
        c = j - k * p
        ok = c - w >= 0
        lo = np.clip(c - w, 0, z.size)
        hi = np.clip(c + w + 1, 0, z.size)
        span = np.maximum(hi - lo, 1)
        val = (cs[hi] - cs[lo]) / span
        total += np.where(ok, val, 0.0)
        count += ok
    return np.where(count > 0, total / np.maximum(count, 1), z[np.minimum(j - 1, z.size - 1)])


def scale_floor(z: np.ndarray) -> float:
    """The local scale's floor: a tenth of ``z``'s mean one-step change, so
    that a flat stretch does not divide residuals by zero."""
    return _floor(np.abs(np.diff(z, prepend=z[0])))


def local_scale(z: np.ndarray, idx: np.ndarray, floor: float) -> np.ndarray:
    """Mean |one-step change| over the last :data:`SCALE_WINDOW` steps up to
    each origin ``idx``, at least ``floor``."""
    adz = np.abs(np.diff(z, prepend=z[0]))
    cs = np.concatenate(([0.0], np.cumsum(adz)))
    lo = np.maximum(idx - SCALE_WINDOW + 1, 0)
    raw = (cs[idx + 1] - cs[lo]) / (idx + 1 - lo)
    return np.maximum(raw, floor)


def _floor(adz: np.ndarray) -> float:
    return 0.1 * float(np.mean(adz)) + 1e-9


@dataclass(frozen=True)
class TrainRows:
    """Per-origin quantities of a training history, over every origin
    ``j = start .. n - 1`` (``start`` the longest season): each horizon's
    rows are slices of them.

    Why: every feature and the local scale are elementwise in the origin, so
    one pass per history gives each horizon's fit, holdout and test rows the
    same floats as :func:`features` and :func:`local_scale` on the origins,
    without redoing the cumulative sums and seasonal profiles a dozen times
    per fit.
    """

    start: int
    last: np.ndarray
    means: tuple[np.ndarray, ...]
    profiles: tuple[np.ndarray, ...]
    raw_scale: np.ndarray | None
    scale_floor: float

    @classmethod
    def build(
        cls, z: np.ndarray, periods: tuple[int, ...], max_seasons: int, use_scale: bool
    ) -> TrainRows:
        """The rows of history ``z``; the local scale only if ``use_scale``."""
        start = max(periods, default=0)
        j = np.arange(start, z.size)
        cs = np.concatenate(([0.0], np.cumsum(z)))
        last = z[j]
        means = []
        for k in MEAN_WINDOWS:
            lo = np.maximum(j - k + 1, 0)
            means.append((cs[j + 1] - cs[lo]) / (j + 1 - lo) - last)
        profiles = tuple(profile(z, cs, j, p, max_seasons) for p in periods)
        raw: np.ndarray | None = None
        floor = 0.0
        if use_scale:
            adz = np.abs(np.diff(z, prepend=z[0]))
            acs = np.concatenate(([0.0], np.cumsum(adz)))
            lo = np.maximum(j - SCALE_WINDOW + 1, 0)
            raw = (acs[j + 1] - acs[lo]) / (j + 1 - lo)
            floor = _floor(adz)
        return cls(start, last, tuple(means), profiles, raw, floor)

    def features(self, h: int, lo: int, hi: int) -> np.ndarray:
        """:func:`features` for horizon ``h`` of the origins at positions
        ``lo .. hi - 1`` (origin ``start + lo`` first)."""
        # Written column by column into one C-ordered matrix: the same
        # floats and layout as np.column_stack of the columns, without its
        # temporaries (a fit builds ~100 of these, 11,000 rows each at 3 days).
        x = np.empty((max(hi - lo, 0), 1 + len(self.means) + 2 * len(self.profiles)))
        x[:, 0] = 1.0
        for k, m in enumerate(self.means, start=1):
            x[:, k] = m[lo:hi]
        last = self.last[lo:hi]
        k = 1 + len(self.means)
        for prof in self.profiles:
            s_future = prof[lo + h : hi + h]
            np.subtract(s_future, prof[lo:hi], out=x[:, k])
            np.subtract(s_future, last, out=x[:, k + 1])
            k += 2
        return x

    def scale(self, lo: int, hi: int, floor: float) -> np.ndarray:
        """:func:`local_scale` of the origins at positions ``lo .. hi - 1``
        (built with ``use_scale``)."""
        assert self.raw_scale is not None
        return np.maximum(self.raw_scale[lo:hi], floor)


def origin_ranges(n: int, h: int, start: int, split: int | None) -> tuple[int, int, int, int]:
    """``(start, count, fit, test)`` in a history of ``n`` steps: origins
    ``start .. start + count - 1`` for horizon ``h``; the first ``fit`` of them
    train (their target before ``split``) and those from position ``test`` on
    are held out (at or after ``split``). Contiguous ranges, so each
    horizon's rows are slices of :class:`TrainRows`, not copies."""
    count = max(n - h - start, 0)
    if split is None:
        return start, count, count, count
    fit = min(max(split - h - start, 0), count)
    return start, count, fit, min(max(split - start, 0), count)
