"""Per-ScaledObject state: history, background refresh, forecaster refits.

The gRPC handlers call ``decision``/``is_active`` and get an answer from
memory, in microseconds, whatever Prometheus is doing. All the work happens
in one background task:

- Every ``refresh_interval_s`` (on a grid of wall-clock multiples, evaluated
  ``query_delay_s`` late so every sample up to the grid point has landed),
  each source is read ONCE for all its ScaledObjects (``scaler.sources``).
- The readings are turned into observations, forecast bins, forecasts and
  decisions in a single worker thread (``_compute``), off the event loop,
  by one ``scaler.tracker.Tracker`` per object: the pure path from a
  reading to a decision, which the simulator runs too. This module keeps the
  I/O around it (sources, the forecast worker, telemetry, balloons).
- A forecaster is refitted at per-object boundaries every
  ``refit_interval_s`` (staggered by a hash of the object's name so 1,000
  objects do not refit in the same refresh) on the bins up to that boundary;
  in between, each closed bin conditions it (``update``) and predicts again.
- A newly registered object backfills its history with one range query per
  signal (for all new objects of a Prometheus together) and replays the last
  stabilization window through the very same code. Everything is a function
  of Prometheus data at grid times, so two scaler replicas, or a restarted
  one, give the same answers: the scaler is stateless.

When a source fails the object gets no observation: ``decide`` holds the last
answer (``stale_hold``) and after ``fallbackAfterSeconds`` answers the
fallback; ``prescaler_source_up`` drops to 0. Never a scale-down on bad data.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import gc
import logging
import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from scaler.forecast_worker import ForecastWorker, ForecastWorkerError, RemoteForecaster
from scaler.policy import Decision, DemandForecast, Observation
from scaler.settings import ScalerSettings
from scaler.sources import (
    History,
    MetricSource,
    Reading,
    Selection,
    SourceFactory,
    SourceSpec,
    default_source_factory,
    selection_for,
)
from scaler.telemetry import ScalerTelemetry
from scaler.tracker import (
    DEFAULT_LEAD_TIME_S,
    SIGNAL,
    Pending,
    Prediction,
    PredictRequest,
    Tracker,
    TrackerConfig,
    TrackerReading,
    TrackerStep,
    run_prediction,
    warming_decision,
)
from scaler.tracker import observation_from as _tracker_observation

__all__ = ["DEFAULT_LEAD_TIME_S", "CpuPacer", "ScalerState", "observation_from", "tracker_reading"]

log = logging.getLogger(__name__)

BACKFILL_CHUNK = 100

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
class _Entry:
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


COMPUTE_NICE = 5
"""Niceness added to the compute thread (Linux: per thread). The threads
that answer KEDA (the compiled front's, the event loop) run first when the
node is busy; a refresh has seconds of slack."""


def _lower_priority() -> None:
    with contextlib.suppress(AttributeError, OSError):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + COMPUTE_NICE)


MAX_CATCH_UP_S = 600.0
"""The longest stretch of missed refreshes that is replayed tick by tick."""

PREDICT_CHUNK = 100
"""Forecasts per round trip to the worker: big enough that 1,000 objects
cost ten round trips, small enough that one message stays a few hundred KB."""


class CpuPacer:
    """Caps the share of the interpreter a background thread takes.

    Why: the compute thread and the gRPC handlers share one GIL, which
    Python hands over every switch interval, so a busy compute thread takes
    about half of the interpreter while it runs and RPCs queue behind it
    (with 1,000 objects a refresh was ~0.16 s of Python and KEDA's latency
    spiked by 50-130 ms at every refresh). Refresh work has seconds of slack (until
    the next refresh); an RPC has milliseconds. So after every ``slice_s`` of
    its own CPU time the thread sleeps long enough to use at most ``share``
    of the interpreter. Waiting on the forecast worker is not CPU time and is
    not paced. ``share`` 1 disables it.
    """

    def __init__(
        self,
        share: float,
        slice_s: float = 0.002,
        *,
        cpu: Callable[[], float] = time.thread_time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {share}")
        self.share = share
        self.slice_s = slice_s
        self._cpu = cpu
        self._sleep = sleep
        self._mark = cpu()

    def tick(self) -> None:
        if self.share >= 1:
            return
        used = self._cpu() - self._mark
        if used >= self.slice_s:
            pause = used * (1 - self.share) / self.share
            self._sleep(pause)
            self._mark = self._cpu()


class ScalerState:
    """Histories, forecasts and decisions of every registered ScaledObject.

    Parameters (seconds unless said):

    - ``refresh_interval_s``: how often every source is read (grid step).
    - ``refit_interval_s``: how often each forecaster is refitted (default
      10 min: between refits each closed bin conditions it through
      ``update``; a refit is ~90 ms of CPU, so 1,000 objects refitting every
      10 min cost ~0.15 core, every 5 min twice that).
    - ``forecast_step_s``: forecast bin width, a multiple of the refresh
      (default max(15, refresh)): predicting per bin, not per refresh, keeps
      1,000 forecasters affordable.
    - ``fit_window_s``: history a fit sees (default 2 h: minutes-ahead
      forecasts gain little from more, and 1,000 forecasters stay within
      memory: ~65 KB each at 2 h); backfill reads this
      plus one refit interval and the stabilization window.
    - ``query_delay_s``: how far behind the grid time reads happen, so every
      sample up to it has landed in Prometheus (identical answers for all
      replicas of the scaler).
    - ``capacity_window_s``: how long learned per-replica capacity is kept.
    - ``source_factory``: ``SourceSpec -> MetricSource`` (tests inject fakes;
      default: real Prometheus / scrape / Kubernetes sources).
    - ``balloon_controller``: ``scaler.sources.balloon.BalloonController``-like
      (``apply(namespace, deployment, replicas)``), created on first use.
    - ``expire_after_s``: objects no RPC asked about for this long are dropped.
    - ``forecast_worker``: fit and predict in a child process
      (``scaler.forecast_worker``) instead of the compute thread, so the
      numeric work never holds the GIL the gRPC handlers need. ``prescaler
      serve`` turns it on; the default (off) keeps library use and tests
      single-process. Decisions are the same either way.
    - ``compute_share``: the most of the interpreter the refresh's compute
      thread takes while RPCs are served (``CpuPacer``); 1 = unpaced.
    """

    def __init__(
        self,
        *,
        telemetry: ScalerTelemetry,
        refresh_interval_s: float = 5.0,
        refit_interval_s: float = 600.0,
        clock: Callable[[], float] = time.time,
        source_factory: SourceFactory | None = None,
        forecast_step_s: float | None = None,
        fit_window_s: float = 2 * 3600.0,
        query_delay_s: float = 1.0,
        capacity_window_s: float = 3600.0,
        balloon_controller: Any = None,
        expire_after_s: float = 3600.0,
        forecast_worker: bool = False,
        compute_share: float = 0.25,
    ) -> None:
        self.tracker_config = TrackerConfig(
            refresh_interval_s=float(refresh_interval_s),
            refit_interval_s=float(refit_interval_s),
            forecast_step_s=forecast_step_s,
            fit_window_s=float(fit_window_s),
            capacity_window_s=float(capacity_window_s),
        )
        self.telemetry = telemetry
        self.refresh_interval_s = float(refresh_interval_s)
        self.refit_interval_s = float(refit_interval_s)
        self.forecast_step_s = self.tracker_config.step_s
        self.fit_bins = self.tracker_config.fit_bins
        self.query_delay_s = float(query_delay_s)
        self.capacity_window_s = float(capacity_window_s)
        self._clock = clock
        self._source_factory = source_factory or default_source_factory()
        self._balloon_controller = balloon_controller
        self.expire_after_s = float(expire_after_s)
        self._source_was_up: dict[SourceSpec, bool] = {}
        self._worker: ForecastWorker | None = ForecastWorker() if forecast_worker else None
        if not 0 < compute_share <= 1:
            raise ValueError(f"compute_share must be in (0, 1], got {compute_share}")
        self.compute_share = float(compute_share)
        self._balloon_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="prescaler-balloon"
        )
        self._sources: dict[SourceSpec, MetricSource] = {}
        self._entries: dict[ObjectKey, _Entry] = {}
        self._pending_backfill: set[ObjectKey] = set()
        self._compute_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="prescaler-state", initializer=_lower_priority
        )
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._last_tick_s: float | None = None
        self.refreshes = 0
        self.refresh_seconds: deque[float] = deque(maxlen=1000)

    # ------------------------------------------------------------ the RPC side
    def register(self, namespace: str, name: str, settings: ScalerSettings) -> None:
        """Start tracking a ScaledObject (idempotent; new settings replace old)."""
        key = (namespace, name)
        entry = self._entries.get(key)
        if entry is not None and (entry.settings is settings or entry.settings == settings):
            entry.last_seen_s = time.monotonic()
            return
        spec, selection = selection_for(settings, namespace)
        if entry is not None and entry.spec == spec and entry.selection == selection:
            entry.tracker.update_settings(settings)
            return
        tracker = Tracker(
            key,
            settings,
            self.tracker_config,
            self._worker.forecaster if self._worker is not None else None,
            initial=warming_decision(settings, self._clock()) if entry is None else entry.decision,
            active=entry.active if entry is not None else None,
        )
        new = _Entry(
            key=key,
            spec=spec,
            selection=selection,
            tracker=tracker,
            subscribers=entry.subscribers if entry is not None else set(),
            generation=(entry.generation + 1) if entry is not None else 0,
        )
        self._entries[key] = new
        self._pending_backfill.add(key)
        if self._wake is not None and self._loop is not None:
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is self._loop:
                self._wake.set()
            else:
                self._loop.call_soon_threadsafe(self._wake.set)

    def decision(self, namespace: str, name: str) -> Decision:
        """The latest decision (from memory; never blocks). ``KeyError`` if unknown."""
        return self._entries[(namespace, name)].decision

    def is_active(self, namespace: str, name: str) -> bool:
        return self._entries[(namespace, name)].active

    def registered(self) -> list[ObjectKey]:
        return list(self._entries)

    def subscribe_active(self, namespace: str, name: str) -> asyncio.Queue[bool]:
        """A queue that receives ``True`` each time a burst starts."""
        queue: asyncio.Queue[bool] = asyncio.Queue(maxsize=16)
        self._entries[(namespace, name)].subscribers.add(queue)
        return queue

    def unsubscribe_active(self, namespace: str, name: str, queue: asyncio.Queue[bool]) -> None:
        entry = self._entries.get((namespace, name))
        if entry is not None:
            entry.subscribers.discard(queue)

    def forget(self, namespace: str, name: str) -> None:
        """Stop tracking a ScaledObject (deleted) and drop its metrics."""
        self._entries.pop((namespace, name), None)
        self._pending_backfill.discard((namespace, name))
        self.telemetry.forget(namespace, name)

    # ------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        if self._task is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        # The compute thread shares the GIL with the gRPC handlers; a short
        # switch interval bounds how long a handler waits for it.
        sys.setswitchinterval(min(sys.getswitchinterval(), 0.001))
        self._task = asyncio.create_task(self._run(), name="prescaler-refresh")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for source in list(self._sources.values()):
            try:
                await source.close()
            except Exception:  # closing is best effort
                log.debug("closing source failed", exc_info=True)
        self._sources.clear()
        self._compute_pool.shutdown(wait=False, cancel_futures=True)
        self._balloon_pool.shutdown(wait=False, cancel_futures=True)
        if self._worker is not None:
            await asyncio.to_thread(self._worker.close)

    def _grid(self, now_s: float) -> float:
        """The latest grid time whose samples have surely landed."""
        step = self.refresh_interval_s
        return math.floor(round((now_s - self.query_delay_s) / step, 9)) * step

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            try:
                tick = self._grid(self._clock())
                if self._pending_backfill:
                    await self._backfill(tick)
                if (
                    self._last_tick_s is not None
                    and tick - self._last_tick_s > 1.5 * self.refresh_interval_s
                ):
                    await self._catch_up(self._last_tick_s, tick)
                if self._last_tick_s is None or tick > self._last_tick_s:
                    await self.refresh(tick)
                next_tick = (self._last_tick_s or tick) + self.refresh_interval_s
                delay = next_tick + self.query_delay_s - self._clock()
                self._wake.clear()
                if delay > 0 and not self._pending_backfill:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), timeout=delay)
            except asyncio.CancelledError:
                raise
            except Exception:  # never let the loop die: log and try next tick
                log.exception("refresh failed")
                await asyncio.sleep(self.refresh_interval_s)

    def _source(self, spec: SourceSpec) -> MetricSource:
        source = self._sources.get(spec)
        if source is None:
            source = self._sources[spec] = self._source_factory(spec)
        return source

    def _source_label(self, spec: SourceSpec) -> str:
        return f"prometheus:{spec.address}" if spec.kind == "prometheus" else spec.kind

    # --------------------------------------------------------------- refresh
    async def _read(self, entries: Sequence[_Entry], tick: float) -> dict[ObjectKey, Reading]:
        by_spec: dict[SourceSpec, list[_Entry]] = {}
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
        self, work: Sequence[tuple[_Entry, Reading | None, int]], tick: float
    ) -> list[ObjectKey]:
        """One live refresh of many objects (see :meth:`_advance`)."""
        return self._advance(work, tick, self._clock(), CpuPacer(self.compute_share))

    def _advance(
        self,
        work: Sequence[tuple[_Entry, Reading | None, int]],
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
        staged: list[tuple[_Entry, Pending]] = []
        requests: list[tuple[_Entry, PredictRequest]] = []
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

    def _fill(self, work: Sequence[tuple[_Entry, list[Reading], int]], tick: float) -> None:
        """Missed refreshes, tick by tick across all objects (each tick's
        forecasts in one batch), exported like live ones."""
        by_time: dict[float, list[tuple[_Entry, Reading | None, int]]] = {}
        for entry, readings, generation in work:
            for reading in readings:
                if reading.time_s >= tick:
                    break
                by_time.setdefault(reading.time_s, []).append((entry, reading, generation))
        pacer = CpuPacer(self.compute_share)
        for t in sorted(by_time):
            self._advance(by_time[t], t, t + self.query_delay_s, pacer)

    async def _catch_up(self, last_tick: float, tick: float) -> None:
        """Fill refreshes the loop missed (a busy machine) from history, so the
        decision history stays the same function of Prometheus data as a
        freshly backfilled replica's."""
        entries = [e for e in self._entries.values() if e.ready]
        start = last_tick + self.refresh_interval_s
        end = tick - self.refresh_interval_s
        if not entries or end < start:
            return
        if end - start > MAX_CATCH_UP_S:  # a long stall: replay its end only
            log.warning(
                "refresh loop stalled for %.0f s; filling only the last %.0f s",
                end - start,
                MAX_CATCH_UP_S,
            )
            start = end - math.floor(MAX_CATCH_UP_S / self.refresh_interval_s) * (
                self.refresh_interval_s
            )
        by_spec: dict[SourceSpec, list[_Entry]] = {}
        for entry in entries:
            by_spec.setdefault(entry.spec, []).append(entry)
        work: list[tuple[_Entry, list[Reading], int]] = []
        for spec, group in by_spec.items():
            selections = list(dict.fromkeys(e.selection for e in group))
            try:
                ranges = await self._source(spec).read_range(
                    selections, start, end, self.refresh_interval_s
                )
            except Exception as exc:
                log.info("catch-up from %s failed: %s", self._source_label(spec), exc)
                continue
            work.extend((e, ranges.get(e.selection, []), e.generation) for e in group)
        if work:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(self._compute_pool, self._fill, work, tick)

    # --------------------------------------------------------------- backfill
    async def _backfill(self, tick: float) -> None:
        # In chunks: replaying a long history with forecasts costs tens of ms
        # per object, so refreshes of the others interleave between chunks.
        keys = [k for k in self._pending_backfill if k in self._entries][:BACKFILL_CHUNK]
        self._pending_backfill.difference_update(keys)
        self._pending_backfill.intersection_update(self._entries)
        entries = [self._entries[k] for k in keys]
        if not entries:
            return
        by_spec: dict[SourceSpec, list[_Entry]] = {}
        for entry in entries:
            by_spec.setdefault(entry.spec, []).append(entry)
        # Two reads per source for all new objects together: the long history
        # at the forecast step (arrays, for bins and learned capacity), and
        # the last stabilization window at the refresh step (readings, to
        # replay decisions exactly as a scaler running all along made them).
        fs = self.forecast_step_s
        histories: dict[ObjectKey, History | None] = {}
        replays: dict[ObjectKey, list[Reading]] = {}
        for spec, group in by_spec.items():
            window = max(self._replay_window(e) for e in group)
            history_end = math.floor(round((tick - window) / fs, 9)) * fs
            history_start = history_end - (max(e.tracker.series.capacity for e in group) - 1) * fs
            selections = list(dict.fromkeys(e.selection for e in group))
            source = self._source(spec)
            try:
                history = await source.read_history(selections, history_start, history_end, fs)
                ranges = await source.read_range(
                    selections,
                    history_end + self.refresh_interval_s,
                    tick - self.refresh_interval_s,
                    self.refresh_interval_s,
                )
            except Exception as exc:
                log.warning("backfill from %s failed: %s", self._source_label(spec), exc)
                history, ranges = {}, {}
            for entry in group:
                histories[entry.key] = history.get(entry.selection)
                replays[entry.key] = ranges.get(entry.selection, [])
        # The current reading, read like any refresh (also for sources without history).
        current = await self._read(entries, tick)
        work = [
            (e, replays[e.key], current.get(e.key), e.generation, histories[e.key]) for e in entries
        ]
        loop = asyncio.get_running_loop()
        bursts = await loop.run_in_executor(self._compute_pool, self._replay, work, tick)
        self._notify(bursts)
        # What a backfill loads (histories, learners, ledgers) lives as long
        # as its objects. A full collection walks every tracked object while
        # holding the GIL, so RPCs wait for it; frozen objects are skipped
        # (still freed by reference counting when dropped).
        gc.freeze()

    def _replay_window(self, entry: _Entry) -> float:
        return entry.settings.scale_down_stabilization_seconds + self.refresh_interval_s

    def _replay(
        self,
        work: Sequence[tuple[_Entry, list[Reading], Reading | None, int, History | None]],
        tick: float,
    ) -> list[ObjectKey]:
        """Backfill: load each new object's history, replay its decisions over
        the stabilization window, then decide at ``tick`` like a live refresh."""
        now = self._clock()
        bursts: list[ObjectKey] = []
        pacer = CpuPacer(self.compute_share)
        for entry, readings, current, generation, history in work:
            pacer.tick()
            if entry.generation != generation or self._entries.get(entry.key) is not entry:
                continue
            try:
                if history is not None and len(history):
                    self._load_history(entry, history)
                window = self._replay_window(entry)
                for reading in readings:
                    if reading.time_s >= tick:
                        break
                    # Decisions only matter over the stabilization window.
                    self._step(
                        entry,
                        reading.time_s,
                        reading,
                        reading.time_s + self.query_delay_s,
                        live=False,
                        decide_it=reading.time_s > tick - window,
                    )
                burst = self._step(entry, tick, current, now, live=True)
                entry.ready = True
                if burst:
                    bursts.append(entry.key)
            except Exception:
                log.exception("backfilling %s/%s failed", *entry.key)
                entry.ready = True
        return bursts

    def _load_history(self, entry: _Entry, history: History) -> None:
        entry.tracker.load_history(
            history.times,
            history.requests_per_s,
            history.tokens_per_s,
            history.ready,
            history.waiting,
            history.completions_per_s,
        )

    # ----------------------------------------------------------------- a step
    def _step(
        self,
        entry: _Entry,
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
        entry: _Entry,
        t: float,
        reading: Reading | None,
        now_s: float,
        *,
        live: bool,
        decide_it: bool = True,
    ) -> Pending | None:
        """Take one reading into the object's tracker; ``None`` if ``t`` is old."""
        converted = tracker_reading(reading) if reading is not None else None
        pending = entry.tracker.ingest(t, converted, now_s, decide=decide_it)
        if pending is not None and live and pending.settled:
            self._export_accuracy(entry)
        return pending

    def _conclude(self, entry: _Entry, pending: Pending, *, live: bool) -> bool:
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

    # ------------------------------------------------------------ telemetry
    def _export(self, entry: _Entry, step: TrackerStep) -> None:
        ns, name = entry.key
        obs, forecast, lead_s = step.observation, step.forecast, step.lead_s
        last_fresh = entry.tracker.last_fresh_observation
        ready = (
            obs.ready_replicas
            if obs is not None
            else (last_fresh.ready_replicas if last_fresh is not None else 0)
        )
        demand: list[tuple[str, float]] = []
        if obs is not None:
            for signal, value in (
                ("requests_per_s", obs.arrival_rate_rps),
                ("waiting", obs.waiting),
                ("running", obs.running),
                ("kv_cache_usage", obs.kv_usage),
                ("tokens_per_s", obs.prompt_tokens_per_s + obs.generation_tokens_per_s),
                ("preemptions_per_s", obs.preemptions_per_s),
            ):
                if math.isfinite(value):
                    demand.append((signal, value))
        forecasts: list[tuple[str, float, float, float]] = []
        if forecast is not None:
            forecasts.append((SIGNAL, forecast.quantile, lead_s, forecast.upper_requests_per_s))
            forecasts.append((SIGNAL, 0.5, lead_s, forecast.median_requests_per_s))
        # One lock acquisition per object, not ten.
        self.telemetry.record_refresh(ns, name, step.decision, ready, lead_s, demand, forecasts)

    def _export_accuracy(self, entry: _Entry) -> None:
        ns, name = entry.key
        ledger = entry.tracker.ledger
        for signal, horizon, quantile in ledger.keys():  # noqa: SIM118 (not a dict)
            ape = ledger.mean_ape(signal, horizon)
            if math.isfinite(ape):
                self.telemetry.record_forecast_error(ns, name, signal, horizon, ape)
            coverage = ledger.coverage(signal, quantile)
            if math.isfinite(coverage):
                self.telemetry.record_coverage(ns, name, signal, quantile, coverage)

    def _prewarm(self, entry: _Entry, step: TrackerStep, t: float) -> None:
        """Node pre-warming: size the balloon Deployment one node lead time ahead.

        The sizing is ``scaler.prewarm.plan_balloons`` (pure); the PATCH goes
        through ``scaler.sources.balloon`` on its own thread, so a slow API
        server never delays decisions.
        """
        settings = entry.settings
        if not settings.prewarm:
            return
        from scaler.prewarm import plan_balloons

        forecast = entry.tracker.demand_forecast(t, settings.node_lead_time_seconds)
        obs = step.observation
        ready = obs.ready_replicas if obs is not None else 0
        plan = plan_balloons(
            settings=settings,
            forecast=forecast,
            capacity=step.capacity,
            ready_replicas=ready,
            desired_replicas=step.decision.replicas,
            current_balloons=entry.balloons,
        )
        if plan.replicas == entry.balloons and entry.balloons_applied:
            return
        entry.balloons = plan.replicas
        entry.balloons_applied = False
        controller = self._balloons()
        namespace, deployment = entry.key[0], settings.prewarm_deployment

        def apply() -> None:
            try:
                controller.apply(namespace, deployment, plan.replicas)
                entry.balloons_applied = True
            except Exception as exc:  # retried at the next refresh
                log.warning("balloon %s/%s: %s", namespace, deployment, exc)

        self._balloon_pool.submit(apply)

    def _balloons(self) -> Any:
        if self._balloon_controller is None:
            from scaler.sources.balloon import BalloonController
            from scaler.sources.kube import default_api_factory

            self._balloon_controller = BalloonController(default_api_factory().api_client)
        return self._balloon_controller

    # --------------------------------------------------------------- helpers
    def status(self) -> dict[str, float]:
        """Loop health for tests and benchmarks."""
        times = list(self.refresh_seconds)
        entries = list(self._entries.values())
        return {
            "objects": float(len(entries)),
            "objects_ready": float(sum(1 for e in entries if e.ready)),
            # fitted and predicting: the objects whose decisions use a forecast
            "forecasters_fitted": float(sum(1 for e in entries if e.tracker.fitted)),
            "refreshes": float(self.refreshes),
            "refresh_seconds_max": max(times) if times else math.nan,
            "refresh_seconds_mean": (sum(times) / len(times)) if times else math.nan,
        }
