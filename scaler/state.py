"""Per-ScaledObject state: history, background refresh, forecaster refits.

The gRPC handlers call ``decision``/``is_active`` and get an answer from
memory, in microseconds, whatever Prometheus is doing. All the work happens
in one background task:

- Every ``refresh_interval_s`` (on a grid of wall-clock multiples, evaluated
  ``query_delay_s`` late so every sample up to the grid point has landed),
  each source is read ONCE for all its ScaledObjects (``scaler.sources``).
- The readings are turned into observations, forecast bins, forecasts and
  decisions in a single worker thread (``_compute``), off the event loop,
  by one ``decision.tracker.Tracker`` per object: the pure path from a
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

This module holds the RPC side and the loop's lifecycle; :class:`ScalerState`
stacks the layers that do the work, a module each: ``scaler.backfill`` on
``scaler.refresh`` on ``scaler.live_step`` on ``scaler.live_outputs``, with
the per-object record in ``scaler.live_entry`` and CPU pacing in
``scaler.pacing``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from decision.policy import Decision
from decision.settings import ScalerSettings
from decision.tracker import DEFAULT_LEAD_TIME_S, Tracker, warming_decision
from decision.tracker_data import TrackerConfig
from scaler.backfill import Backfill
from scaler.forecast_worker import ForecastWorker
from scaler.live_entry import Entry, ObjectKey, observation_from
from scaler.pacing import CpuPacer, lower_priority
from scaler.sources import (
    MetricSource,
    SourceFactory,
    SourceSpec,
    default_source_factory,
    selection_for,
)
from scaler.telemetry import ScalerTelemetry

__all__ = ["DEFAULT_LEAD_TIME_S", "CpuPacer", "ScalerState", "observation_from"]

log = logging.getLogger(__name__)


class ScalerState(Backfill):
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
        self._entries: dict[ObjectKey, Entry] = {}
        self._pending_backfill: set[ObjectKey] = set()
        self._compute_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="prescaler-state", initializer=lower_priority
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
        new = Entry(
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
