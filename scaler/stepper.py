"""One object's reading into its tracker, and the outcome to a sink.

The tracker is pure; the stepper feeds it a source's reading and hands each
live outcome to a :class:`StepSink` (telemetry and balloons). Replayed
history (a backfill) goes through the very same step without the sink, so a
restarted scaler answers as one that ran all along.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from decision.reading import Reading
from decision.tracker_data import TrackerStep
from scaler.registry import Entry, ObjectKey

__all__ = ["StepSink", "StepWork", "Stepper"]

log = logging.getLogger(__name__)

StepWork = tuple[Entry, Reading | None, int]
"""An object, its reading at the step's grid time (``None``: no new data),
and the generation it had when the reading was asked for."""


class StepSink(Protocol):
    """Where live steps go (``scaler.live_outputs.LiveOutputs``)."""

    def settled(self, entry: Entry) -> None:
        """A forecast bin of ``entry`` settled (its accuracy changed)."""
        ...

    def stepped(self, entry: Entry, step: TrackerStep, t: float) -> None:
        """``entry`` was decided at grid time ``t``."""
        ...


class Stepper:
    """Advances objects by one grid time, live or replayed.

    ``is_current(entry, generation)`` says whether a result may still be
    written to ``entry`` (``ObjectRegistry.is_current``).
    """

    def __init__(
        self,
        sink: StepSink,
        *,
        is_current: Callable[[Entry, int], bool],
    ) -> None:
        self.sink = sink
        self.is_current = is_current

    def step(
        self,
        entry: Entry,
        t: float,
        reading: Reading | None,
        now_s: float,
        *,
        live: bool,
        decide_it: bool = True,
    ) -> bool:
        """Advance one object to grid time ``t`` (a ``t`` it has passed is
        skipped); True when a burst starts. Only a ``live`` step reaches the
        sink; ``decide_it`` False feeds replayed history without deciding."""
        tracker = entry.tracker
        last = tracker.last_time_s
        if last is not None and t <= last:
            return False
        step = tracker.step(t, reading, now_s, decide=decide_it)
        if step is None:
            return False
        if live:
            if step.settled:
                self.sink.settled(entry)
            self.sink.stepped(entry, step, t)
        return step.burst

    def advance(self, work: Sequence[StepWork], t: float, now_s: float) -> list[ObjectKey]:
        """Advance many objects live to grid time ``t``; one failing is logged
        and skipped. Returns the objects whose burst started."""
        bursts: list[ObjectKey] = []
        for entry, reading, generation in work:
            if not self.is_current(entry, generation):
                continue  # re-registered meanwhile; its new entry backfills itself
            try:
                if self.step(entry, t, reading, now_s, live=True):
                    bursts.append(entry.key)
            except Exception:
                log.exception("updating %s/%s failed", *entry.key)
        return bursts
