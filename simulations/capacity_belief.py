"""The predictive scaler's per-replica capacity as a belief, apart from the engine's truth.

In the simulator the scaler's profile and the serving engine are the same
model, so its capacity would be exact by construction, while live the
profile is off by tens of percent. :class:`BelievingTracker` makes that
error an input (``capacity_error``), or sizes with what it learned at
saturated moments (``learned_capacity``), while the replicas run the truth.
"""

from __future__ import annotations

import math

from decision.policy import ReplicaCapacity
from decision.tracker import Tracker

__all__ = ["BelievingTracker"]


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


class BelievingTracker(Tracker):
    """A :class:`~decision.tracker.Tracker` whose configured capacity is off by a
    stated factor, or replaced by its learned one (see the module docstring).
    Both settings are set before the first step; at their defaults it is the
    plain tracker, bit for bit."""

    capacity_error: float = 0.0
    learned_capacity: bool = False

    def believe(self, *, capacity_error: float, learned_capacity: bool) -> None:
        """Set the belief (validated: the scaler cannot believe a capacity <= 0)."""
        if not (math.isfinite(capacity_error) and capacity_error > -1.0):
            raise ValueError(f"capacity_error must be a finite number > -1, got {capacity_error!r}")
        self.capacity_error = float(capacity_error)
        self.learned_capacity = bool(learned_capacity)

    def capacity(self, now_s: float) -> ReplicaCapacity:
        if self.learned_capacity:
            requests, tokens = self.capacity_learner.estimate(now_s)
            return ReplicaCapacity(requests_per_s=requests, tokens_per_s=tokens)
        truth = super().capacity(now_s)
        if self.capacity_error == 0.0:
            return truth
        settings = self.settings
        if settings.profile is None and settings.capacity_tokens_per_second is None:
            return truth  # learned already: measured, not believed
        factor = 1.0 + self.capacity_error
        return ReplicaCapacity(
            requests_per_s=_scaled(truth.requests_per_s, factor),
            tokens_per_s=_scaled(truth.tokens_per_s, factor),
        )
