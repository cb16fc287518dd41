"""prescaler's rolling-origin holdout: every member's out-of-sample forecasts.

The member weights, the ridge band's calibration and the combined point's
band all come from forecasts made inside the history as the backtest makes
them: the ridge refitted and the smoothers re-chosen at the start of each of
up to ``holdout_refits`` blocks, so every error is out of sample. Why: a
fixed single split holds out a handful of origins on a short history (the
weights were noise); rolling the origin starts the holdout as soon as the
ridge has ``min_rows`` rows, so a few dozen steps already weigh the members
on tens of genuine forecasts. Pure numpy.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np

from forecasting.combination import CANDIDATES, SmoothingBank
from forecasting.prescaler.band import CAL_Q, median_and_quantile


def rolling_forecasts(
    z: np.ndarray,
    x: np.ndarray,
    target: np.ndarray,
    scale: np.ndarray,
    bank: SmoothingBank,
    solve: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    h: int,
    start: int,
    first: int,
    refits: int,
    c: float,
    min_independent_errors: float,
    bank_start: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """The members' ``h``-step forecasts (a row each, the ridge first, in
    demand units) at the held-out origins, and whether each target lay at or
    below the ridge band's :data:`CAL_Q` quantile (its holdout coverage).

    ``z`` is the transformed history ``log(y + c)`` and ``bank`` the
    smoothers on ``y``; ``x``, ``target`` and ``scale`` are the ridge's rows,
    targets and local scales of the origins ``start .. start + count - 1``,
    of which those from position ``first`` on are held out; ``solve`` fits
    the ridge on a prefix of the rows; ``refits`` is ``holdout_refits``
    (0: one fit on the rows before the holdout). ``bank`` holds the
    history's rows from position ``bank_start`` on (the smoothers read only
    the recent rows), which must include the holdout.
    """
    count = target.size
    n_test = count - first
    test = np.arange(start + first, start + count)
    bounds = (
        np.unique(np.linspace(0, n_test, min(refits, n_test) + 1).astype(int))
        if refits > 0
        else np.array([0, n_test])
    )
    ridge = np.empty(n_test)
    covered = np.empty(n_test, dtype=bool)
    smooth = np.empty((len(CANDIDATES), n_test))
    for lo, hi in itertools.pairwise(bounds.tolist()):
        b = start + first + lo
        # The rows whose target lies before the block (a prefix).
        n_fit = min(max(b - h - start, 0), count)
        xf = x[:n_fit]
        coef = solve(xf, target[:n_fit])
        q50, upper = median_and_quantile((target[:n_fit] - xf @ coef) / scale[:n_fit], CAL_Q)
        rows = slice(first + lo, first + hi)
        origins = slice(start + first + lo, start + first + hi)
        centre = z[origins] + x[rows] @ coef
        ridge[lo:hi] = np.exp(centre + q50 * scale[rows]) - c
        covered[lo:hi] = (
            z[start + first + lo + h : start + first + hi + h] <= centre + upper * scale[rows]
        )
        params = bank.select(h, b - bank_start, min_independent_errors)
        smooth[:, lo:hi] = bank.forecasts(params, test[lo:hi] - bank_start, h)
    return np.vstack([np.maximum(ridge, 0.0), smooth]), covered
