"""What a long history costs prescaler's forecaster: only the ridge reads it all.

The smoothers and the member weights' holdout read the recent rows
(``smoother_rows``, ``holdout_rows``) and a long residual law is kept as its
percent grid (``law_grid_rows``), so that a fit on three days of 15 s bins
costs about what one on two hours did. Below those caps nothing changes; at
them the forecaster stays deterministic and its guard reads the same
quantiles.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from forecasting.prescaler.band import sorted_quantile
from forecasting.prescaler.model import PrescalerConfig, PrescalerForecaster

QUANTILES = (0.1, 0.5, 0.9)
UNCAPPED = PrescalerConfig(holdout_rows=10**9, smoother_rows=10**9, law_grid_rows=10**9)


def _series(seed: int, n: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    return rng.poisson(30 * (1 + 0.4 * np.sin(2 * np.pi * t / 96))).astype(float)


def _forecast(config: PrescalerConfig, y: np.ndarray, horizon: int = 15) -> np.ndarray:
    f = PrescalerForecaster(config)
    f.fit(y, 60.0)
    return f.predict(horizon, QUANTILES).values


def test_a_history_within_the_caps_forecasts_as_without_them() -> None:
    """600 rows: under every default cap, so the forecasts are the uncapped ones."""
    y = _series(4, 600)
    assert np.array_equal(_forecast(PrescalerConfig(), y), _forecast(UNCAPPED, y))


def test_capped_smoothers_and_holdout_are_deterministic_and_used() -> None:
    """With the caps below the history, two fits agree to the bit, the
    forecasts are ordered and finite, and they are not the uncapped ones
    (the caps are what the fit reads)."""
    y = _series(5, 600)
    capped = PrescalerConfig(holdout_rows=60, smoother_rows=150)
    first, second = _forecast(capped, y), _forecast(capped, y)
    assert np.array_equal(first, second)
    assert np.all(np.isfinite(first)) and np.all(np.diff(first, axis=0) >= 0)
    assert not np.array_equal(first, _forecast(UNCAPPED, y))


def test_a_long_residual_law_keeps_its_percent_grid_and_the_guard_quantiles() -> None:
    """A lazily fitted horizon (no holdout band) whose law holds more than
    ``law_grid_rows`` residuals keeps 101 values; the guard's 0.1 and 0.9
    quantiles are every residual's, so the medians do not move."""
    y = _series(6, 600)
    grid = PrescalerForecaster(PrescalerConfig(law_grid_rows=200))
    whole = PrescalerForecaster(PrescalerConfig(law_grid_rows=10**9))
    medians = []
    for f in (grid, whole):
        f.fit(y, 60.0)
        medians.append(f.predict(15, (0.5,)).values)
    kept, every = grid.ridge_residuals(14), whole.ridge_residuals(14)
    assert grid.holdout_band(14) is None
    assert kept is not None and every is not None
    assert kept.size == 101 < 200 < every.size
    for q in (0.1, 0.9):
        assert sorted_quantile(kept, q) == sorted_quantile(every, q)
    assert np.array_equal(medians[0], medians[1])


@pytest.mark.parametrize(
    ("key", "make"),
    [
        ("holdout_rows", lambda: PrescalerConfig(holdout_rows=0)),
        ("smoother_rows", lambda: PrescalerConfig(smoother_rows=0)),
        ("law_grid_rows", lambda: PrescalerConfig(law_grid_rows=0)),
    ],
)
def test_a_cap_below_one_row_is_refused_by_name(
    key: str, make: Callable[[], PrescalerConfig]
) -> None:
    with pytest.raises(ValueError, match=key):
        make()
