"""scaler.backfill: what a new object's backfill reads and replays, and how
the loop's missed refreshes are read and filled, with an in-memory source."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from decision.reading import Reading
from decision.tracker import Tracker
from decision.tracker_data import TrackerConfig
from scaler.backfill import (
    BACKFILL_BATCH,
    MAX_CATCH_UP_S,
    fill,
    read_backfill,
    read_catch_up,
    replay,
    replay_window,
)
from scaler.registry import Entry, ObjectRegistry
from scaler.source_reader import SourceReader
from scaler.sources import History, SourceSpec
from scaler.sources.prometheus import gateway_rate, gateway_rates_by_time, with_gateway_demand
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


async def test_more_selections_than_a_batch_are_all_read_in_bounded_batches() -> None:
    source = FakeSource(SPEC, queue_of(waiting=6))
    objects = ObjectRegistry(CONFIG, clock=lambda: 0.0)
    n = 2 * BACKFILL_BATCH + 3
    for i in range(n):
        objects.register("ns", f"so-{i}", meta(model=f"m-{i}"))
    objs = list(objects)
    assert len({e.selection for e in objs}) == n
    reader = SourceReader(lambda spec: source)
    items = await read_backfill(reader, objs, 1000.0, refresh_interval_s=1.0, forecast_step_s=2.0)
    assert [size for size, _, _ in source.ranges] == [BACKFILL_BATCH, BACKFILL_BATCH, 3]
    assert all(i.history is not None and len(i.history) for i in items)
    assert all(len(i.replay) == len(items[0].replay) > 0 for i in items)


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


# One grid time: the fleet's ready replicas (0: scaled to zero, or every
# replica asleep), vLLM's reading (None: no reading, a gap; else its arrival
# rate, None when unknown) and each gateway series' sample there (None: the
# series has none; NaN, Inf and negative are answers a live read calls unknown).
_GATEWAY_SAMPLE = st.one_of(
    st.none(), st.floats(0, 40), st.sampled_from([math.nan, math.inf, -1.0])
)
_POINT = st.tuples(
    st.integers(0, 2),
    st.one_of(st.none(), st.just(math.nan), st.floats(0, 40)),
    st.lists(_GATEWAY_SAMPLE, min_size=0, max_size=3),
)
_GATEWAY_QUERY = 'sum(rate(gateway_requests_total{model="m"}[1m]))'


@settings(max_examples=60, deadline=None)
@given(points=st.lists(_POINT, min_size=1, max_size=40))
def test_a_backfilled_tracker_holds_the_gateway_demand_live_readings_give(
    points: list[tuple[int, float | None, list[float | None]]],
) -> None:
    """For an object with gatewayRateQuery, the history a backfill loads
    (``with_gateway_demand`` of the gateway's range answer) puts the same
    demand in the tracker's bins as live readings of the same data at the
    same grid times: the gateway's rate where known, else vLLM's arrivals,
    and a gap (never zero) where neither is known or where the fleet is at
    zero and the gateway's rate is unknown (an empty fleet's zero says
    nothing of the gateway)."""
    # A live tracker closes the bins of a vLLM gap when its next reading
    # comes (a backfill's loaded history is followed by its replay): end on one.
    points = [*points, (1, 1.0, [])]
    step = CONFIG.step_s
    times = [step * (k + 1) for k in range(len(points))]
    series: list[dict[str, Any]] = [
        {"metric": {"pod": str(j)}, "values": []} for j in range(max(len(g) for _, _, g in points))
    ]
    for t, (_, _, samples) in zip(times, points, strict=True):
        for j, sample in enumerate(samples):
            if sample is not None:
                series[j]["values"].append([t, repr(sample)])
    vllm = [arrival for _, arrival, _ in points]
    gap = np.array([a is None for a in vllm])
    history = History(
        times=np.array(times),
        requests_per_s=np.array([math.nan if a is None else a for a in vllm]),
        tokens_per_s=np.full(len(times), math.nan),
        ready=np.array([float(ready) for ready, _, _ in points]),
        waiting=np.where(gap, math.nan, 0.0),
        completions_per_s=np.full(len(times), math.nan),
    )
    backfilled = Tracker(("ns", "so"), meta(gatewayRateQuery=_GATEWAY_QUERY), CONFIG)
    loaded = with_gateway_demand(history, gateway_rates_by_time(series))
    backfilled.load_history(
        loaded.times,
        loaded.requests_per_s,
        loaded.tokens_per_s,
        loaded.ready,
        loaded.waiting,
        loaded.completions_per_s,
    )
    live = Tracker(("ns", "so"), meta(gatewayRateQuery=_GATEWAY_QUERY), CONFIG)
    for t, (ready, arrival, _) in zip(times, points, strict=True):
        # a live refresh's instant answer at t: the series with a sample there
        vector = [{"value": v} for s in series for v in s["values"] if v[0] == t]
        reading = None
        if arrival is not None:
            reading = Reading(
                time_s=t,
                ready_replicas=ready,
                waiting=0.0,
                running=0.0,
                arrival_rate_rps=None if math.isnan(arrival) else arrival,
                gateway_rate_rps=gateway_rate(vector)[0],
            )
        live.step(t, reading, t, decide=False)
    assert live.series.requests().tolist() == backfilled.series.requests().tolist()
    assert np.all(np.isfinite(backfilled.series.requests()))


def test_a_fleet_at_zero_with_no_gateway_answer_backfills_a_gap() -> None:
    """At zero replicas vLLM's zero arrivals say nothing of the gateway: where
    the gateway's rate is unknown the backfilled demand is a gap (as a live
    tracker with gatewayRateQuery bins it), where known it is the rate, and
    a serving fleet without an answer keeps vLLM's arrivals."""
    history = History(
        times=np.array([15.0, 30.0, 45.0]),
        requests_per_s=np.array([0.0, 0.0, 2.0]),
        tokens_per_s=np.full(3, math.nan),
        ready=np.array([0.0, 0.0, 1.0]),
        waiting=np.zeros(3),
        completions_per_s=np.full(3, math.nan),
    )
    loaded = with_gateway_demand(history, {30.0: 0.5})
    demand = loaded.requests_per_s
    assert math.isnan(demand[0]) and demand[1:].tolist() == [0.5, 2.0]
