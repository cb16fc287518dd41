"""One object's reading into its tracker, the forecasts it asks for, and the
result to a sink.

The tracker is pure; the stepper feeds it a source's reading, computes the
forecasts it asks for (in this thread: under ``prescaler serve`` the whole
loop runs in the decider process, ``scaler.decider``) and hands each live
outcome to a :class:`StepSink` (telemetry and balloons).
Replayed history (a backfill) goes through the very same steps without the
sink, so a restarted scaler answers as one that ran all along.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from decision.prediction import PredictRequest, run_prediction
from decision.reading import Reading
from decision.tracker_data import Pending, TrackerStep
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
        """Advance one object to grid time ``t``; True when a burst starts.

        The tracker's phases: ingest the reading, predict if a bin closed,
        decide. Only a ``live`` step reaches the sink; ``decide_it`` False
        skips deciding (replayed history older than any decision that counts).
        """
        pending = self._ingest(entry, t, reading, now_s, live=live, decide_it=decide_it)
        if pending is None:
            return False
        request = entry.tracker.prediction_request(pending)
        if request is not None:
            entry.tracker.finish_prediction(request, self.predict([request])[0])
        return self._conclude(entry, pending, live=live)

    def advance(self, work: Sequence[StepWork], t: float, now_s: float) -> list[ObjectKey]:
        """Advance many objects live to grid time ``t``, phase by phase: the
        forecasts of every object whose bin closed go out in one batch, so
        1,000 objects cost a few round trips to the worker, not 1,000.
        Objects are independent, so this is the same as :meth:`step` on each
        in turn. Returns the objects whose burst started."""
        bursts: list[ObjectKey] = []
        staged: list[tuple[Entry, Pending]] = []
        requests: list[tuple[Entry, PredictRequest]] = []
        for entry, reading, generation in work:
            if not self.is_current(entry, generation):
                continue  # re-registered meanwhile; its new entry backfills itself
            try:
                pending = self._ingest(entry, t, reading, now_s, live=True)
                if pending is None:
                    continue
                request = entry.tracker.prediction_request(pending)
                if request is not None:
                    requests.append((entry, request))
                staged.append((entry, pending))
            except Exception:
                log.exception("updating %s/%s failed", *entry.key)
        results = self.predict([r for _, r in requests])
        for (entry, request), result in zip(requests, results, strict=True):
            try:
                entry.tracker.finish_prediction(request, result)
            except Exception:
                log.exception("forecast for %s/%s failed", *entry.key)
        for entry, pending in staged:
            try:
                if self._conclude(entry, pending, live=True):
                    bursts.append(entry.key)
            except Exception:
                log.exception("updating %s/%s failed", *entry.key)
        return bursts

    def predict(self, requests: Sequence[PredictRequest]) -> list[Any]:
        """Each request's forecast, or the exception it raised."""
        return [run_prediction(r) for r in requests]

    def _ingest(
        self,
        entry: Entry,
        t: float,
        reading: Reading | None,
        now_s: float,
        *,
        live: bool,
        decide_it: bool = True,
    ) -> Pending | None:
        """Take one reading into the object's tracker; ``None`` if ``t`` is old."""
        pending = entry.tracker.ingest(t, reading, now_s, decide=decide_it)
        if pending is not None and live and pending.settled:
            self.sink.settled(entry)
        return pending

    def _conclude(self, entry: Entry, pending: Pending, *, live: bool) -> bool:
        """Decide (see ``Tracker.conclude``), then hand the step to the sink if live."""
        step = entry.tracker.conclude(pending)
        if step is None:
            return False
        if live:
            self.sink.stepped(entry, step, pending.t)
        return step.burst
