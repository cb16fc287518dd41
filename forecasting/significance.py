"""How sure a backtest is that one method's MAE (or pinball loss) differs from another's.

Why: a backtest scores tens to hundreds of rolling origins, and neighbouring
origins' h-step errors share up to ``h - 1`` steps of the future, so a ratio of
two MAEs near 1 may be the luck of one level shift. A paired moving-block
bootstrap (Kuensch 1989) resamples whole runs of origins, both methods' errors
together, and keeps that dependence: the interval it gives for
``MAE(a) / MAE(b)`` says whether "a is worse than b" is evidence or noise.
Pure numpy; the seed is fixed so a report is reproducible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from forecasting.backtest import BacktestResult, Trajectory


FLOAT_DUST = 1e-9
"""Errors below this fraction of the series' mean level count as none.

Why: a forecaster that works through ``log``/``exp`` forecasts a constant
series to within a few ulps (5.000000000000006 for 5), while ``last_value``
is exact; the ratio of the two MAEs is then 1e-15 / 0 = inf, "infinitely
worse", on a series where both are perfect. A billionth of the level is far
above rounding and far below any error a platform would scale on."""


@dataclass(frozen=True)
class RatioInterval:
    """``MAE(a) / MAE(b)`` and its bootstrap interval."""

    ratio: float
    low: float
    high: float
    level: float
    block: int
    origins: int

    @property
    def significantly_worse(self) -> bool:
        """True when even the interval's low end has ``a`` worse than ``b``."""
        return self.low > 1.0

    @property
    def significantly_better(self) -> bool:
        return self.high < 1.0


def block_length(origins: int, horizon_steps: int, stride: int = 1) -> int:
    """Origins per resampled block: at least the span over which h-step errors
    overlap (``h / stride`` origins), and at least ``n^(1/3)`` (the usual rate
    for a moving-block bootstrap of a mean, which covers short-range
    autocorrelation beyond the overlap)."""
    if origins < 1:
        raise ValueError(f"need at least one origin, got {origins}")
    overlap = math.ceil(max(horizon_steps, 1) / max(stride, 1))
    return int(min(origins, max(overlap, math.ceil(origins ** (1 / 3)))))


def mae_ratio_interval(
    err_a: np.ndarray,
    err_b: np.ndarray,
    *,
    block: int,
    level: float = 0.9,
    draws: int = 2000,
    seed: int = 0,
) -> RatioInterval:
    """Paired moving-block bootstrap interval of ``mean|err_a| / mean|err_b|``.

    ``err_a`` and ``err_b`` are the two methods' errors at the same origins, in
    time order. Each draw concatenates ``ceil(n / block)`` blocks of
    ``block`` consecutive origins, started uniformly at random, cut to ``n``;
    the interval is the draws' equal-tailed ``level`` percentile interval.
    """
    a = np.abs(np.asarray(err_a, dtype=float))
    b = np.abs(np.asarray(err_b, dtype=float))
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"errors must be two 1-D arrays of one length, got {a.shape}, {b.shape}")
    n = a.size
    if n == 0:
        raise ValueError("need at least one origin")
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise ValueError("errors must be finite")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if block < 1 or draws < 1:
        raise ValueError(f"block and draws must be >= 1, got {block}, {draws}")
    block = min(block, n)
    ratio = _ratio(float(a.sum()), float(b.sum()))
    blocks = math.ceil(n / block)
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, n - block + 1, size=(draws, blocks))
    idx = (starts[:, :, None] + np.arange(block)[None, None, :]).reshape(draws, -1)[:, :n]
    sums_a, sums_b = a[idx].sum(axis=1), b[idx].sum(axis=1)
    ratios = np.array([_ratio(float(x), float(y)) for x, y in zip(sums_a, sums_b, strict=True)])
    tail = (1.0 - level) / 2.0
    if np.all(np.isfinite(ratios)):
        low, high = np.quantile(ratios, [tail, 1.0 - tail])
    else:
        # Draws in which ``b`` made no error at all have an infinite ratio;
        # interpolating between two of them is inf - inf = NaN. The nearest
        # draws outward (never narrower than the interpolated interval) are
        # well defined: an infinite end says "worse than a perfect method".
        low = np.quantile(ratios, tail, method="lower")
        high = np.quantile(ratios, 1.0 - tail, method="higher")
    return RatioInterval(ratio, float(low), float(high), level, block, n)


def _ratio(sum_a: float, sum_b: float) -> float:
    """A ratio of two error sums; two perfect methods tie at 1."""
    if sum_b > 0:
        return sum_a / sum_b
    return 1.0 if sum_a == 0 else math.inf


def mae_ratios(
    result: BacktestResult, horizon: int, method: str = "prescaler", *, level: float = 0.9
) -> dict[str, RatioInterval]:
    """``MAE(method) / MAE(other)`` with its interval, for every other method
    the backtest scored at ``horizon`` (steps), over the same origins."""
    trajectories, mine, block, dust = _paired(result, horizon, method)
    return {
        other: mae_ratio_interval(
            _undusted(mine.actual - mine.median, dust),
            _undusted(theirs.actual - theirs.median, dust),
            block=block,
            level=level,
        )
        for other, theirs in trajectories.items()
        if other != method
    }


def pinball_ratios(
    result: BacktestResult,
    horizon: int,
    method: str = "prescaler",
    *,
    q: float = 0.9,
    level: float = 0.9,
) -> dict[str, RatioInterval]:
    """``pinball_q(method) / pinball_q(other)`` with its interval, for every
    other method scored at ``horizon`` (steps), over the same origins.

    The same paired block bootstrap as :func:`mae_ratios`, on each origin's
    pinball loss of the ``q`` forecast (``q90``; ``q`` names its level), so
    "worse on pinball" is judged as MAE is. Why: the scaler provisions for
    the 0.9 quantile, and a pinball ratio near 1 needs the same test."""
    if not 0.0 < q < 1.0:
        raise ValueError(f"q must be in (0, 1), got {q}")
    trajectories, mine, block, dust = _paired(result, horizon, method)

    def loss(t: Trajectory) -> np.ndarray:
        d = _undusted(t.actual - t.q90, dust)
        return np.maximum(q * d, (q - 1.0) * d)

    return {
        other: mae_ratio_interval(loss(mine), loss(theirs), block=block, level=level)
        for other, theirs in trajectories.items()
        if other != method
    }


def _paired(
    result: BacktestResult, horizon: int, method: str
) -> tuple[dict[str, Trajectory], Trajectory, int, float]:
    """What both ratio kinds share: every method's trajectories at
    ``horizon``, ``method``'s own, the bootstrap block and the rounding dust."""
    trajectories = result.trajectories[horizon]
    if method not in trajectories:
        raise ValueError(f"{method!r} was not backtested; scored: {', '.join(trajectories)}")
    mine = trajectories[method]
    origins = mine.actual.size
    block = block_length(origins, horizon, result.stride)
    dust = FLOAT_DUST * float(np.mean(np.abs(mine.actual))) if origins else 0.0
    return trajectories, mine, block, dust


def _undusted(err: np.ndarray, dust: float) -> np.ndarray:
    """``err`` with its rounding-size values set to zero (see ``FLOAT_DUST``)."""
    return np.where(np.abs(err) <= dust, 0.0, err)
