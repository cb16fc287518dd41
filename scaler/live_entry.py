"""One live ScaledObject as the refresh loop keeps it, and a source's reading
as the tracker's plain data.

Shared by every layer of the live loop (refresh, backfill, step, outputs);
the one place ``scaler.sources`` data becomes ``scaler.tracker`` data.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from scaler.policy import Decision, DemandForecast, Observation
from scaler.prediction import Prediction
from scaler.settings import ScalerSettings
from scaler.sources import Reading, Selection, SourceSpec
from scaler.tracker import Tracker
from scaler.tracker import observation_from as _tracker_observation
from scaler.tracker_data import TrackerReading

__all__ = ["Entry", "ObjectKey", "observation_from", "tracker_reading"]

ObjectKey = tuple[str, str]


def tracker_reading(reading: Reading) -> TrackerReading:
    """A source's reading as the tracker's plain data."""
    return TrackerReading(
        time_s=reading.time_s,
        ready_replicas=reading.ready_replicas,
        waiting=reading.waiting,
        running=reading.running,
        kv_usage=reading.kv_usage,
        arrival_rate_rps=reading.arrival_rate_rps,
        prompt_tokens_per_s=reading.prompt_tokens_per_s,
        generation_tokens_per_s=reading.generation_tokens_per_s,
        preemptions_per_s=reading.preemptions_per_s,
        completion_rate_rps=reading.completion_rate_rps,
        lead_time_samples_s=reading.lead_time_samples_s,
    )


def observation_from(reading: Reading, now_s: float) -> Observation:
    """The policy's view of one reading (unknowns become NaN)."""
    return _tracker_observation(tracker_reading(reading), now_s)


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
