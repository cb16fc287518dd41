"""The smoothers' recursive loops, on plain lists of floats.

Why a module of its own: these loops run once per smoother per prediction
over up to a few thousand points, the forecaster's largest pure-Python cost
(the simulator's predictive policy predicts on every poll). Kept free of
numpy and typed, they compile with mypyc (``make native``) to C loops with the very same
floating-point operations in the same order, so results are bit-identical
compiled or not. Each loop is direct form II transposed with
``scipy.signal.lfilter``'s order of operations; the padded zero taps are
multiplied, not skipped, because ``x * 0.0`` is not always ``0.0`` (NaN, inf,
signed zeros).
"""

from __future__ import annotations


def first_order(b0: float, b1: float, a1: float, xs: list[float]) -> list[float]:
    """``lfilter([b0, b1], [1, a1], xs)``."""
    out = [0.0] * len(xs)
    z = 0.0
    for i in range(len(xs)):
        xn = xs[i]
        yn = z + b0 * xn
        z = xn * b1 - yn * a1
        out[i] = yn
    return out


def second_order(
    b0: float, b1: float, b2: float, a1: float, a2: float, xs: list[float]
) -> list[float]:
    """``lfilter([b0, b1, b2], [1, a1, a2], xs)``."""
    out = [0.0] * len(xs)
    z0 = 0.0
    z1 = 0.0
    for i in range(len(xs)):
        xn = xs[i]
        yn = z0 + b0 * xn
        z0 = z1 + xn * b1 - yn * a1
        z1 = xn * b2 - yn * a2
        out[i] = yn
    return out


def first_order_last(b0: float, a1: float, xs: list[float]) -> float:
    """``lfilter([b0], [1, a1], xs)[-1]`` (0.0 for no input), without the path."""
    z = 0.0
    yn = 0.0
    for xn in xs:
        yn = z + b0 * xn
        z = xn * 0.0 - yn * a1
    return yn


def two_tap_pair(
    p0: float, p1: float, q0: float, q1: float, a1: float, a2: float, xs: list[float]
) -> tuple[list[float], list[float]]:
    """``(lfilter([p0, p1], [1, a1, a2], xs), lfilter([q0, q1], [1, a1, a2], xs))``
    in one pass (damped Holt's level and trend share their input)."""
    zero = 0.0  # the numerators' padded third tap
    u0 = 0.0
    u1 = 0.0
    v0 = 0.0
    v1 = 0.0
    one = [0.0] * len(xs)
    two = [0.0] * len(xs)
    for i in range(len(xs)):
        xn = xs[i]
        yn = u0 + p0 * xn
        u0 = u1 + xn * p1 - yn * a1
        u1 = xn * zero - yn * a2
        one[i] = yn
        yn = v0 + q0 * xn
        v0 = v1 + xn * q1 - yn * a1
        v1 = xn * zero - yn * a2
        two[i] = yn
    return one, two


def two_tap_pair_last(
    p0: float, p1: float, q0: float, q1: float, a1: float, a2: float, xs: list[float]
) -> tuple[float, float]:
    """:func:`two_tap_pair`'s last values (0.0, 0.0 for no input), without the paths."""
    zero = 0.0
    u0 = 0.0
    u1 = 0.0
    v0 = 0.0
    v1 = 0.0
    one = 0.0
    two = 0.0
    for xn in xs:
        one = u0 + p0 * xn
        u0 = u1 + xn * p1 - one * a1
        u1 = xn * zero - one * a2
        two = v0 + q0 * xn
        v0 = v1 + xn * q1 - two * a1
        v1 = xn * zero - two * a2
    return one, two


def trend_sums(lam: float, xs: list[float]) -> tuple[list[float], list[float]]:
    """``(lfilter([1], [1, -lam], xs), lfilter([0, lam], [1, -2 lam, lam^2], xs))``
    in one pass: the discounted least-squares line's two data sums."""
    a1 = -lam
    c1 = lam
    c2 = -2.0 * lam
    c3 = lam * lam
    zero = 0.0  # lfilter's padded taps: b = [1, 0] and [0, lam, 0]
    one = 1.0
    w = 0.0
    s0 = 0.0
    s1 = 0.0
    first = [0.0] * len(xs)
    second = [0.0] * len(xs)
    for i in range(len(xs)):
        xn = xs[i]
        yn = w + one * xn
        w = xn * zero - yn * a1
        first[i] = yn
        yn = s0 + zero * xn
        s0 = s1 + xn * c1 - yn * c2
        s1 = xn * zero - yn * c3
        second[i] = yn
    return first, second
