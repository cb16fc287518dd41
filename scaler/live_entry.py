"""One live ScaledObject as the refresh loop keeps it.

Shared by every layer of the live loop (refresh, backfill, step, outputs).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from decision.policy import Decision, DemandForecast, Observation
from decision.prediction import Prediction
from decision.reading import Reading
from decision.settings import ScalerSettings
from decision.tracker import Tracker
from decision.tracker import observation_from as _tracker_observation
from scaler.sources import Selection, SourceSpec

__all__ = ["Entry", "ObjectKey", "observation_from"]

ObjectKey = tuple[str, str]


def observation_from(reading: Reading, now_s: float) -> Observation:
    """The policy's view of one reading (unknowns become NaN)."""
    return _tracker_observation(reading, now_s)


@dataclass
class Entry:
    """One ScaledObject: its tracker (the pure path to a decision) and the
    live loop's bookkeeping around it (source, subscribers, balloons)."""

    key: ObjectKey
    spec: SourceSpec
    selection: Selection
    tracker: Tracker
    ready: bool = False
    subscribers: set[asyncio.Queue[bool]] = field(default_factory=set)
    generation: int = 0
    balloons: int = 0
    balloons_applied: bool = False
    last_seen_s: float = field(default_factory=time.monotonic)

    @property
    def settings(self) -> ScalerSettings:
        return self.tracker.settings

    @property
    def decision(self) -> Decision:
        return self.tracker.decision

    @property
    def active(self) -> bool:
        return self.tracker.active

    @property
    def forecast(self) -> DemandForecast | None:
        return self.tracker.forecast

    @property
    def prediction(self) -> Prediction | None:
        return self.tracker.prediction

    @property
    def decisions(self) -> tuple[Decision, ...]:
        return self.tracker.decisions
