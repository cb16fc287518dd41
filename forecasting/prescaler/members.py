"""prescaler's members: how the ridge and the smoothers share the point.

The point forecast is a combination of five members (the ridge's median and
the four smoothers of :mod:`forecasting.combination`), weighted from their
forecasts on a rolling holdout inside the history (every error out of
sample). This module holds the weighting rules; the forecaster runs the
holdout. Pure numpy.
"""

from __future__ import annotations

import math

import numpy as np

from forecasting.combination import inverse_error_weights, min_abs_error_weights


def smoothers_equal(members: int) -> np.ndarray:
    """Equal weights over the smoothers, none on the ridge (member 0)."""
    w = np.full(members, 1.0 / (members - 1))
    w[0] = 0.0
    return w


def member_weights(
    cands: np.ndarray,
    actual: np.ndarray,
    h: int,
    *,
    min_independent_errors: float,
    combine_power: float,
    shrink_rows: float,
) -> np.ndarray:
    """Weights of the members (rows of ``cands``) from their holdout forecasts.

    Neighbouring origins' h-step errors share ``h - 1`` steps of the future,
    so ``n`` origins hold about ``n / h`` independent errors; with fewer than
    ``min_independent_errors`` fitted weights chase noise, and the smoothers
    weigh equally (equal weights are hard to beat: the "forecast combination
    puzzle"); the ridge, a regression on tens of overlapping rows, sits out.
    Otherwise: the MAE-optimal simplex weights (which see through correlated
    members), trusted ``n / (n + shrink_rows)``, the rest of the trust on
    inverse MAE^-``combine_power`` weights (the stabler estimate on a short
    holdout).
    """
    n = actual.size
    if n < min_independent_errors * h:
        return smoothers_equal(cands.shape[0])
    err = np.abs(actual - cands)
    inverse = inverse_error_weights(err, combine_power)
    trust = n / (n + shrink_rows)
    return trust * min_abs_error_weights(cands, actual) + (1 - trust) * inverse


def plausible(weights: np.ndarray, cands: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """``weights`` without the members outside ``[lo, hi]`` (the guard).

    Why: the weights are fixed between refits, and a smoother chosen on
    steady traffic (a long memory wins on noise) lags a level shift for tens
    of steps; the ridge follows it within a few. The forecaster passes the
    ridge's residual band at q = 0.1 and 0.9 widened by ``guard``: a member
    beyond it disagrees with the current data more than the ridge's
    calibrated error allows, so it sits out this forecast; in steady traffic
    every member lies inside and nothing changes. When no weighted member is
    left, the ridge (member 0) alone speaks.
    """
    keep = (cands >= min(lo, cands[0])) & (cands <= max(hi, cands[0]))
    return renormalised(weights, keep)


def guarded_weights(
    weights: np.ndarray,
    cands: np.ndarray,
    centre: float,
    q_low: float,
    q_high: float,
    *,
    guard: float,
    c: float,
    memo: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
    key: int = 0,
) -> np.ndarray:
    """The guard: ``weights`` without the members (``cands``, demand units)
    beyond ``guard`` times the ridge's residual band around ``centre``;
    ``weights`` unchanged when ``guard`` <= 0.

    ``q_low`` and ``q_high`` are the ridge's residual quantiles at 0.1 and
    0.9 (scaled to the current volatility) and ``centre`` its point, in the
    model's log scale ``log(y + c)``; the range is widened to hold the ridge's
    own forecast (member 0), and :func:`plausible` drops what lies outside.
    Why a function of its inputs: it decides which members a forecast reads,
    so its rule is checked apart from a fitted forecaster. ``memo[key]``
    (optional; the forecaster passes one per horizon) keeps the renormalised
    weights of the last all-inside forecast with the same ``weights`` object:
    steady traffic reuses them instead of renormalising each time.
    """
    if guard <= 0:
        return weights
    lo = math.exp(centre + guard * q_low) - c
    hi = math.exp(centre + guard * q_high) - c
    low, high = min(lo, cands[0]), max(hi, cands[0])
    if all(low <= v <= high for v in cands.tolist()):
        # Every member inside (steady traffic): the renormalised weights
        # are the same as at the last such forecast with these weights.
        kept = memo.get(key) if memo is not None else None
        if kept is None or kept[0] is not weights:
            every = renormalised(weights, np.ones(cands.shape, dtype=bool))
            kept = (weights, every)
            if memo is not None:
                memo[key] = kept
        return kept[1]
    return plausible(weights, cands, lo, hi)


def renormalised(weights: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``weights`` on the members ``keep`` marks, summing to 1; the ridge
    (member 0) alone when none of them has weight (see :func:`plausible`)."""
    kept = weights * keep
    total = float(kept.sum())
    if total <= 0.0:
        alone = np.zeros_like(weights)
        alone[0] = 1.0
        return alone
    return kept / total
