"""The quantile blend bounds: exact in hindsight, blind to the future without."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forecasting.backtest import pinball
from tests.support.quantile_blend import hindsight_blend, walk_forward_blend


def test_an_exact_mix_of_two_forecasts_is_found() -> None:
    rng = np.random.default_rng(0)
    f = rng.uniform(0, 10, size=(60, 2))
    actual = 0.3 * f[:, 0] + 0.7 * f[:, 1]
    blend = hindsight_blend(actual, f, 0.9)
    assert blend.pinball == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(blend.weights, [0.3, 0.7], atol=1e-6)


def test_a_useless_column_gets_no_weight() -> None:
    rng = np.random.default_rng(1)
    actual = rng.uniform(0, 5, size=80)
    f = np.column_stack([actual + 0.01, np.full(80, 1e3)])
    blend = hindsight_blend(actual, f, 0.9)
    assert blend.weights[1] == pytest.approx(0.0, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 40),
    m=st.integers(1, 4),
    q=st.sampled_from([0.1, 0.5, 0.9]),
)
def test_the_blend_is_never_worse_than_its_best_column(seed: int, n: int, m: int, q: float) -> None:
    rng = np.random.default_rng(seed)
    actual = rng.exponential(3.0, size=n)
    f = rng.exponential(3.0, size=(n, m))
    blend = hindsight_blend(actual, f, q)
    best = min(pinball(actual, f[:, k], q) for k in range(m))
    assert blend.pinball <= best + 1e-9
    assert blend.weights.min() >= 0.0
    assert blend.weights.sum() == pytest.approx(1.0)
    assert blend.pinball == pytest.approx(pinball(actual, f @ blend.weights, q), abs=1e-9)


@pytest.mark.parametrize("refit_every", [1, 3])
def test_walk_forward_uses_only_targets_already_seen(refit_every: int) -> None:
    """For every origin, actuals at or after it (pushed far off) never move
    its forecast, whatever the refit cadence; the last target it has seen
    does move some origin's forecast once blending has begun."""
    rng = np.random.default_rng(2)
    n, h = 30, 3
    targets = np.arange(20, 20 + n) + h - 1
    origins = targets - h + 1
    actual = rng.uniform(0, 10, size=n)
    f = rng.uniform(0, 10, size=(n, 3))
    f[:, 2] *= 3.0  # a high column the pushed actuals would pull the blend to
    base = walk_forward_blend(actual, f, targets, h, 0.9, refit_every=refit_every, min_past=5)
    for j in range(n):
        future = targets >= origins[j]
        pushed = np.where(future, 1e6, actual)
        out = walk_forward_blend(pushed, f, targets, h, 0.9, refit_every=refit_every, min_past=5)
        assert out.forecast[j] == base.forecast[j], j
    moved = []
    for j in np.flatnonzero(base.blended).tolist():
        last_seen = targets == origins[j] - 1
        pushed = np.where(last_seen, 1e6, actual)
        out = walk_forward_blend(pushed, f, targets, h, 0.9, refit_every=refit_every, min_past=5)
        moved.append(out.forecast[j] != base.forecast[j])
    assert any(moved)


@pytest.mark.parametrize(("refit_every", "first_blended"), [(1, 9), (4, 12)])
def test_walk_forward_falls_back_until_enough_targets_are_seen(
    refit_every: int, first_blended: int
) -> None:
    """Origin j (history ``y[:j + 9]``) has seen targets 10 .. j + 8, that is
    j - 1 of them: 8 from j = 9 on, and a refit every 4 origins first blends
    at j = 12."""
    rng = np.random.default_rng(3)
    n, h = 30, 2
    targets = np.arange(n) + 10
    f = rng.uniform(0, 10, size=(n, 2))
    out = walk_forward_blend(
        rng.uniform(0, 10, size=n), f, targets, h, 0.9, min_past=8, fallback=1,
        refit_every=refit_every,
    )  # fmt: skip
    np.testing.assert_array_equal(out.blended, np.arange(n) >= first_blended)
    np.testing.assert_array_equal(out.forecast[:first_blended], f[:first_blended, 1])
    assert np.any(out.forecast[first_blended:] != f[first_blended:, 1])


def test_no_origins_have_no_loss() -> None:
    blend = hindsight_blend(np.empty(0), np.empty((0, 2)), 0.9)
    assert np.isnan(blend.pinball)
    assert blend.weights.sum() == pytest.approx(1.0)


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="finite"):
        hindsight_blend(np.array([1.0, np.nan]), np.ones((2, 1)), 0.9)
    with pytest.raises(ValueError, match=r"\(n, m >= 1\)"):
        hindsight_blend(np.ones(3), np.ones((2, 1)), 0.9)
    with pytest.raises(ValueError, match="quantile level"):
        hindsight_blend(np.ones(2), np.ones((2, 1)), 1.0)
    with pytest.raises(ValueError, match="fallback"):
        walk_forward_blend(np.ones(2), np.ones((2, 1)), np.arange(2), 1, 0.9, fallback=1)
