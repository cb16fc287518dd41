"""One object's reading into its tracker, the forecasts it asks for, and the
result to a sink.

The tracker is pure; the stepper feeds it a source's reading, computes the
forecasts it asks for (in process, or in chunks in the forecast worker) and
hands each live outcome to a :class:`StepSink` (telemetry and balloons).
Replayed history (a backfill) goes through the very same steps without the
sink, so a restarted scaler answers as one that ran all along.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

from decision.prediction import PredictRequest, run_prediction
from decision.reading import Reading
from decision.tracker_data import Pending, TrackerStep
from scaler.forecast_worker import ForecastWorker, ForecastWorkerError, RemoteForecaster
from scaler.pacing import CpuPacer
from scaler.registry import Entry, ObjectKey

__all__ = ["PREDICT_CHUNK", "StepSink", "StepWork", "Stepper"]

log = logging.getLogger(__name__)

PREDICT_CHUNK = 100
"""Forecasts per round trip to the worker: big enough that 1,000 objects
cost ten round trips, small enough that one message stays a few hundred KB."""

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
    written to ``entry`` (``ObjectRegistry.is_current``); ``worker`` runs
    the forecasts in a child process (``None``: in this thread).
    """

    def __init__(
        self,
        sink: StepSink,
        *,
        is_current: Callable[[Entry, int], bool],
        worker: ForecastWorker | None = None,
    ) -> None:
        self.sink = sink
        self.is_current = is_current
        self.worker = worker

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

    def advance(
        self, work: Sequence[StepWork], t: float, now_s: float, pacer: CpuPacer
    ) -> list[ObjectKey]:
        """Advance many objects live to grid time ``t``, phase by phase: the
        forecasts of every object whose bin closed go out in one batch, so
        1,000 objects cost a few round trips to the worker, not 1,000.
        Objects are independent, so this is the same as :meth:`step` on each
        in turn. Returns the objects whose burst started."""
        bursts: list[ObjectKey] = []
        staged: list[tuple[Entry, Pending]] = []
        requests: list[tuple[Entry, PredictRequest]] = []
        for entry, reading, generation in work:
            pacer.tick()
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
        results = self.predict([r for _, r in requests], pacer)
        for (entry, request), result in zip(requests, results, strict=True):
            try:
                entry.tracker.finish_prediction(request, result)
            except Exception:
                log.exception("forecast for %s/%s failed", *entry.key)
        for entry, pending in staged:
            pacer.tick()
            try:
                if self._conclude(entry, pending, live=True):
                    bursts.append(entry.key)
            except Exception:
                log.exception("updating %s/%s failed", *entry.key)
        return bursts

    def predict(
        self, requests: Sequence[PredictRequest], pacer: CpuPacer | None = None
    ) -> list[Any]:
        """Each request's forecast, or the exception it raised. With the worker,
        one round trip per chunk of requests, not per object."""
        if not requests:
            return []
        if self.worker is not None:
            out: list[Any] = []
            for start in range(0, len(requests), PREDICT_CHUNK):
                chunk = requests[start : start + PREDICT_CHUNK]
                items = []
                for r in chunk:
                    remote = cast(RemoteForecaster, r.forecaster)
                    items.append(
                        (remote.fid, remote.method, r.fit_y, r.step_s, r.y, r.steps, r.quantiles)
                    )
                try:
                    out.extend(self.worker.batch(items))
                except ForecastWorkerError as exc:
                    out.extend([exc] * len(chunk))
            return out
        results: list[Any] = []
        for r in requests:
            if pacer is not None:
                pacer.tick()
            results.append(run_prediction(r))
        return results

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
