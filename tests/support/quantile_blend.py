"""How much combining the methods' quantile forecasts could buy, with and without hindsight.

A backtest row where another method beats prescaler's 0.9 quantile asks
whether some mix of the field's methods would beat both. Two answers bound
it: :func:`hindsight_blend`, the convex weights with the lowest pinball loss
chosen after seeing every actual (quantile regression averaging, Nowotarski
& Weron 2015, an exact linear program), which no forecaster can choose; and
:func:`walk_forward_blend`, the same weights chosen as a forecaster would,
from the origins whose targets it has already seen. The gap between them is
what only knowing the scored actuals buys. Only the backtest bench uses it,
so it lives with the suite rather than the product (or the lab, which no
product bench imports).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from forecasting.backtest import pinball


@dataclass(frozen=True, eq=False)
class Blend:
    """Convex weights over the forecast columns and their pinball loss."""

    weights: np.ndarray
    pinball: float


def _checked(actual: np.ndarray, forecasts: np.ndarray, q: float) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(actual, dtype=float)
    f = np.asarray(forecasts, dtype=float)
    if f.ndim != 2 or a.ndim != 1 or f.shape[0] != a.size or f.shape[1] < 1:
        raise ValueError(f"need actual (n,) and forecasts (n, m >= 1), got {a.shape} and {f.shape}")
    if not 0.0 < q < 1.0:
        raise ValueError(f"quantile level must be in (0, 1), got {q}")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(f))):
        raise ValueError("actual and forecasts must be finite")
    return a, f


def hindsight_blend(actual: np.ndarray, forecasts: np.ndarray, q: float) -> Blend:
    """The convex combination of ``forecasts``' columns (one method each) with
    the lowest mean pinball loss at level ``q`` against ``actual``.

    The linear program: minimise ``mean(q * u + (1 - q) * v)`` subject to
    ``forecasts @ w + u - v = actual``, ``sum(w) = 1`` and ``w, u, v >= 0``
    (``u`` and ``v`` are each origin's miss above and below). Every single
    method is a feasible point, so the result is never worse than the best
    column."""
    a, f = _checked(actual, forecasts, q)
    from scipy import sparse
    from scipy.optimize import linprog

    n, m = f.shape
    if n == 0:
        return Blend(np.full(m, 1.0 / m), math.nan)
    cost = np.concatenate([np.zeros(m), np.full(n, q / n), np.full(n, (1.0 - q) / n)])
    eye = sparse.identity(n, format="csr")
    rows = sparse.hstack([sparse.csr_matrix(f), eye, -eye])
    total = sparse.hstack([sparse.csr_matrix(np.ones((1, m))), sparse.csr_matrix((1, 2 * n))])
    result = linprog(
        cost,
        A_eq=sparse.vstack([rows, total]).tocsr(),
        b_eq=np.append(a, 1.0),
        bounds=(0.0, None),
        method="highs",
    )
    if result.status != 0:
        raise RuntimeError(f"quantile blend: the linear program failed: {result.message}")
    weights = np.clip(result.x[:m], 0.0, None)
    weights /= weights.sum()
    # The solver's optimum holds to its tolerance (about 1e-7); each single
    # column is a blend too, so "never worse than the best" holds exactly.
    candidates = [weights, *np.eye(m)]
    losses = [pinball(a, f @ w, q) for w in candidates]
    best = int(np.argmin(losses))
    return Blend(candidates[best], losses[best])


@dataclass(frozen=True, eq=False)
class WalkForward:
    """The walk-forward blend's forecast at each origin, and which origins
    it blended (the others are its fallback column alone)."""

    forecast: np.ndarray
    blended: np.ndarray


def walk_forward_blend(
    actual: np.ndarray,
    forecasts: np.ndarray,
    target_index: np.ndarray,
    horizon: int,
    q: float,
    *,
    refit_every: int = 1,
    min_past: int = 10,
    fallback: int = 0,
) -> WalkForward:
    """The blended quantile forecast at each scored origin, its weights chosen
    without hindsight.

    Origin ``j`` forecasts ``target_index[j]`` from the history before
    ``target_index[j] - horizon + 1``; its weights are :func:`hindsight_blend`
    over the earlier origins whose targets lie in that history, refitted
    every ``refit_every`` origins (held in between, as a model's parameters
    are). Before ``min_past`` such origins exist, the forecast is column
    ``fallback`` alone (the method that would run without a blend)."""
    a, f = _checked(actual, forecasts, q)
    targets = np.asarray(target_index)
    if targets.shape != a.shape:
        raise ValueError(f"target_index must match actual's shape {a.shape}, got {targets.shape}")
    if horizon < 1 or refit_every < 1 or min_past < 1:
        raise ValueError(
            f"horizon, refit_every and min_past must be >= 1, got {horizon}, "
            f"{refit_every}, {min_past}"
        )
    if not 0 <= fallback < f.shape[1]:
        raise ValueError(f"fallback column {fallback} is not one of {f.shape[1]}")
    origins = targets - horizon + 1
    out = f[:, fallback].copy()
    blended = np.zeros(a.size, dtype=bool)
    weights: np.ndarray | None = None
    for j in range(a.size):
        if j % refit_every == 0:
            seen = np.flatnonzero(targets < origins[j])
            weights = (
                hindsight_blend(a[seen], f[seen], q).weights if seen.size >= min_past else None
            )
        if weights is not None:
            out[j] = float(f[j] @ weights)
            blended[j] = True
    return WalkForward(out, blended)
