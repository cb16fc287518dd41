"""prescaler's band: the quantiles around its point forecast.

Three sources, from the most to the least evidence: the combined point's own
out-of-sample errors on the rolling holdout, recent ones weighing more
(:func:`holdout_error_band`), when it holds enough independent errors; else
the ridge's in-sample residual law (:func:`resid_quantile`), its tails
calibrated by their holdout coverage (:func:`tail_factor`); with fewer than
``min_empirical`` residuals, a Gaussian band. Errors are in the model's log
scale over the local volatility, so a band widens in bursts and narrows at
night. :class:`LawLevels` keeps the levels predictions read. Pure numpy.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np

ppf = NormalDist().inv_cdf
"""The standard normal quantile (as ``scipy.stats.norm.ppf`` to ~1e-16,
without importing scipy.stats: ~70 MB resident in the scaler)."""
CAL_Q = 0.9
"""The quantile whose holdout coverage calibrates the band (see :func:`tail_factor`)."""
BAND_LEVELS = np.linspace(0.0, 1.0, 101)
"""Levels at which the holdout band's error law is kept: its quantile
function every percent, interpolated between, instead of every error (a day of
15-s bins holds 5,760 per horizon, and the scaler keeps a fitted forecaster
per ScaledObject)."""


def sorted_quantile(xs: np.ndarray, q: float) -> float:
    """``float(np.quantile(xs, q))`` (method 'linear') for an ALREADY SORTED ``xs``.

    Why: residual laws are sorted once when fitted, and ``np.quantile``
    re-partitions them on every predict (a third of the scaler's refresh).
    The index, gamma and interpolation below are numpy's own steps
    (``_get_indexes``, ``_get_gamma``, ``_lerp``), so the result is bit-equal.
    """
    n = xs.size
    last = float(xs[-1])
    if math.isnan(last):
        return math.nan  # np.sort puts NaNs last; np.quantile propagates them
    v = (n - 1) * q
    if v >= n - 1:
        prev, lo, hi = -1.0, last, last
    elif v < 0:
        prev, lo, hi = 0.0, float(xs[0]), float(xs[0])
    else:
        i = math.floor(v)
        prev, lo, hi = float(i), float(xs[i]), float(xs[i + 1])
    gamma = v - prev
    diff = hi - lo
    return hi - diff * (1 - gamma) if gamma >= 0.5 else lo + diff * gamma


def median_and_quantile(xs: np.ndarray, q: float) -> tuple[float, float]:
    """``(float(np.median(xs)), float(np.quantile(xs, q)))`` from one partition.

    Why: the rolling holdout asks both of every refit's residuals; one
    ``np.partition`` at the positions both read (and the last, where NaNs
    go) replaces two partitions and numpy's per-call overhead. The median is
    ``np.median``'s own mean of the middle values, the quantile
    :func:`sorted_quantile` (numpy's steps), so both are bit-equal.
    """
    n = xs.size
    if n == 0:
        return float(np.median(xs)), float(np.quantile(xs, q))
    half = n // 2
    i = min(math.floor((n - 1) * q), n - 1)
    kth = sorted({0, max(half - 1, 0), half, max(i, 0), min(i + 1, n - 1), n - 1})
    part = np.partition(xs, kth)
    middle = part[half : half + 1] if n % 2 else part[half - 1 : half + 1]
    median = math.nan if math.isnan(float(part[-1])) else float(np.mean(middle))
    return median, sorted_quantile(part, q)


def recency_quantiles(values: np.ndarray, half_life: float, levels: np.ndarray) -> np.ndarray:
    """Quantiles at ``levels`` of ``values`` (oldest first), each weighted
    ``0.5 ** (age / half_life)``: non-exchangeable conformal (Barber, Candes,
    Ramdas & Tibshirani 2023) with fixed, data-independent weights.

    Why: a conformal band assumes the errors to come are exchangeable with
    the holdout's; traffic drifts, so recent errors are the better sample of
    the next ones. The weighted empirical distribution puts each sorted value
    at the midpoint of its weight (Hazen's plotting position), so equal
    weights give the usual quantiles up to the plotting position.
    """
    v = np.asarray(values, dtype=float)
    age = np.arange(v.size - 1, -1, -1, dtype=float)
    w = np.exp2(-age / max(half_life, 1e-12))
    order = np.argsort(v, kind="stable")
    cum = np.cumsum(w[order])
    pos = (cum - 0.5 * w[order]) / cum[-1]
    return np.asarray(np.interp(levels, pos, v[order]))


def holdout_band(err: np.ndarray, half_life: float) -> np.ndarray:
    """The holdout errors' law on :data:`BAND_LEVELS`; ``half_life`` (a
    fraction of the holdout's origins) weighs recent errors more, 0 alike."""
    if half_life > 0:
        return recency_quantiles(err, half_life * err.size, BAND_LEVELS)
    return np.quantile(err, BAND_LEVELS)


def holdout_error_band(
    point: np.ndarray, actual: np.ndarray, scale: np.ndarray, c: float, half_life: float
) -> np.ndarray:
    """The shipped point's error law on the holdout (see ``band_min_errors``):
    :func:`holdout_band` of the errors in the model's log scale
    ``log(max(y, 0) + c)`` over the local volatility ``scale``.

    A function of its inputs (not of a fitted forecaster) so that the band's
    definition, which every banded forecast reads, is checked on its own.
    """
    err = (np.log(np.maximum(actual, 0.0) + c) - np.log(np.maximum(point, 0.0) + c)) / scale
    return holdout_band(err, half_life)


def band_level(band: np.ndarray, q: float) -> float:
    """The holdout band's error at level ``q`` (before scale and widening)."""
    return float(np.interp(q, BAND_LEVELS, band))


def level_spread(level: float, q: float, scale: float, widen: float) -> float:
    """Offset of quantile ``q`` from the point, from the band's error at ``q``
    (:func:`band_level`, which a forecaster may keep between predictions): 0
    for the median, never inside the point (lower quantiles at most 0, upper
    at least)."""
    if q == 0.5:
        return 0.0
    off = level * scale * widen
    return min(0.0, off) if q < 0.5 else max(0.0, off)


def resid_quantile(
    resid: np.ndarray, q: float, scale: float, min_empirical: int, diff_sd: float
) -> float:
    """Quantile ``q`` of a sorted residual law times ``scale``; with fewer than
    ``min_empirical`` residuals a Gaussian one (their RMS with a small-sample
    correction, or the one-step changes' deviation ``diff_sd``)."""
    m = resid.size
    if m >= min_empirical:
        return sorted_quantile(resid, q) * scale
    return gaussian_quantile(q, scale, m, law_rms(resid) if m >= 4 else 0.0, diff_sd)


def law_rms(resid: np.ndarray) -> float:
    """The residuals' root mean square (the Gaussian band's deviation)."""
    return float(np.sqrt(np.mean(resid**2)))


def gaussian_quantile(q: float, scale: float, m: int, rms: float, diff_sd: float) -> float:
    """:func:`resid_quantile`'s Gaussian band for ``m`` residuals of RMS
    ``rms`` (:func:`law_rms`, unused below 4 residuals), which a forecaster
    may keep between predictions."""
    sd = rms * scale if m >= 4 else diff_sd
    sd = sd * math.sqrt(m / max(m - 2, 1)) if m >= 4 else sd
    return float(ppf(q)) * sd


def tail_factor(coverage: float, n: int, calibrate_rows: float) -> float:
    """How much to scale the band's tail probabilities, from holdout coverage.

    Why: in-sample residuals are too narrow when rows are few and too wide
    where the local scale over-reacts (on/off traffic); the holdout has
    measured the same band's out-of-sample coverage at q = 0.9. One step of
    adaptive conformal inference (Gibbs & Candes 2021: the miss level moves by
    the gap between target and realised miss rate), shrunk by the evidence
    ``n / (n + calibrate_rows)`` and clipped to [1/2, 2], gives the factor by
    which every tail probability (1 - q above the median, q below it) is
    multiplied at predict time.
    """
    target = 1.0 - CAL_Q
    miss = 1.0 - coverage
    trust = n / (n + calibrate_rows)
    return min(max(1.0 + trust * (target - miss) / target, 0.5), 2.0)


def calibrated(q: float, factor: float) -> float:
    """Quantile level ``q`` with its tail probability scaled by ``factor``."""
    if factor == 1.0 or q == 0.5:
        return q
    if q > 0.5:
        return min(1.0 - (1.0 - q) * factor, 0.999)
    return max(q * factor, 0.001)


class LawLevels:
    """The quantile levels that predictions have read of each law fixed at
    fit time (a ridge residual law or a holdout band, told apart by a kind
    and a horizon), kept until another array takes the law's place (a fit,
    a lazily fitted horizon).

    Why: every prediction reads the same few quantiles of the same laws; the
    scale of the moment multiplies them as before, so the values are those
    of :func:`resid_quantile` and :func:`band_level`.
    """

    def __init__(self) -> None:
        self._kept: dict[tuple[str, int], tuple[np.ndarray, dict[float | None, float]]] = {}

    def _levels(self, kind: str, h: int, law: np.ndarray) -> dict[float | None, float]:
        """Quantile levels of ``law`` by ``q``, its RMS under None."""
        kept = self._kept.get((kind, h))
        if kept is None or kept[0] is not law:
            kept = self._kept[(kind, h)] = (law, {})
        return kept[1]

    def quantile(
        self,
        kind: str,
        h: int,
        law: np.ndarray,
        q: float,
        scale: float,
        min_empirical: int,
        diff_sd: float,
    ) -> float:
        """``resid_quantile(law, q, scale, min_empirical, diff_sd)``, the law's
        own quantile (or, below ``min_empirical`` residuals, its RMS) kept."""
        levels = self._levels(kind, h, law)
        m = law.size
        if m < min_empirical:
            rms = levels.get(None) if m >= 4 else 0.0
            if rms is None:
                rms = levels[None] = law_rms(law)
            return gaussian_quantile(q, scale, m, rms, diff_sd)
        level = levels.get(q)
        if level is None:
            level = levels[q] = sorted_quantile(law, q)
        return level * scale

    def band(self, h: int, band: np.ndarray, q: float) -> float:
        """``band_level(band, q)``, kept (``kind`` "band")."""
        levels = self._levels("band", h, band)
        level = levels.get(q)
        if level is None:
            level = levels[q] = band_level(band, q)
        return level
