"""Paired block-bootstrap intervals of an MAE ratio."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forecasting.significance import block_length, mae_ratio_interval


def test_identical_errors_give_a_point_interval_at_one() -> None:
    e = np.random.default_rng(1).normal(size=200)
    iv = mae_ratio_interval(e, e.copy(), block=5)
    assert (iv.ratio, iv.low, iv.high) == (1.0, 1.0, 1.0)
    assert not iv.significantly_worse and not iv.significantly_better


def test_proportional_errors_give_their_exact_ratio() -> None:
    e = np.random.default_rng(2).exponential(size=150)
    iv = mae_ratio_interval(2.0 * e, e, block=7)
    assert iv.ratio == pytest.approx(2.0)
    assert iv.low == pytest.approx(2.0) and iv.high == pytest.approx(2.0)
    assert iv.significantly_worse


def test_a_clearly_worse_method_is_flagged_and_a_coin_flip_is_not() -> None:
    rng = np.random.default_rng(3)
    base = rng.normal(size=400)
    worse = mae_ratio_interval(base + rng.normal(scale=1.0, size=400), base * 0.0 + 0.5, block=5)
    assert worse.significantly_worse
    # Two methods with the same MAE whose errors fall at different origins.
    a = rng.normal(size=400)
    tie = mae_ratio_interval(a, rng.permutation(a), block=5)
    assert tie.ratio == pytest.approx(1.0)
    assert tie.low < 1.0 < tie.high
    assert not tie.significantly_worse and not tie.significantly_better


def test_overlapping_errors_widen_the_interval() -> None:
    """Errors that repeat over runs (as h-step errors of neighbouring origins do)
    hold fewer independent values: longer blocks must give a wider interval."""
    rng = np.random.default_rng(4)
    a = np.repeat(rng.normal(size=40), 10)
    b = np.repeat(rng.normal(size=40), 10)
    short = mae_ratio_interval(a, b, block=1)
    long = mae_ratio_interval(a, b, block=10)
    assert (long.high - long.low) > (short.high - short.low)


def test_block_length_covers_the_overlap_and_the_cube_root() -> None:
    assert block_length(400, 10) == 10
    assert block_length(400, 1) == 8  # ceil(400 ** (1/3)) = 8
    assert block_length(400, 20, stride=4) == 8
    assert block_length(15, 300) == 15  # never longer than the origins
    with pytest.raises(ValueError):
        block_length(0, 1)


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="one length"):
        mae_ratio_interval(np.ones(3), np.ones(4), block=1)
    with pytest.raises(ValueError, match="finite"):
        mae_ratio_interval(np.array([1.0, np.nan]), np.ones(2), block=1)
    with pytest.raises(ValueError, match="at least one"):
        mae_ratio_interval(np.ones(0), np.ones(0), block=1)
    with pytest.raises(ValueError, match="level"):
        mae_ratio_interval(np.ones(3), np.ones(3), block=1, level=1.0)


def test_perfect_methods_tie() -> None:
    iv = mae_ratio_interval(np.zeros(10), np.zeros(10), block=2)
    assert iv.ratio == 1.0 and iv.low == 1.0 and iv.high == 1.0


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(0.0, 100.0), min_size=3, max_size=60),
    st.lists(st.floats(0.01, 100.0), min_size=3, max_size=60),
    st.integers(1, 12),
)
def test_interval_is_ordered_and_reproducible(a: list[float], b: list[float], block: int) -> None:
    n = min(len(a), len(b))
    ea, eb = np.array(a[:n]), np.array(b[:n])
    iv = mae_ratio_interval(ea, eb, block=block, draws=200)
    assert iv.low <= iv.high
    assert iv.block == min(block, n) and iv.origins == n
    # Every draw is a ratio of sums of the same per-origin values, so the
    # interval lies within the per-origin extremes' envelope.
    assert iv.low >= 0.0
    assert mae_ratio_interval(ea, eb, block=block, draws=200) == iv


def test_mae_ratios_compare_one_method_with_every_other() -> None:
    from forecasting import DemandSeries
    from forecasting.backtest import backtest
    from forecasting.significance import mae_ratios

    y = 10 + np.sin(np.arange(300) / 7.0) + np.random.default_rng(6).normal(0, 0.3, 300)
    res = backtest(DemandSeries(0, 60, y, "requests_per_s", "t"), (3,), ["last_value", "kalman"])
    ratios = mae_ratios(res, 3, "last_value")
    assert set(ratios) == {"kalman"}
    assert ratios["kalman"].ratio == pytest.approx(
        res.scores[3]["last_value"].mae / res.scores[3]["kalman"].mae
    )
    assert ratios["kalman"].block == block_length(res.scores[3]["kalman"].origins, 3, res.stride)
    with pytest.raises(ValueError, match="not backtested"):
        mae_ratios(res, 3, "prescaler")


def test_pinball_ratios_are_the_scores_ratio_with_an_interval() -> None:
    """The point of each interval is the backtest's own pinball ratio at 0.9;
    a method against itself ties exactly; a bad q is refused."""
    from forecasting import DemandSeries
    from forecasting.backtest import backtest
    from forecasting.significance import pinball_ratios

    y = 10 + np.sin(np.arange(300) / 7.0) + np.random.default_rng(6).normal(0, 0.3, 300)
    res = backtest(DemandSeries(0, 60, y, "requests_per_s", "t"), (3,), ["last_value", "kalman"])
    ratios = pinball_ratios(res, 3, "kalman")
    sc = res.scores[3]
    iv = ratios["last_value"]
    assert iv.ratio == pytest.approx(sc["kalman"].pinball_p90 / sc["last_value"].pinball_p90)
    assert iv.low <= iv.ratio <= iv.high
    assert iv.block == block_length(sc["kalman"].origins, 3, res.stride)
    with pytest.raises(ValueError, match="q must be"):
        pinball_ratios(res, 3, "kalman", q=1.0)
    with pytest.raises(ValueError, match="not backtested"):
        pinball_ratios(res, 3, "prescaler")


def test_draws_against_a_perfect_stretch_give_an_infinite_end_not_nan() -> None:
    """Where ``b`` made no error over a whole resampled run, that draw's ratio
    is infinite; the interval must then end at infinity, never at NaN (the
    interpolation inf - inf), so that "worse" is still readable."""
    a = np.ones(60)
    b = np.zeros(60)
    b[:5] = 1.0  # b errs only at the first origins: most draws miss them
    iv = mae_ratio_interval(a, b, block=5, draws=500)
    assert iv.ratio == pytest.approx(12.0)
    assert not np.isnan(iv.low) and not np.isnan(iv.high)
    assert iv.high == np.inf and iv.low <= iv.ratio
    assert iv.significantly_worse


def test_rounding_dust_is_no_error() -> None:
    """A forecaster that goes through log/exp forecasts a constant series to a
    few ulps; against an exact method that is a tie, not an infinite ratio."""
    from forecasting import DemandSeries
    from forecasting.backtest import backtest
    from forecasting.significance import mae_ratios

    y = np.full(120, 5.0)
    res = backtest(DemandSeries(0, 60, y, "requests_per_s", "t"), (2,), ["prescaler", "last_value"])
    assert res.scores[2]["last_value"].mae == 0.0
    iv = mae_ratios(res, 2, "prescaler")["last_value"]
    assert (iv.ratio, iv.low, iv.high) == (1.0, 1.0, 1.0)
