"""One live step of one object around its tracker, and the forecasts behind it.

The tracker is pure; this layer feeds it a source's reading, computes the
forecasts it asks for (in process, or in chunks in the forecast worker) and
hands the outcome to the outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from decision.prediction import PredictRequest, run_prediction
from decision.reading import Reading
from decision.tracker_data import Pending
from scaler.forecast_worker import ForecastWorker, ForecastWorkerError, RemoteForecaster
from scaler.live_entry import Entry
from scaler.live_outputs import LiveOutputs
from scaler.pacing import CpuPacer

__all__ = ["PREDICT_CHUNK", "LiveStep"]

PREDICT_CHUNK = 100
"""Forecasts per round trip to the worker: big enough that 1,000 objects
cost ten round trips, small enough that one message stays a few hundred KB."""


class LiveStep(LiveOutputs):
    """The layer of :class:`scaler.state.ScalerState` that advances one object
    by one grid time (live, replayed or caught up)."""

    _worker: ForecastWorker | None

    # ----------------------------------------------------------------- a step
    def _step(
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

        The tracker's phases (a live refresh runs each over all objects in
        turn, so the forecasts of every object go to the worker in one
        batch): ingest the reading, predict if a bin closed, decide.
        """
        pending = self._ingest(entry, t, reading, now_s, live=live, decide_it=decide_it)
        if pending is None:
            return False
        request = entry.tracker.prediction_request(pending)
        if request is not None:
            entry.tracker.finish_prediction(request, self._run_predictions([request])[0])
        return self._conclude(entry, pending, live=live)

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
            self._export_accuracy(entry)
        return pending

    def _conclude(self, entry: Entry, pending: Pending, *, live: bool) -> bool:
        """Decide (see ``Tracker.conclude``), then export and pre-warm if live."""
        step = entry.tracker.conclude(pending)
        if step is None:
            return False
        if live:
            self._export(entry, step)
            self._prewarm(entry, step, pending.t)
        return step.burst

    def _run_predictions(
        self, requests: Sequence[PredictRequest], pacer: CpuPacer | None = None
    ) -> list[Any]:
        """Each request's forecast, or the exception it raised. With the worker,
        one round trip per chunk of requests, not per object."""
        if not requests:
            return []
        if self._worker is not None:
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
                    out.extend(self._worker.batch(items))
                except ForecastWorkerError as exc:
                    out.extend([exc] * len(chunk))
            return out
        results: list[Any] = []
        for r in requests:
            if pacer is not None:
                pacer.tick()
            results.append(run_prediction(r))
        return results
