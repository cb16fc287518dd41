"""Filling history from Prometheus: a new object's backfill, and the refresh
loop's catch-up after a stall.

Both replay history through the same step a live refresh takes, so a
restarted (or a second) scaler answers as one that ran all along.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
from collections.abc import Sequence

from decision.reading import Reading
from scaler.live_entry import Entry, ObjectKey
from scaler.pacing import CpuPacer
from scaler.refresh import RefreshLoop
from scaler.sources import History, SourceSpec

__all__ = ["BACKFILL_CHUNK", "MAX_CATCH_UP_S", "Backfill"]

# Logs under the live loop's name, as before this layer had a module of its own.
log = logging.getLogger("scaler.state")

BACKFILL_CHUNK = 100

MAX_CATCH_UP_S = 600.0
"""The longest stretch of missed refreshes that is replayed tick by tick."""


class Backfill(RefreshLoop):
    """The layer of :class:`scaler.state.ScalerState` that backfills new objects
    and catches up on refreshes the loop missed."""

    refresh_interval_s: float
    query_delay_s: float
    forecast_step_s: float
    _pending_backfill: set[ObjectKey]

    def _fill(self, work: Sequence[tuple[Entry, list[Reading], int]], tick: float) -> None:
        """Missed refreshes, tick by tick across all objects (each tick's
        forecasts in one batch), exported like live ones."""
        by_time: dict[float, list[tuple[Entry, Reading | None, int]]] = {}
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
        by_spec: dict[SourceSpec, list[Entry]] = {}
        for entry in entries:
            by_spec.setdefault(entry.spec, []).append(entry)
        work: list[tuple[Entry, list[Reading], int]] = []
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
        by_spec: dict[SourceSpec, list[Entry]] = {}
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

    def _replay_window(self, entry: Entry) -> float:
        return entry.settings.scale_down_stabilization_seconds + self.refresh_interval_s

    def _replay(
        self,
        work: Sequence[tuple[Entry, list[Reading], Reading | None, int, History | None]],
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

    def _load_history(self, entry: Entry, history: History) -> None:
        entry.tracker.load_history(
            history.times,
            history.requests_per_s,
            history.tokens_per_s,
            history.ready,
            history.waiting,
            history.completions_per_s,
        )
