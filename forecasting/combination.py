"""Cheap point forecasters and error-weighted combination (pure numpy).

No single regression's median is the best point forecast on every kind of
traffic (the last value wins on jumpy series, a local level or trend on slow
drifts), and weighting candidates by the inverse of their out-of-sample error
is robust and usually beats the best one (Bates & Granger 1969; Stock &
Watson 2004). Every candidate is a causal linear filter, so its forecast at
every past origin costs one ``lfilter`` pass: the weights come from genuine
out-of-sample errors. Candidates (``CANDIDATES``, parameters chosen per
horizon by h-step MAE): the last value, simple exponential smoothing, damped
Holt, and a discounted least-squares local linear trend solved exactly at
every origin (no start-up bias on a few dozen points, unlike the recursive
smoothers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from forecasting.filters import (
    first_order,
    first_order_last,
    second_order,
    trend_sums,
    two_tap_pair,
    two_tap_pair_last,
)

_SES_ALPHAS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
_HOLT_ALPHAS = (0.1, 0.2, 0.3, 0.5, 0.8)
_HOLT_BETAS = (0.02, 0.05, 0.1, 0.2)
HOLT_DAMPING = 0.9
ERRORS_KEPT_BYTES = 8 << 20
"""How much of the grid's absolute errors a :class:`SmoothingBank` keeps
across horizons (the latest horizon's always). prescaler's fit asks each
eager horizon twice, in its rolling holdout and again at the history's end,
and recomputing a horizon's errors was a tenth of a 3-day refit; its banks
read 1,440 rows, about 0.36 MB per horizon, so the 12 eager horizons stay,
and the bank goes with the fit."""
_TREND_LAMBDAS = (0.9, 0.95, 0.98, 0.99)
"""Discounts of the ``trend`` candidate: memories of ~10 to ~100 steps. Why
no shorter: a slope's variance grows as the inverse cube of the memory, and
fast-moving trends are damped Holt's job (alpha up to 0.8) already; the
``trend`` member adds the long line. Backtest: with 0.7 and 0.8 in
the grid, the noisy short-memory slope was picked on short histories and
cost MAE on the level-shifting conversation trace and worldcup98. None is 1
(an unweighted line through the whole history never forgets, and the
predictor only keeps the last 1,024 steps: 0.99^1024 = 3e-5)."""
TREND_DAMPING = HOLT_DAMPING
"""The ``trend`` member's slope fades like damped Holt's: ``h`` steps ahead it
carries ``damped_sum(h, 0.9)`` steps of slope (5.9 at ``h`` = 10), not ``h``,
because a line fitted to a ramp keeps climbing through the peak that ends it
(Gardner & McKenzie 1985; the backtest: ``docs/decisions/forecasting.md``)."""
TREND_MEMORY = 1024
"""Steps of history the ``trend`` candidate reads at predict time."""


def lfilter(b: list[float], a: list[float], x: np.ndarray) -> np.ndarray:
    """``scipy.signal.lfilter(b, a, x)`` for the first- and second-order
    filters here (``a[0] == 1``), bit for bit: direct form II transposed with
    scipy's own order of operations.

    Why not scipy's: importing ``scipy.signal`` costs ~75 MB of resident
    memory, a quarter of a 1,000-ScaledObject scaler's budget, for a loop
    over a few hundred points (about 10 us per point more; checked equal to
    scipy's on random inputs when this replaced it).
    """
    n = max(len(a), len(b))
    if n > 3 or float(a[0]) != 1.0:
        raise ValueError("lfilter: filters of order <= 2 with a[0] == 1 only")
    bb = [float(v) for v in b] + [0.0] * (n - len(b))
    aa = [float(v) for v in a] + [0.0] * (n - len(a))
    if n == 1:
        return np.asarray(x, dtype=float) * bb[0]
    xs = np.asarray(x, dtype=float).tolist()
    if n == 2:
        return np.array(first_order(bb[0], bb[1], aa[1], xs))
    return np.array(second_order(bb[0], bb[1], bb[2], aa[1], aa[2], xs))


def _filter_last_pair(
    b_one: list[float], b_two: list[float], a: list[float], d: list[float]
) -> tuple[float, float]:
    """``(lfilter(b_one, a, d)[-1], lfilter(b_two, a, d)[-1])`` for two-tap
    numerators over ``[1, a1, a2]``, without storing the paths, in one pass.

    Same operations in the same order as :func:`lfilter`, so bit-equal; used
    where only the state at the end of the history is read (predict), where
    damped Holt's level and trend share their input.
    """
    p0, p1, q0, q1 = float(b_one[0]), float(b_one[1]), float(b_two[0]), float(b_two[1])
    return two_tap_pair_last(p0, p1, q0, q1, float(a[1]), float(a[2]), d)


def holt_filters(
    alpha: float, beta: float, phi: float
) -> tuple[list[float], list[float], list[float]]:
    """(level numerator, trend numerator, denominator) of damped Holt (see holt_state).

    Public so that the filter coefficients, shared by the path
    (:func:`holt_state`) and the end-state fast path (predict), can be
    checked against :func:`lfilter` on their own.
    """
    a, b = alpha, beta
    # State x_t = A x_{t-1} + B y_t with x = (level, trend).
    m = np.array([[1 - a, (1 - a) * phi], [-a * b, phi * (1 - a * b)]])
    v = np.array([a, a * b])
    tr, det = m[0, 0] + m[1, 1], m[0, 0] * m[1, 1] - m[0, 1] * m[1, 0]
    den = [1.0, float(-tr), float(det)]
    # Numerators: (I - M z^-1)^-1 v = adj(I - M z^-1) v / det(...)
    num_l = [float(v[0]), float(-(m[1, 1] * v[0] - m[0, 1] * v[1]))]
    num_b = [float(v[1]), float(-(m[0, 0] * v[1] - m[1, 0] * v[0]))]
    return num_l, num_b, den


@dataclass(frozen=True)
class SmoothingParams:
    """Fitted parameters of the smoothing candidates."""

    ses_alpha: float = 0.5
    holt_alpha: float = 0.5
    holt_beta: float = 0.1
    damping: float = HOLT_DAMPING
    trend_lambda: float = 0.9


def ses_level(y: np.ndarray, alpha: float) -> np.ndarray:
    """Causal SES level after each observation, started at the first value."""
    if y.size == 0 or alpha >= 1.0:
        return np.asarray(y, dtype=float)
    d = y - y[0]
    out = lfilter([alpha], [1.0, alpha - 1.0], d)
    return np.asarray(out) + y[0]


def holt_state(
    y: np.ndarray, alpha: float, beta: float, phi: float
) -> tuple[np.ndarray, np.ndarray]:
    """(level, trend) of damped Holt after each observation.

    The recursion ``l = a y + (1-a)(l' + phi b')``, ``b = B (l - l') + (1-B) phi b'``
    is linear, and ``(l, b) = (y0, 0)`` is its steady state for a constant
    input ``y0``; so the path from that start is ``y0`` plus the zero-state
    response to ``y - y0``, two IIR filters with the same denominator.
    """
    if y.size == 0:
        return np.asarray(y, dtype=float), np.zeros(0)
    num_l, num_b, den = holt_filters(alpha, beta, phi)
    d = y - y[0]
    level, trend = _lfilter_pair(num_l, num_b, den, d)
    return level + y[0], trend


def _lfilter_pair(
    b_one: list[float], b_two: list[float], a: list[float], x: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(lfilter(b_one, a, x), lfilter(b_two, a, x))`` for two-tap numerators
    over one second-order denominator, in one pass: each filter's operations
    are :func:`lfilter`'s, in its order, so both paths are bit-equal to it.

    Why: damped Holt's level and trend share their input; one Python loop
    over the history instead of two saves a third of the smoothers' cost.
    """
    if len(a) != 3 or float(a[0]) != 1.0 or len(b_one) != 2 or len(b_two) != 2:
        raise ValueError("_lfilter_pair: two-tap numerators over [1, a1, a2] only")
    p0, p1, q0, q1 = float(b_one[0]), float(b_one[1]), float(b_two[0]), float(b_two[1])
    xs = np.asarray(x, dtype=float).tolist()
    one, two = two_tap_pair(p0, p1, q0, q1, float(a[1]), float(a[2]), xs)
    return np.array(one, dtype=float), np.array(two, dtype=float)


def damped_sum(h: int, phi: float) -> float:
    """sum_{i=1..h} phi^i: how far a damped trend carries over h steps."""
    if phi >= 1.0:
        return float(h)
    return phi * (1 - phi**h) / (1 - phi)


def trend_solve(
    a: np.ndarray, b: np.ndarray, w0: np.ndarray, w1: np.ndarray, w2: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(level, slope) of the weighted line ``y[t - j] ~ level - slope j``.

    ``a = sum w_j y``, ``b = sum w_j j y`` and ``w_m = sum w_j j^m``; with one
    point (or all weight on one) the slope is 0 and the level the weighted mean.
    Public so that :func:`trend_state`'s closed-form solve can be checked on
    its own against the line fitted from :func:`lfilter`'s sums.
    """
    det = w0 * w2 - w1 * w1
    ok = det > 1e-9 * np.maximum(w0 * w2, 1e-300)
    safe = np.where(ok, det, 1.0)
    level = np.where(ok, (w2 * a - w1 * b) / safe, a / w0)
    slope = np.where(ok, (w1 * a - w0 * b) / safe, 0.0)
    return level, slope


def trend_state(y: np.ndarray, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(level, slope) of the discounted least-squares line after each observation.

    The data sums are two causal filters: ``a_t = lam a_{t-1} + y_t`` and
    ``b_t = lam (b_{t-1} + a_{t-1})``; the weight sums depend on ``t`` only.
    The series is centred on its first value (the line is shift-equivariant),
    which keeps the sums small.
    """
    if y.size == 0:
        return np.asarray(y, dtype=float), np.zeros(0)
    y0 = float(y[0])
    d = np.asarray(y, dtype=float) - y0
    a, b = _trend_sums(lam, d)
    j = np.arange(y.size, dtype=float)
    pw = lam**j
    w0, w1, w2 = np.cumsum(pw), np.cumsum(pw * j), np.cumsum(pw * j * j)
    level, slope = trend_solve(a, b, w0, w1, w2)
    return level + y0, slope


def _trend_sums(lam: float, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(lfilter([1], [1, -lam], x), lfilter([0, lam], [1, -2 lam, lam^2], x))``
    in one pass, each with :func:`lfilter`'s operations in its order (bit-equal)."""
    first, second = trend_sums(float(lam), np.asarray(x, dtype=float).tolist())
    return np.array(first, dtype=float), np.array(second, dtype=float)


def trend_last(y: np.ndarray, lam: float) -> tuple[float, float]:
    """``trend_state(y[-TREND_MEMORY:], lam)`` at the last observation, by dot products.

    Equal to the filtered path up to rounding (the weights of older steps are
    below 3e-5 of the newest); costs microseconds on the hot path.
    """
    x = np.asarray(y[-TREND_MEMORY:], dtype=float)[::-1]
    if x.size == 0:
        return 0.0, 0.0
    y0 = float(x[-1])
    d = x - y0
    j = np.arange(x.size, dtype=float)
    pw = lam**j
    pwj = pw * j
    a, b = float(pw @ d), float(pwj @ d)
    w0, w1, w2 = float(pw.sum()), float(pwj.sum()), float((pwj * j).sum())
    # trend_solve's arithmetic on one origin, in floats (no 1-element arrays).
    det = w0 * w2 - w1 * w1
    if det > 1e-9 * max(w0 * w2, 1e-300):
        return (w2 * a - w1 * b) / det + y0, (w1 * a - w0 * b) / det
    return a / w0 + y0, 0.0


CANDIDATES: tuple[str, ...] = ("last", "ses", "holt", "trend")


class SmoothingBank:
    """The smoothers' paths over one history, computed once per parameter set.

    Lets each horizon pick its own parameters by the loss it is judged by
    (h-step absolute error) at the cost of one filter pass per grid point.
    """

    def __init__(self, y: np.ndarray) -> None:
        self.y = np.asarray(y, dtype=float)
        self._ses: dict[float, np.ndarray] = {}
        self._holt: dict[tuple[float, float], tuple[np.ndarray, np.ndarray]] = {}
        self._ses_end: dict[float, float] = {}
        self._holt_end: dict[tuple[float, float], tuple[float, float]] = {}
        self._trend: dict[float, tuple[np.ndarray, np.ndarray]] = {}
        self._trend_end: dict[float, tuple[float, float]] = {}
        self._selected: dict[tuple[int, int], SmoothingParams] = {}
        self._grid: tuple[np.ndarray, ...] | None = None
        self._errors: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def ses(self, alpha: float) -> np.ndarray:
        if alpha not in self._ses:
            self._ses[alpha] = ses_level(self.y, alpha)
        return self._ses[alpha]

    def holt(self, alpha: float, beta: float) -> tuple[np.ndarray, np.ndarray]:
        key = (alpha, beta)
        if key not in self._holt:
            self._holt[key] = holt_state(self.y, alpha, beta, HOLT_DAMPING)
        return self._holt[key]

    def trend(self, lam: float) -> tuple[np.ndarray, np.ndarray]:
        if lam not in self._trend:
            self._trend[lam] = trend_state(self.y, lam)
        return self._trend[lam]

    def select(self, h: int, end: int, min_independent_errors: float = 0.0) -> SmoothingParams:
        """Parameters minimising the h-step MAE over origins whose target is < ``end``.

        With fewer than ``min_independent_errors`` independent h-step errors
        (about ``(end - h) / h``), the one-step errors choose instead: a choice
        among 7 to 20 grid points made on a handful of errors picks the
        luckiest one, and the one-step errors are the most independent
        evidence a short history holds (the anchors' likelihood fits use them).
        """
        if h > 1 and max(end - h, 0) < min_independent_errors * h:
            h = 1
        key = (h, end)
        if key not in self._selected:
            self._selected[key] = self._select(h, end)
        return self._selected[key]

    def _select(self, h: int, end: int) -> SmoothingParams:
        """:meth:`select`'s grid search (remembered per ``(h, end)``: with few
        independent errors every horizon asks for the one-step choice).

        Each grid point's MAE is the mean of its absolute errors at origins
        ``0 .. end - h - 1``: a prefix of its errors at every origin, which
        :meth:`_grid_errors` computes once per horizon for all ends (the
        rolling holdout asks for up to ``holdout_refits`` of them), each row
        summed as ``np.mean`` sums one candidate's errors (bit-equal to
        scoring the candidates one by one).
        """
        m = max(end - h, 0)
        if m < 4:
            return SmoothingParams()
        if end > self.y.size:
            raise ValueError(f"select: end {end} beyond the history ({self.y.size} steps)")
        ses_mae, holt_mae, trend_mae = (
            np.mean(err[:, :m], axis=1).tolist() for err in self._grid_errors(h)
        )
        best_a, best = 0.5, math.inf
        for a, mae in zip(_SES_ALPHAS, ses_mae, strict=True):
            if mae < best:
                best_a, best = a, mae
        holt_keys = [(a, b) for a in _HOLT_ALPHAS for b in _HOLT_BETAS]
        best_h, best = (0.5, 0.1), math.inf
        for key, mae in zip(holt_keys, holt_mae, strict=True):
            if mae < best:
                best_h, best = key, mae
        best_l, best = 0.9, math.inf
        for lam, mae in zip(_TREND_LAMBDAS, trend_mae, strict=True):
            if mae < best:
                best_l, best = lam, mae
        return SmoothingParams(best_a, best_h[0], best_h[1], HOLT_DAMPING, best_l)

    def _grid_paths(self) -> tuple[np.ndarray, ...]:
        """Every grid point's path as one row of a matrix per smoother (rows in
        grid order): ``(ses, holt level, holt trend, trend level, trend slope)``.

        The per-parameter caches then hold views of these rows, so the paths
        are stored once.
        """
        if self._grid is None:
            n = self.y.size
            ses = np.empty((len(_SES_ALPHAS), n))
            for i, a in enumerate(_SES_ALPHAS):
                ses[i] = self.ses(a)
                self._ses[a] = ses[i]
            holt_keys = [(a, b) for a in _HOLT_ALPHAS for b in _HOLT_BETAS]
            level = np.empty((len(holt_keys), n))
            trend = np.empty((len(holt_keys), n))
            for i, key in enumerate(holt_keys):
                level[i], trend[i] = self.holt(*key)
                self._holt[key] = (level[i], trend[i])
            line = np.empty((len(_TREND_LAMBDAS), n))
            slope = np.empty((len(_TREND_LAMBDAS), n))
            for i, lam in enumerate(_TREND_LAMBDAS):
                line[i], slope[i] = self.trend(lam)
                self._trend[lam] = (line[i], slope[i])
            self._grid = (ses, level, trend, line, slope)
        return self._grid

    def _grid_errors(self, h: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Absolute h-step errors of every grid point at every origin
        ``0 .. n - h - 1`` (rows as in :meth:`_grid_paths`), kept per horizon
        up to :data:`ERRORS_KEPT_BYTES` (the oldest horizons go first): the
        holdout asks horizon by horizon, and the fit asks each again."""
        if h not in self._errors:
            ses, level, trend, line, slope = self._grid_paths()
            m = self.y.size - h
            actual = self.y[h:]
            holt = np.maximum(level[:, :m] + damped_sum(h, HOLT_DAMPING) * trend[:, :m], 0.0)
            lin = np.maximum(line[:, :m] + damped_sum(h, TREND_DAMPING) * slope[:, :m], 0.0)
            errors = (np.abs(actual - ses[:, :m]), np.abs(actual - holt), np.abs(actual - lin))
            size = sum(e.nbytes for e in errors)
            kept = sum(e.nbytes for err in self._errors.values() for e in err)
            for old in list(self._errors):
                if kept + size <= ERRORS_KEPT_BYTES:
                    break
                kept -= sum(e.nbytes for e in self._errors.pop(old))
            self._errors[h] = errors
        return self._errors[h]

    def forecasts(self, params: SmoothingParams, idx: np.ndarray, h: int) -> np.ndarray:
        """Forecasts for ``idx + h`` made at ``idx``: shape (len(CANDIDATES), n)."""
        lv, tr = self.holt(params.holt_alpha, params.holt_beta)
        holt = lv[idx] + damped_sum(h, params.damping) * tr[idx]
        tl, ts = self.trend(params.trend_lambda)
        carry = damped_sum(h, TREND_DAMPING)
        return np.vstack(
            [
                self.y[idx],
                self.ses(params.ses_alpha)[idx],
                np.maximum(holt, 0.0),
                np.maximum(tl[idx] + carry * ts[idx], 0.0),
            ]
        )

    def last_values(self, params: SmoothingParams, h: int) -> list[float]:
        """``forecasts(params, [n - 1], h)[:, 0]`` from the end state only: bit for
        bit for the recursive smoothers, to rounding for ``trend`` (see :func:`trend_last`).

        Why: predict reads only the smoothers' state after the last
        observation; this runs each filter once without materialising its
        path (and level and trend share one pass's input list). A list: the
        predictor prepends the ridge.
        """
        y = self.y
        n = y.size
        if n == 0:
            return [float(v) for v in self.forecasts(params, np.array([n - 1]), h)[:, 0]]
        y0 = y[0]
        d: list[float] | None = None
        a = params.ses_alpha
        if a in self._ses:
            ses = float(self._ses[a][-1])
        elif a not in self._ses_end:
            if a >= 1.0:
                self._ses_end[a] = float(y[-1])
            else:
                d = (y - y0).tolist()
                # lfilter's first-order loop (b1 padded to 0), its end only
                yn = first_order_last(float(a), float(a - 1.0), d)
                self._ses_end[a] = float(np.float64(yn) + y0)
            ses = self._ses_end[a]
        else:
            ses = self._ses_end[a]
        key = (params.holt_alpha, params.holt_beta)
        if key in self._holt:
            lv_path, tr_path = self._holt[key]
            lv, tr = float(lv_path[-1]), float(tr_path[-1])
        else:
            if key not in self._holt_end:
                num_l, num_b, den = holt_filters(key[0], key[1], HOLT_DAMPING)
                if d is None:
                    d = (y - y0).tolist()
                level_end, trend_end = _filter_last_pair(num_l, num_b, den, d)
                self._holt_end[key] = (float(np.float64(level_end) + y0), trend_end)
            lv, tr = self._holt_end[key]
        holt = lv + damped_sum(h, params.damping) * tr
        lam = params.trend_lambda
        if lam not in self._trend_end:
            self._trend_end[lam] = trend_last(y, lam)
        tl, ts = self._trend_end[lam]
        return [float(y[-1]), ses, max(holt, 0.0), max(tl + damped_sum(h, TREND_DAMPING) * ts, 0.0)]


def inverse_error_weights(abs_err: np.ndarray, power: float = 2.0) -> np.ndarray:
    """Weights proportional to MAE^-power over candidates (rows of ``abs_err``)."""
    mae = np.mean(abs_err, axis=1)
    mae = np.maximum(mae, 1e-12 * max(float(mae.max()), 1e-12))
    w = mae**-power
    return np.asarray(w / w.sum())


def simplex_grid(
    k: int, steps: int, memo: dict[tuple[int, int], np.ndarray] | None = None
) -> np.ndarray:
    """All weight vectors on the k-simplex with coordinates in 1/steps units.

    Each first coordinate ``i / steps`` is followed by the ``(k - 1)``-grid
    of ``steps - i`` scaled by ``(steps - i) / steps``; the sub-grids are
    built once each (``memo``) and scaled a block at a time, the same
    operations on the same values as row by row. Public because
    :func:`min_abs_error_weights` indexes it: its rows are part of that
    function's contract and are checked against the row-by-row build.
    """
    memo = {} if memo is None else memo
    key = (k, steps)
    if key not in memo:
        if k == 1:
            memo[key] = np.ones((1, 1))
            return memo[key]
        blocks = []
        for i in range(steps + 1):
            rest = simplex_grid(k - 1, steps - i, memo) if steps - i > 0 else np.zeros((1, k - 1))
            block = np.empty((rest.shape[0], k))
            block[:, 0] = i / steps
            block[:, 1:] = rest * (steps - i) / steps
            blocks.append(block)
        grid = np.unique(np.round(np.vstack(blocks), 9), axis=0)
        memo[key] = np.asarray(grid / grid.sum(axis=1, keepdims=True))
    return memo[key]


_GRID_CACHE: dict[tuple[int, int], np.ndarray] = {}


def min_abs_error_weights(forecasts: np.ndarray, actual: np.ndarray, steps: int = 10) -> np.ndarray:
    """Weights on a simplex grid minimising the holdout mean absolute error.

    Unlike inverse-error weights this accounts for correlated candidates (three
    near-identical smoothers do not outvote a better, different model), and it
    targets exactly the loss the median is judged by. The grid (steps of 0.1)
    is a coarse, regularising search: no weight is tuned finer than the
    evidence supports.
    """
    k = forecasts.shape[0]
    grid = _GRID_CACHE.get((k, steps))
    if grid is None:
        grid = simplex_grid(k, steps)
        _GRID_CACHE[(k, steps)] = grid
    err = grid @ forecasts
    np.subtract(actual[None, :], err, out=err)
    np.abs(err, out=err)
    mae = np.mean(err, axis=1)
    return np.asarray(grid[int(np.argmin(mae))])
