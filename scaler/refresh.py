"""One refresh: every source read once at a grid time, every ready object re-decided.

Reads are grouped per source (one query for all objects sharing a
Prometheus); the compute runs off the event loop, phase by phase across
objects, so all their forecasts go to the worker in one batch.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from decision.prediction import PredictRequest
from decision.reading import Reading
from decision.tracker_data import Pending
from scaler.live_entry import Entry, ObjectKey
from scaler.live_step import LiveStep
from scaler.pacing import CpuPacer
from scaler.sources import MetricSource, SourceFactory, SourceSpec

__all__ = ["RefreshLoop"]

# Logs under the live loop's name, as before this layer had a module of its own.
log = logging.getLogger("scaler.state")


class RefreshLoop(LiveStep):
    """The layer of :class:`scaler.state.ScalerState` that reads the sources and
    re-decides every ready object at a grid time."""

    _clock: Callable[[], float]
    _entries: dict[ObjectKey, Entry]
    _sources: dict[SourceSpec, MetricSource]
    _source_factory: SourceFactory
    _source_was_up: dict[SourceSpec, bool]
    _compute_pool: concurrent.futures.ThreadPoolExecutor
    _last_tick_s: float | None
    compute_share: float
    expire_after_s: float
    refreshes: int
    refresh_seconds: deque[float]

    if TYPE_CHECKING:

        def forget(self, namespace: str, name: str) -> None: ...

    def _source(self, spec: SourceSpec) -> MetricSource:
        source = self._sources.get(spec)
        if source is None:
            source = self._sources[spec] = self._source_factory(spec)
        return source

    def _source_label(self, spec: SourceSpec) -> str:
        return f"prometheus:{spec.address}" if spec.kind == "prometheus" else spec.kind

    async def _read(self, entries: Sequence[Entry], tick: float) -> dict[ObjectKey, Reading]:
        by_spec: dict[SourceSpec, list[Entry]] = {}
        for entry in entries:
            by_spec.setdefault(entry.spec, []).append(entry)
        specs = list(by_spec)
        answers = await asyncio.gather(
            *(
                self._source(spec).read(
                    list(dict.fromkeys(e.selection for e in by_spec[spec])), tick
                )
                for spec in specs
            ),
            return_exceptions=True,
        )
        readings: dict[ObjectKey, Reading] = {}
        for spec, answer in zip(specs, answers, strict=True):
            if isinstance(answer, BaseException):
                if isinstance(answer, asyncio.CancelledError):
                    raise answer
                self._source_health(spec, False, str(answer))
                continue
            complete = True
            for entry in by_spec[spec]:
                reading = answer.get(entry.selection)
                if reading is None:
                    complete = False
                else:
                    readings[entry.key] = reading
            self._source_health(spec, complete, "some objects got no reading")
        return readings

    def _source_health(self, spec: SourceSpec, up: bool, why: str) -> None:
        """``prescaler_source_up``, and a log line when it changes (not every refresh)."""
        label = self._source_label(spec)
        self.telemetry.set_source_up(label, up)
        if self._source_was_up.get(spec, True) != up:
            if up:
                log.info("source %s is back", label)
            else:
                log.warning("source %s failed: %s", label, why)
        self._source_was_up[spec] = up

    def _expire(self) -> None:
        """Forget objects KEDA stopped asking about (ScaledObject deleted)."""
        cutoff = time.monotonic() - self.expire_after_s
        for key in [k for k, e in self._entries.items() if e.last_seen_s < cutoff]:
            log.info("forgetting %s/%s: not polled for %.0f s", *key, self.expire_after_s)
            self.forget(*key)

    async def refresh(self, tick: float) -> None:
        """Read every source once at grid time ``tick`` and re-decide everything."""
        started = time.perf_counter()
        entries = [
            e
            for e in self._entries.values()
            if e.ready and (e.tracker.last_time_s is None or e.tracker.last_time_s < tick)
        ]
        self._last_tick_s = tick
        if not entries:
            return
        readings = await self._read(entries, tick)
        work = [(e, readings.get(e.key), e.generation) for e in entries]
        loop = asyncio.get_running_loop()
        bursts = await loop.run_in_executor(self._compute_pool, self._compute, work, tick)
        self._notify(bursts)
        self.refreshes += 1
        self.refresh_seconds.append(time.perf_counter() - started)
        if self.refreshes % 60 == 0:
            self._expire()

    def _notify(self, keys: Sequence[ObjectKey]) -> None:
        for key in keys:
            entry = self._entries.get(key)
            if entry is None:
                continue
            for queue in list(entry.subscribers):
                if not queue.full():
                    queue.put_nowait(True)

    def _compute(
        self, work: Sequence[tuple[Entry, Reading | None, int]], tick: float
    ) -> list[ObjectKey]:
        """One live refresh of many objects (see :meth:`_advance`)."""
        return self._advance(work, tick, self._clock(), CpuPacer(self.compute_share))

    def _advance(
        self,
        work: Sequence[tuple[Entry, Reading | None, int]],
        t: float,
        now: float,
        pacer: CpuPacer,
    ) -> list[ObjectKey]:
        """Advance many objects to grid time ``t``, phase by phase (see
        :meth:`_step`): the forecasts of every object whose bin closed go out
        in one batch, so 1,000 objects cost a few round trips to the worker,
        not 1,000. Objects are independent, so this is the same as stepping
        each in turn."""
        bursts: list[ObjectKey] = []
        staged: list[tuple[Entry, Pending]] = []
        requests: list[tuple[Entry, PredictRequest]] = []
        for entry, reading, generation in work:
            pacer.tick()
            if entry.generation != generation or self._entries.get(entry.key) is not entry:
                continue  # re-registered meanwhile; its new entry backfills itself
            try:
                pending = self._ingest(entry, t, reading, now, live=True)
                if pending is None:
                    continue
                request = entry.tracker.prediction_request(pending)
                if request is not None:
                    requests.append((entry, request))
                staged.append((entry, pending))
            except Exception:
                log.exception("updating %s/%s failed", *entry.key)
        results = self._run_predictions([r for _, r in requests], pacer)
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
