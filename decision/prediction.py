"""The forecaster a tracker drives, and one forecast it asks for.

A request is plain data (what to fit, what to condition on, how far to
predict) so :func:`run_prediction` is a pure function of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

__all__ = [
    "ForecasterBackend",
    "ForecasterFactory",
    "PredictRequest",
    "Prediction",
    "run_prediction",
]


# ---------------------------------------------------------------- forecasters
class ForecasterBackend(Protocol):
    """The forecaster a tracker drives (``forecasting``'s models, or a
    stand-in a test gives)."""

    def fit(self, y: np.ndarray, step_s: float) -> None: ...

    def update(self, y: np.ndarray) -> None: ...

    def predict(self, horizon_steps: int, quantiles: Sequence[float] = ...) -> Any: ...


ForecasterFactory = Callable[[str], ForecasterBackend]


@dataclass(frozen=True)
class Prediction:
    """The latest forecast, per bin from ``origin_s`` (index i covers
    ``(origin + i step, origin + (i+1) step]``)."""

    origin_s: float
    step_s: float
    quantile: float
    upper: np.ndarray
    median: np.ndarray


@dataclass(frozen=True)
class PredictRequest:
    """One forecast to compute at a closed bin: refit on ``fit_y`` first when
    a refit boundary passed, then condition on ``y`` and predict ``steps``."""

    forecaster: ForecasterBackend
    origin_s: float
    lead_s: float
    boundary: float
    fit_y: np.ndarray | None
    y: np.ndarray
    steps: int
    step_s: float
    quantile: float  # the upper quantile the policy provisions for

    @property
    def quantiles(self) -> tuple[float, float]:
        """What to ask the forecaster for: the median and ``quantile``."""
        q = self.quantile
        return (0.5, q) if q > 0.5 else (q, 0.5)


def run_prediction(request: PredictRequest) -> Any:
    """The forecast ``request`` asks for, or the exception it raised (the
    tracker drops a failed forecast and refits at the next bin)."""
    try:
        if request.fit_y is not None:
            request.forecaster.fit(request.fit_y, request.step_s)
        request.forecaster.update(request.y)
        return request.forecaster.predict(request.steps, quantiles=request.quantiles)
    except Exception as exc:
        return exc
