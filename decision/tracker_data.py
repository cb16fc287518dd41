"""The plain data a :class:`decision.tracker.Tracker` takes and gives.

Kept apart from the tracker's state machine so the live loop, the simulator
and the tests share frozen, plain types: cadences in (readings are
``decision.reading.Reading``) and the step's outcome out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from decision.policy import Decision, DemandForecast, Observation, ReplicaCapacity

__all__ = ["DEFAULT_FIT_WINDOW_S", "MIN_FIT_BINS", "TrackerConfig", "TrackerStep"]

MIN_FIT_BINS = 8
"""Fewer closed bins than this and no forecast is made (the policy then
works on live signals alone)."""

DEFAULT_FIT_WINDOW_S = 3 * 86400.0
"""The history a fit sees by default: three days. The forecaster adds its
daily seasonal terms only with two full days in the history
(``forecasting.prescaler.model``), so a window of a few hours never learns
that a burst comes at 09:00 every day; three days give two full cycles
with a day's margin for a restart or a gap. What it costs (refit time,
memory) and buys (accuracy at 2.5-15 min): ``docs/decisions/fit-window.md``."""


@dataclass(frozen=True)
class TrackerConfig:
    """Cadences shared by every tracker of one scaler (seconds).

    ``forecast_step_s`` (default max(15, refresh)) must be a multiple of the
    refresh: a bin then always ends on a refresh, and predicting per bin
    rather than per refresh keeps 1,000 forecasters affordable.
    ``fit_window_s`` is the history a fit sees (default
    :data:`DEFAULT_FIT_WINDOW_S`, 3 days); ``capacity_window_s`` the span of
    saturated samples (ending at the newest) whose median is the learned
    capacity, kept for the fit window so a fleet that idles between events
    still knows it. ``speed`` is model seconds per second of
    the readings' clock (1 in production; the stack runs replicas ``speed``
    times faster, so a profile's capacity per clock second is ``speed`` x):
    see :func:`decision.capacity.capacity_for`.
    """

    refresh_interval_s: float = 5.0
    refit_interval_s: float = 600.0
    forecast_step_s: float | None = None
    fit_window_s: float = DEFAULT_FIT_WINDOW_S
    capacity_window_s: float = 3600.0
    speed: float = 1.0

    def __post_init__(self) -> None:
        if not self.refresh_interval_s > 0:
            raise ValueError(f"refresh_interval_s must be > 0, got {self.refresh_interval_s}")
        if not self.refit_interval_s > 0:
            raise ValueError(f"refit_interval_s must be > 0, got {self.refit_interval_s}")
        step = self.step_s
        ratio = step / self.refresh_interval_s
        if not step > 0 or abs(ratio - round(ratio)) > 1e-9:
            raise ValueError(
                f"forecast_step_s ({step}) must be a positive multiple of "
                f"refresh_interval_s ({self.refresh_interval_s})"
            )
        if not self.fit_window_s > 0:
            raise ValueError(f"fit_window_s must be > 0, got {self.fit_window_s}")
        if not self.capacity_window_s > 0:
            raise ValueError(f"capacity_window_s must be > 0, got {self.capacity_window_s}")
        if not (self.speed > 0 and math.isfinite(self.speed)):
            raise ValueError(f"speed must be a finite number > 0, got {self.speed}")

    @property
    def step_s(self) -> float:
        """The forecast bin width in effect."""
        if self.forecast_step_s is not None:
            return float(self.forecast_step_s)
        return max(15.0, float(self.refresh_interval_s))

    @property
    def fit_bins(self) -> int:
        """Bins a fit sees (at least ``MIN_FIT_BINS``)."""
        return max(MIN_FIT_BINS, int(self.fit_window_s / self.step_s))


# ------------------------------------------------------------------ data out
@dataclass(frozen=True)
class TrackerStep:
    """The outcome of one step: the decision and what it was made from.

    ``active`` is KEDA's IsActive; ``burst`` that a burst started (push it);
    ``observation`` is None when the reading was missing or held as an
    outage; ``capacity`` is the per-replica capacity the decision used.
    """

    decision: Decision
    forecast: DemandForecast | None
    active: bool
    burst: bool
    lead_s: float
    capacity: ReplicaCapacity
    observation: Observation | None
    settled: bool = False
    """The accuracy ledger settled forecasts at this step (export them)."""
