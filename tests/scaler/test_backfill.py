"""scaler.backfill: what a new object's backfill reads and replays, and how
the loop's missed refreshes are read and filled, with an in-memory source."""

from __future__ import annotations

import math

from decision.tracker_data import TrackerConfig
from scaler.backfill import (
    MAX_CATCH_UP_S,
    fill,
    read_backfill,
    read_catch_up,
    replay,
    replay_window,
)
from scaler.registry import Entry, ObjectRegistry
from scaler.source_reader import SourceReader
from scaler.sources import SourceSpec
from scaler.stepper import Stepper
from tests.scaler.test_state import FakeSource, meta, queue_of
from tests.scaler.test_stepper import Sink

SPEC = SourceSpec("prometheus", "http://prom:9090")
CONFIG = TrackerConfig(
    refresh_interval_s=1.0, refit_interval_s=20.0, forecast_step_s=2.0, fit_window_s=60.0
)


def setup(
    n: int, source: FakeSource, **extra: str
) -> tuple[ObjectRegistry, list[Entry], SourceReader, Stepper, Sink]:
    objects = ObjectRegistry(CONFIG, clock=lambda: 0.0)
    for i in range(n):
        objects.register("ns", f"so-{i}", meta(**extra))
    sink = Sink()
    return (
        objects,
        list(objects),
        SourceReader(lambda spec: source),
        Stepper(sink, is_current=objects.is_current),
        sink,
    )


async def test_new_objects_of_one_source_are_read_together() -> None:
    source = FakeSource(SPEC, queue_of(waiting=6))
    _, objs, reader, _, _ = setup(3, source, scaleDownStabilizationSeconds="10")
    items = await read_backfill(reader, objs, 1000.0, refresh_interval_s=1.0, forecast_step_s=2.0)
    window = replay_window(objs[0], 1.0)
    assert window == 11.0
    history_end = math.floor((1000.0 - window) / 2.0) * 2.0
    # one range read for all three (the history read beside it), then one live read
    assert source.ranges == [(1, history_end + 1.0, 999.0)]
    assert source.reads == [(1, 1000.0)]
    assert [i.entry for i in items] == objs
    for item in items:
        assert item.history is not None and item.history.times[-1] == history_end
        assert [r.time_s for r in item.replay] == [history_end + k for k in range(1, 12)]
        assert item.current is not None and item.current.time_s == 1000.0
        assert item.generation == item.entry.generation


async def test_a_source_without_history_leaves_only_the_current_reading() -> None:
    source = FakeSource(SPEC, queue_of(waiting=6), history=False)
    _, objs, reader, _, _ = setup(1, source)
    (item,) = await read_backfill(reader, objs, 1000.0, refresh_interval_s=1.0, forecast_step_s=2.0)
    assert (item.history, item.replay) == (None, [])
    assert item.current is not None


async def test_replay_decides_over_the_stabilization_window_then_at_the_tick() -> None:
    source = FakeSource(SPEC, queue_of(waiting=6))
    _, objs, reader, stepper, sink = setup(2, source, scaleDownStabilizationSeconds="10")
    tick = 1000.0
    items = await read_backfill(reader, objs, tick, refresh_interval_s=1.0, forecast_step_s=2.0)
    bursts = replay(
        stepper,
        items,
        tick,
        now_s=tick,
        refresh_interval_s=1.0,
        query_delay_s=0.0,
    )
    assert bursts == []
    for entry in objs:
        assert entry.ready
        times = [d.time_s for d in entry.decisions]
        assert times[-1] == tick and entry.decision.reason == "queue"
        assert min(times) > tick - replay_window(entry, 1.0)
    # only the step at the tick is live: one output per object
    assert [(k, t) for k, t, _, _ in sink.steps] == [(e.key, tick) for e in objs]


async def test_replay_skips_an_object_replaced_meanwhile() -> None:
    source = FakeSource(SPEC, queue_of(waiting=6))
    objects, (entry,), reader, stepper, _ = setup(1, source)
    items = await read_backfill(
        reader, [entry], 1000.0, refresh_interval_s=1.0, forecast_step_s=2.0
    )
    objects.register("ns", "so-0", meta(model="other"))
    replay(
        stepper,
        items,
        1000.0,
        now_s=1000.0,
        refresh_interval_s=1.0,
        query_delay_s=0.0,
    )
    assert not entry.ready and entry.tracker.last_time_s is None


async def test_catch_up_reads_the_missed_grid_times() -> None:
    source = FakeSource(SPEC, queue_of(waiting=6))
    _, objs, reader, _, _ = setup(2, source)
    items = await read_catch_up(reader, objs, 100.0, 110.0, refresh_interval_s=1.0)
    assert source.ranges == [(1, 101.0, 109.0)]
    assert [[r.time_s for r in i.readings] for i in items] == [[101.0 + k for k in range(9)]] * 2
    # nothing missed: nothing read
    assert await read_catch_up(reader, objs, 100.0, 101.0, refresh_interval_s=1.0) == []
    assert len(source.ranges) == 1


async def test_a_long_stall_is_caught_up_at_its_end_only() -> None:
    source = FakeSource(SPEC, queue_of(waiting=6))
    _, objs, reader, _, _ = setup(1, source)
    await read_catch_up(reader, objs, 0.0, 5000.0, refresh_interval_s=1.0)
    assert source.ranges == [(1, 4999.0 - MAX_CATCH_UP_S, 4999.0)]


async def test_fill_steps_every_missed_time_in_order_like_a_live_refresh() -> None:
    source = FakeSource(SPEC, queue_of(waiting=6))
    _, objs, reader, stepper, sink = setup(2, source)
    items = await read_catch_up(reader, objs, 100.0, 105.0, refresh_interval_s=1.0)
    fill(stepper, items, 105.0, query_delay_s=0.5)
    assert [t for _, t, _, _ in sink.steps] == [
        101.0,
        101.0,
        102.0,
        102.0,
        103.0,
        103.0,
        104.0,
        104.0,
    ]
    for entry in objs:
        assert entry.decision.time_s == 104.0 and entry.tracker.last_time_s == 104.0
