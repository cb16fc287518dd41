"""Filling history from the sources: a new object's backfill, and the refresh
loop's catch-up after a stall.

Both replay history through the same steps a live refresh takes
(``scaler.stepper``), so a restarted (or a second) scaler answers as one
that ran all along. Each has a read half (async, on the event loop) and a
compute half (run on the compute thread).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

from decision.reading import Reading
from scaler.registry import Entry, ObjectKey
from scaler.source_reader import SourceReader, by_source
from scaler.sources import History, Selection
from scaler.stepper import Stepper, StepWork

__all__ = [
    "BACKFILL_BATCH",
    "BACKFILL_CHUNK",
    "MAX_CATCH_UP_S",
    "BackfillItem",
    "CatchUpItem",
    "fill",
    "read_backfill",
    "read_catch_up",
    "replay",
    "replay_window",
]

log = logging.getLogger(__name__)

BACKFILL_CHUNK = 100
"""New objects backfilled together; refreshes of the others run between chunks."""

BACKFILL_BATCH = 4
"""Distinct selections read from a source in one history read. A three-day
history is tens of megabytes of raw answer per object while it is parsed, so
reading a whole chunk (or a restart's every object) in one call could pass the
scaler's memory limit; batches bound the peak whatever the number of objects,
and each batch's answer is folded into arrays before the next is read. Few:
one page of a batch (every history signal, 10,000 points a series) must be
read and parsed within the source's 3 s timeout on a busy node
(docs/decisions/front.md, "At the 3-day fit window")."""

MAX_CATCH_UP_S = 600.0
"""The longest stretch of missed refreshes that is replayed tick by tick."""


@dataclass(frozen=True, eq=False)
class BackfillItem:
    """What one new object's backfill read: the long history (forecast bins,
    learned capacity), the readings of its last stabilization window, and
    the current reading, for the generation it had when read."""

    entry: Entry
    history: History | None
    replay: list[Reading]
    current: Reading | None
    generation: int


@dataclass(frozen=True, eq=False)
class CatchUpItem:
    """One object's readings at the grid times the loop missed."""

    entry: Entry
    readings: list[Reading]
    generation: int


def replay_window(entry: Entry, refresh_interval_s: float) -> float:
    """How far back decisions are replayed: they only matter over the
    stabilization window (plus one refresh, the one the window starts at)."""
    return entry.settings.scale_down_stabilization_seconds + refresh_interval_s


async def read_backfill(
    reader: SourceReader,
    entries: Sequence[Entry],
    tick: float,
    *,
    refresh_interval_s: float,
    forecast_step_s: float,
) -> list[BackfillItem]:
    """Read what ``entries`` (new objects) need to answer at ``tick``.

    Two reads per batch of :data:`BACKFILL_BATCH` selections of a source: the long history
    at the forecast step (arrays, for bins and learned capacity), and the last
    stabilization window at the refresh step (readings, to replay decisions
    exactly as a scaler running all along made them); then the current
    reading, read like any refresh (also for sources without history). An
    object's ``gatewayRateQuery`` is read over the same two ranges, so its
    history and replay carry the demand a live refresh fed its tracker. A
    failed history read leaves the objects without history, not unread.
    """
    fs = forecast_step_s
    histories: dict[ObjectKey, History | None] = {}
    replays: dict[ObjectKey, list[Reading]] = {}
    for spec, group in by_source(entries).items():
        window = max(replay_window(e, refresh_interval_s) for e in group)
        history_end = math.floor(round((tick - window) / fs, 9)) * fs
        history_start = history_end - (max(e.tracker.series.capacity for e in group) - 1) * fs
        selections = list(dict.fromkeys(e.selection for e in group))
        source = reader.source(spec)
        history: dict[Selection, History] = {}
        ranges: dict[Selection, list[Reading]] = {}
        for first in range(0, len(selections), BACKFILL_BATCH):
            batch = selections[first : first + BACKFILL_BATCH]
            try:
                batch_history = await source.read_history(batch, history_start, history_end, fs)
                batch_ranges = await source.read_range(
                    batch,
                    history_end + refresh_interval_s,
                    tick - refresh_interval_s,
                    refresh_interval_s,
                )
            except Exception as exc:
                # One failure per source: the rest go on from live data rather
                # than each batch waiting out the same outage.
                log.warning("backfill from %s failed: %s", reader.label(spec), exc)
                break
            history.update(batch_history)
            ranges.update(batch_ranges)
        for entry in group:
            histories[entry.key] = history.get(entry.selection)
            replays[entry.key] = ranges.get(entry.selection, [])
    current = await reader.read(entries, tick)
    return [
        BackfillItem(e, histories[e.key], replays[e.key], current.get(e.key), e.generation)
        for e in entries
    ]


