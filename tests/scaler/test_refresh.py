"""scaler.refresh: the loop that reads, re-decides, backfills and expires,
driven by hand (grid times given) and running on its own."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from decision.tracker_data import TrackerConfig
from scaler.refresh import EXPIRE_EVERY, RefreshLoop
from scaler.registry import ObjectRegistry
from scaler.source_reader import SourceReader
from scaler.sources import SourceSpec
from scaler.stepper import Stepper
from tests.scaler.test_state import FakeSource, meta, queue_of, wait_until
from tests.scaler.test_stepper import Sink

SPEC = SourceSpec("prometheus", "http://prom:9090")


class Monotonic:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def build(
    source: FakeSource,
    *,
    refresh_interval_s: float = 1.0,
    clock: Callable[[], float] | None = None,
    monotonic: Monotonic | None = None,
    **loop_kwargs: float,
) -> tuple[RefreshLoop, ObjectRegistry, Sink]:
    config = TrackerConfig(
        refresh_interval_s=refresh_interval_s,
        refit_interval_s=20.0,
        forecast_step_s=refresh_interval_s,
        fit_window_s=60.0,
    )
    wall = clock or (lambda: 1000.0)
    objects = ObjectRegistry(config, clock=wall, monotonic=monotonic or Monotonic())
    sink = Sink()
    loop = RefreshLoop(
        objects,
        SourceReader(lambda spec: source),
        Stepper(sink, is_current=objects.is_current),
        refresh_interval_s=refresh_interval_s,
        query_delay_s=loop_kwargs.pop("query_delay_s", 0.0),
        forecast_step_s=refresh_interval_s,
        clock=wall,
        **loop_kwargs,
    )
    return loop, objects, sink


def test_grid_times_are_multiples_of_the_refresh_read_late() -> None:
    loop, _, _ = build(
        FakeSource(SPEC, queue_of(waiting=1)), refresh_interval_s=5.0, query_delay_s=1.0
    )
    assert loop.grid(1006.0) == 1005.0
    assert loop.grid(1005.5) == 1000.0  # 1005's samples may not have landed yet
    assert loop.grid(1011.0) == 1010.0


async def test_a_refresh_reads_once_and_re_decides_the_backfilled_objects() -> None:
    source = FakeSource(SPEC, queue_of(waiting=12))
    loop, objects, sink = build(source)
    for i in range(3):
        objects.register("ns", f"so-{i}", meta())
    try:
        await loop.refresh(1000.0)  # nothing is backfilled yet: nothing read
        assert source.reads == [] and loop.refreshes == 0 and loop.last_tick_s == 1000.0
        await loop.backfill(1000.0)
        assert all(e.ready for e in objects) and not objects.has_pending
        await loop.refresh(1001.0)
        assert source.reads[-1] == (1, 1001.0)  # one read for all three
        assert loop.refreshes == 1 and len(loop.refresh_seconds) == 1
        assert {e.decision.time_s for e in objects} == {1001.0}
        assert [t for _, t, _, _ in sink.steps][-3:] == [1001.0] * 3
        reads = len(source.reads)
        await loop.refresh(1001.0)  # already decided at that time: not read again
        assert len(source.reads) == reads
    finally:
        await loop.stop()


async def test_bursts_reach_the_subscribers() -> None:
    source = FakeSource(SPEC, queue_of(waiting=0, ready=0, arrival=0.0))
    loop, objects, _ = build(source)
    objects.register("ns", "a", meta(minReplicas="0"))
    queue = objects.subscribe("ns", "a")
    try:
        await loop.backfill(1000.0)
        assert queue.empty()
        source.reading = queue_of(waiting=5, ready=0, arrival=3.0)
        await loop.refresh(1001.0)
        assert await asyncio.wait_for(queue.get(), 1.0) is True
    finally:
        await loop.stop()


async def test_objects_nobody_polls_are_forgotten() -> None:
    source = FakeSource(SPEC, queue_of(waiting=1))
    monotonic = Monotonic()
    loop, objects, _ = build(source, monotonic=monotonic, expire_after_s=100.0)
    objects.register("ns", "idle", meta())
    try:
        await loop.backfill(1000.0)
        monotonic.now = 200.0
        for k in range(1, EXPIRE_EVERY):
            await loop.refresh(1000.0 + k)
        assert ("ns", "idle") in objects
        await loop.refresh(1000.0 + EXPIRE_EVERY)
        assert ("ns", "idle") not in objects
    finally:
        await loop.stop()


async def test_the_running_loop_backfills_a_new_object_at_once_and_refreshes() -> None:
    source = FakeSource(SPEC, queue_of(waiting=12))
    loop, objects, _ = build(source, refresh_interval_s=0.1, clock=time.time)
    await loop.start()
    try:
        await asyncio.sleep(0.05)
        objects.register("ns", "a", meta())
        loop.wake()
        await wait_until(lambda: objects[("ns", "a")].ready, 10.0)
        await wait_until(lambda: loop.refreshes >= 2, 10.0)
        assert objects[("ns", "a")].decision.reason == "queue"
    finally:
        await loop.stop()
