"""The refresh loop: every source read once at each grid time, every ready
object re-decided, new objects backfilled, missed refreshes caught up.

The reads run on the event loop; the compute runs on one thread of its own,
so reads and timers are not held up by a refit. (``prescaler serve`` runs
this loop in the decider process, away from the gRPC handlers:
``scaler.decider``.)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from scaler.backfill import (
    BACKFILL_CHUNK,
    fill,
    read_backfill,
    read_catch_up,
    replay,
)
from scaler.registry import ObjectKey, ObjectRegistry
from scaler.source_reader import SourceReader
from scaler.stepper import Stepper

__all__ = ["EXPIRE_EVERY", "RefreshLoop"]

log = logging.getLogger(__name__)

EXPIRE_EVERY = 60
"""Refreshes between two sweeps for objects KEDA stopped asking about."""

_T = TypeVar("_T")


class RefreshLoop:
    """Drives ``objects`` from ``reader`` through ``stepper`` on a time grid.

    Grid times are multiples of ``refresh_interval_s``, read
    ``query_delay_s`` late so every sample up to them has landed (every
    replica of the scaler reads the same numbers); objects not polled for
    ``expire_after_s`` are forgotten.
    """

    def __init__(
        self,
        objects: ObjectRegistry,
        reader: SourceReader,
        stepper: Stepper,
        *,
        refresh_interval_s: float,
        query_delay_s: float,
        forecast_step_s: float,
        expire_after_s: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.objects = objects
        self.reader = reader
        self.stepper = stepper
        self.refresh_interval_s = float(refresh_interval_s)
        self.query_delay_s = float(query_delay_s)
        self.forecast_step_s = float(forecast_step_s)
        self.expire_after_s = float(expire_after_s)
        self._clock = clock
        self._compute_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="prescaler-state"
        )
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self.last_tick_s: float | None = None
        """The grid time of the latest refresh (``None`` before the first)."""
        self.refreshes = 0
        self.refresh_seconds: deque[float] = deque(maxlen=1000)
        """Wall time of the latest refreshes (for ``status``)."""

    # ------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Run the loop as a task of the running event loop (idempotent)."""
        if self._task is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="prescaler-refresh")

    async def stop(self) -> None:
        """Cancel the loop and stop the compute thread."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._compute_pool.shutdown(wait=False, cancel_futures=True)

    def wake(self) -> None:
        """Start a backfill now rather than at the next grid time (safe from
        any thread; a no-op before :meth:`start`)."""
        if self._wake is None or self._loop is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._wake.set()
        else:
            self._loop.call_soon_threadsafe(self._wake.set)

    def grid(self, now_s: float) -> float:
        """The latest grid time whose samples have surely landed."""
        step = self.refresh_interval_s
        return math.floor(round((now_s - self.query_delay_s) / step, 9)) * step

    # ----------------------------------------------------------------- steps
    async def refresh(self, tick: float) -> None:
        """Read every source once at grid time ``tick`` and re-decide every
        ready object not yet past it; bursts go to the subscribers."""
        started = time.perf_counter()
        entries = [
            e
            for e in self.objects.ready()
            if e.tracker.last_time_s is None or e.tracker.last_time_s < tick
        ]
        self.last_tick_s = tick
        if not entries:
            return
        readings = await self.reader.read(entries, tick)
        work = [(e, readings.get(e.key), e.generation) for e in entries]

        def advance() -> list[ObjectKey]:
            return self.stepper.advance(work, tick, self._clock())

        bursts = await self._compute(advance)
        self.objects.notify(bursts)
        self.refreshes += 1
        self.refresh_seconds.append(time.perf_counter() - started)
        if self.refreshes % EXPIRE_EVERY == 0:
            self.objects.expire(self.expire_after_s)

    async def backfill(self, tick: float) -> None:
        """Backfill up to ``BACKFILL_CHUNK`` objects that wait for it, so they
        answer at ``tick`` as if the scaler had run all along.

        In chunks: replaying a long history with forecasts costs tens of ms
        per object, so refreshes of the others interleave between chunks.
        """
        entries = self.objects.take_pending(BACKFILL_CHUNK)
        if not entries:
            return
        items = await read_backfill(
            self.reader,
            entries,
            tick,
            refresh_interval_s=self.refresh_interval_s,
            forecast_step_s=self.forecast_step_s,
        )

        def replay_them() -> list[ObjectKey]:
            return replay(
                self.stepper,
                items,
                tick,
                now_s=self._clock(),
                refresh_interval_s=self.refresh_interval_s,
                query_delay_s=self.query_delay_s,
            )

        bursts = await self._compute(replay_them)
        self.objects.notify(bursts)

    async def catch_up(self, last_tick: float, tick: float) -> None:
        """Fill refreshes the loop missed (a busy machine) from history, so the
        decision history stays the same function of the sources' data as a
        freshly backfilled replica's."""
        items = await read_catch_up(
            self.reader,
            self.objects.ready(),
            last_tick,
            tick,
            refresh_interval_s=self.refresh_interval_s,
        )
        if not items:
            return

        def fill_them() -> None:
            fill(self.stepper, items, tick, query_delay_s=self.query_delay_s)

        await self._compute(fill_them)

    # --------------------------------------------------------------- helpers
    async def _compute(self, fn: Callable[[], _T]) -> _T:
        """``fn()`` on the compute thread."""
        return await asyncio.get_running_loop().run_in_executor(self._compute_pool, fn)

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            try:
                tick = self.grid(self._clock())
                if self.objects.has_pending:
                    await self.backfill(tick)
                last = self.last_tick_s
                if last is not None and tick - last > 1.5 * self.refresh_interval_s:
                    await self.catch_up(last, tick)
                if self.last_tick_s is None or tick > self.last_tick_s:
                    await self.refresh(tick)
                next_tick = (self.last_tick_s or tick) + self.refresh_interval_s
                delay = next_tick + self.query_delay_s - self._clock()
                self._wake.clear()
                if delay > 0 and not self.objects.has_pending:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), timeout=delay)
            except asyncio.CancelledError:
                raise
            except Exception:  # never let the loop die: log and try next tick
                log.exception("refresh failed")
                await asyncio.sleep(self.refresh_interval_s)
