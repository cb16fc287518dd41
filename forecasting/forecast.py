"""The forecast value type and the forecaster protocol shared by every method.

A ``Forecast`` is plain immutable data so the scaler can hand it to the pure
policy, log it and export it without caring which model produced it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

MAX_DEMAND = 1e15
"""The largest demand value a history may hold (requests, tokens or counts
per step or per second). Why: no fleet serves a quadrillion tokens a second;
a value beyond it is a unit error or a corrupted sample, and past ~1e154 the
squared errors that weigh the combination overflow to inf and every forecast
turns NaN. One clear error at the boundary instead."""

DEFAULT_QUANTILES: tuple[float, ...] = (0.5, 0.9)


@dataclass(frozen=True, eq=False)
class Forecast:
    """Quantile forecasts of demand for ``horizon_steps`` future steps.

    ``values[i, h]`` is the ``quantiles[i]`` quantile of demand in the step that
    starts at ``origin + h * step_s`` and ends at ``origin + (h + 1) * step_s``,
    where the origin is the end of the last observed step. Values are never
    negative (demand) and are non-decreasing in the quantile (no crossing), which
    the constructor enforces so that no consumer ever has to repair them.
    """

    step_s: float
    horizon_steps: int
    quantiles: tuple[float, ...]
    values: np.ndarray

    def __post_init__(self) -> None:
        if not self.step_s > 0:
            raise ValueError(f"step_s must be > 0, got {self.step_s}")
        if self.horizon_steps < 1:
            raise ValueError(f"horizon_steps must be >= 1, got {self.horizon_steps}")
        qs = tuple(float(q) for q in self.quantiles)
        if not qs or any(not 0.0 < q < 1.0 for q in qs) or list(qs) != sorted(set(qs)):
            raise ValueError(f"quantiles must be strictly increasing in (0, 1), got {qs}")
        vals = np.asarray(self.values, dtype=float)
        if vals.shape != (len(qs), self.horizon_steps):
            raise ValueError(
                f"values must have shape {(len(qs), self.horizon_steps)}, got {vals.shape}"
            )
        if not np.all(np.isfinite(vals)):
            raise ValueError("forecast values must be finite")
        # Demand is never negative and quantiles never cross: repair once, here.
        vals = np.maximum.accumulate(np.maximum(vals, 0.0), axis=0)
        vals.setflags(write=False)
        object.__setattr__(self, "quantiles", qs)
        object.__setattr__(self, "values", vals)

    def quantile(self, q: float) -> np.ndarray:
        """Forecast of quantile ``q`` per step, shape ``(horizon_steps,)``.

        A quantile between two forecast ones is linearly interpolated; one
        outside their range is an error (extrapolating a tail is a guess).
        """
        qs = self.quantiles
        for i, known in enumerate(qs):
            if abs(known - q) < 1e-9:
                return np.asarray(self.values[i])
        if not qs[0] < q < qs[-1]:
            raise ValueError(f"quantile {q} not forecast; available: {list(qs)}")
        hi = int(np.searchsorted(qs, q))
        lo = hi - 1
        w = (q - qs[lo]) / (qs[hi] - qs[lo])
        return np.asarray((1 - w) * self.values[lo] + w * self.values[hi])

    @property
    def median(self) -> np.ndarray:
        """The 0.5 quantile (interpolated if it was not asked for explicitly)."""
        if 0.5 in self.quantiles or self.quantiles[0] < 0.5 < self.quantiles[-1]:
            return self.quantile(0.5)
        raise ValueError(f"median not forecast; available: {list(self.quantiles)}")


@runtime_checkable
class Forecaster(Protocol):
    """Fit on history, then predict quantiles over a horizon.

    ``fit`` receives an equally spaced, finite, non-negative history (cleaning
    happens before, in :mod:`forecasting.series`). ``update`` conditions an
    already fitted model on a longer history without re-estimating its
    parameters: the scaler refits in the background and updates on its hot path,
    and the backtest uses it between refits.
    """

    name: str

    def fit(self, y: np.ndarray, step_s: float) -> None: ...

    def update(self, y: np.ndarray) -> None: ...

    def predict(
        self, horizon_steps: int, quantiles: Sequence[float] = DEFAULT_QUANTILES
    ) -> Forecast: ...


def check_history(y: np.ndarray, step_s: float) -> np.ndarray:
    """Validate a history at the model boundary (one precise error, not NaN later)."""
    arr = np.asarray(y, dtype=float)
    if arr.ndim != 1:
        raise ValueError(f"history must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError("history is empty: at least one observation is needed")
    if not np.all(np.isfinite(arr)):
        raise ValueError(
            "history contains NaN or infinite values; clean it with forecasting.series"
        )
    if arr.max() > MAX_DEMAND:
        raise ValueError(
            f"history holds {arr.max():g}, above the largest plausible demand "
            f"{MAX_DEMAND:g} (a unit error or a corrupted sample?)"
        )
    if not step_s > 0:
        raise ValueError(f"step_s must be > 0, got {step_s}")
    return arr


def check_predict_args(horizon_steps: int, quantiles: Sequence[float]) -> tuple[float, ...]:
    if int(horizon_steps) != horizon_steps or horizon_steps < 1:
        raise ValueError(f"horizon_steps must be a positive integer, got {horizon_steps}")
    qs = tuple(sorted(float(q) for q in quantiles))
    if not qs or any(not 0.0 < q < 1.0 for q in qs):
        raise ValueError(f"quantiles must lie in (0, 1), got {list(quantiles)}")
    return tuple(dict.fromkeys(qs))


def point_forecast(point: np.ndarray, step_s: float, quantiles: Sequence[float]) -> Forecast:
    """A point forecast presented as quantiles: every quantile is the point.

    This is how the anchors' methods are scored: their point forecast is what
    they provision for, whatever quantile the caller asks about.
    """
    qs = check_predict_args(len(point), quantiles)
    p = np.asarray(point, dtype=float)
    p = np.where(np.isfinite(p), p, 0.0)
    return Forecast(step_s, len(p), qs, np.tile(p, (len(qs), 1)))


def daily_period(step_s: float) -> int:
    """Steps per day, or 0 when the step does not divide a day sensibly."""
    steps = 86400.0 / step_s
    if steps < 4 or abs(steps - round(steps)) > 1e-6:
        return 0
    return round(steps)