def replay(
    stepper: Stepper,
    items: Sequence[BackfillItem],
    tick: float,
    *,
    now_s: float,
    refresh_interval_s: float,
    query_delay_s: float,
) -> list[ObjectKey]:
    """Load each new object's history, replay its decisions over the
    stabilization window, then decide at ``tick`` like a live refresh; every
    object is ready afterwards (also one whose backfill failed: it goes on
    from live data). Returns the objects whose burst started."""
    bursts: list[ObjectKey] = []
    for item in items:
        entry = item.entry
        if not stepper.is_current(entry, item.generation):
            continue
        try:
            if item.history is not None and len(item.history):
                _load_history(entry, item.history)
            window = replay_window(entry, refresh_interval_s)
            for reading in item.replay:
                if reading.time_s >= tick:
                    break
                # Decisions only matter over the stabilization window.
                stepper.step(
                    entry,
                    reading.time_s,
                    reading,
                    reading.time_s + query_delay_s,
                    live=False,
                    decide_it=reading.time_s > tick - window,
                )
            if stepper.step(entry, tick, item.current, now_s, live=True):
                bursts.append(entry.key)
            entry.ready = True
        except Exception:
            log.exception("backfilling %s/%s failed", *entry.key)
            entry.ready = True
    return bursts


async def read_catch_up(
    reader: SourceReader,
    entries: Sequence[Entry],
    last_tick: float,
    tick: float,
    *,
    refresh_interval_s: float,
) -> list[CatchUpItem]:
    """The readings ``entries`` missed between the loop's ``last_tick`` and
    ``tick`` (both refreshed), one range read per source; after a stall
    longer than :data:`MAX_CATCH_UP_S` only its end. A source that fails
    leaves its objects' gap unfilled."""
    start = last_tick + refresh_interval_s
    end = tick - refresh_interval_s
    if not entries or end < start:
        return []
    if end - start > MAX_CATCH_UP_S:  # a long stall: replay its end only
        log.warning(
            "refresh loop stalled for %.0f s; filling only the last %.0f s",
            end - start,
            MAX_CATCH_UP_S,
        )
        start = end - math.floor(MAX_CATCH_UP_S / refresh_interval_s) * refresh_interval_s
    items: list[CatchUpItem] = []
    for spec, group in by_source(entries).items():
        selections = list(dict.fromkeys(e.selection for e in group))
        try:
            ranges = await reader.source(spec).read_range(
                selections, start, end, refresh_interval_s
            )
        except Exception as exc:
            log.info("catch-up from %s failed: %s", reader.label(spec), exc)
            continue
        items.extend(CatchUpItem(e, ranges.get(e.selection, []), e.generation) for e in group)
    return items


def fill(
    stepper: Stepper,
    items: Sequence[CatchUpItem],
    tick: float,
    *,
    query_delay_s: float,
) -> None:
    """Missed refreshes, tick by tick across all objects, exported like live ones."""
    by_time: dict[float, list[StepWork]] = {}
    for item in items:
        for reading in item.readings:
            if reading.time_s >= tick:
                break
            by_time.setdefault(reading.time_s, []).append((item.entry, reading, item.generation))
    for t in sorted(by_time):
        stepper.advance(by_time[t], t, t + query_delay_s)


def _load_history(entry: Entry, history: History) -> None:
    entry.tracker.load_history(
        history.times,
        history.requests_per_s,
        history.tokens_per_s,
        history.ready,
        history.waiting,
        history.completions_per_s,
    )
