"""The hindsight schedule's model (simulations.hindsight): pure, so its
properties are checked over many demands without a simulation."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulations.hindsight import (
    Schedule,
    calibrate,
    from_need,
    hold_short_gaps,
    need_from_load,
    plan,
)

needs = st.lists(st.integers(0, 6), min_size=0, max_size=40).map(
    lambda xs: np.asarray(xs, dtype=np.int64)
)
loads = st.lists(
    st.floats(0.0, 12.0, allow_nan=False, allow_infinity=False), min_size=1, max_size=60
).map(lambda xs: np.asarray(xs, dtype=np.float64))


def _closed_by_hand(need: np.ndarray, gap_steps: int) -> np.ndarray:
    """Level by level: a gap between two runs of a level shorter than
    ``gap_steps`` steps is held, nothing before the first run or after the last."""
    out = need.copy()
    for k in range(1, int(need.max(initial=0)) + 1):
        at = np.flatnonzero(need >= k)
        for a, b in itertools.pairwise(at):
            if 0 < b - a - 1 < gap_steps:
                out[a + 1 : b] = np.maximum(out[a + 1 : b], k)
    return out


@given(needs, st.integers(0, 9))
def test_each_level_is_held_through_exactly_its_short_gaps(need: np.ndarray, gap: int) -> None:
    """The one grey-scale closing equals the per-level rule it stands for."""
    assert np.array_equal(hold_short_gaps(need, gap), _closed_by_hand(need, gap))


@given(loads, st.floats(0.0, 900.0), st.floats(0.0, 900.0), st.floats(0.3, 2.0))
def test_every_step_is_served_and_every_start_is_ordered_one_lead_ahead(
    load: np.ndarray, lead_s: float, tail_s: float, factor: float
) -> None:
    """Ready covers the need; the Deployment holds each replica from one lead
    time before it is Ready, and a node bills at least while it is ordered."""
    step = 15.0
    s = plan(load, step_s=step, lead_s=lead_s, tail_s=tail_s, factor=factor)
    assert np.all(s.ready >= s.need)
    assert np.array_equal(s.need, need_from_load(load, factor))
    lead = math.ceil(lead_s / step - 1e-9)
    for i in np.flatnonzero(s.ready > 0):
        before = s.orders[max(0, i - lead) : i + 1]
        assert np.all(before >= s.ready[i])
    assert np.all(s.billed >= s.orders)
    assert s.replica_hours == pytest.approx(float(s.billed.sum()) * step / 3600.0)


@given(
    loads,
    st.floats(0.0, 600.0),
    st.floats(0.0, 600.0),
    st.floats(0.0, 900.0),
    st.floats(0.3, 2.0),
)
def test_the_bill_never_falls_as_the_lead_time_grows(
    load: np.ndarray, lead_a: float, more: float, tail_s: float, factor: float
) -> None:
    """A longer start-up orders earlier and holds more gaps: every step bills
    at least as many nodes (the model's cost is monotone in the lead time)."""
    short = plan(load, step_s=15.0, lead_s=lead_a, tail_s=tail_s, factor=factor)
    longer = plan(load, step_s=15.0, lead_s=lead_a + more, tail_s=tail_s, factor=factor)
    assert np.all(longer.billed >= short.billed)
    assert longer.replica_hours >= short.replica_hours


@given(loads, st.floats(0.3, 2.0), st.floats(0.0, 1.0), st.floats(0.0, 600.0))
def test_the_bill_never_falls_as_the_fleet_is_sized_denser(
    load: np.ndarray, factor: float, denser: float, lead_s: float
) -> None:
    """A lower capacity factor (more replicas per unit of load) bills no less."""
    loose = plan(load, step_s=15.0, lead_s=lead_s, tail_s=620.0, factor=factor)
    denser_f = factor * (1.0 - 0.7 * denser)
    dense = plan(load, step_s=15.0, lead_s=lead_s, tail_s=620.0, factor=denser_f)
    assert np.all(dense.billed >= loose.billed)


def _served(load: np.ndarray) -> Callable[[Schedule], tuple[float, float | None]]:
    """A replay stand-in: the share of load the Ready fleet carries, which
    rises with the fleet as a real replay's attainment does."""
    total = float(load.sum()) or 1.0

    def replay(s: Schedule) -> tuple[float, float | None]:
        return float(np.minimum(load, s.ready).sum()) / total, s.gpu_hours

    return replay


@settings(max_examples=60)
@given(loads, st.floats(0.5, 0.99), st.floats(0.0, 300.0))
def test_calibration_meets_the_target_with_the_cheapest_schedule_it_replayed(
    load: np.ndarray, target: float, lead_s: float
) -> None:
    """The schedule returned meets the target when any replayed one does, and
    none replayed that met it costs less."""

    def build(f: float) -> Schedule:
        return plan(load, step_s=15.0, lead_s=lead_s, tail_s=300.0, factor=f)

    def rebuild(need: np.ndarray) -> Schedule:
        return from_need(need, step_s=15.0, lead_s=lead_s, tail_s=300.0)

    cal = calibrate(build, _served(load), target, rebuild=rebuild)
    met = [t for t in cal.trials if t.attainment >= target]
    assert cal.met == bool(met)
    if met:
        assert cal.attainment >= target
        assert cal.schedule.replica_hours == pytest.approx(min(t.replica_hours for t in met))


@settings(max_examples=40)
@given(loads, st.floats(0.5, 0.9), st.floats(0.02, 0.09))
def test_calibrated_cost_rises_with_the_target(load: np.ndarray, low: float, gap: float) -> None:
    """A higher target (by more than the tolerance) is never met more cheaply."""

    def build(f: float) -> Schedule:
        return plan(load, step_s=15.0, lead_s=150.0, tail_s=300.0, factor=f)

    replay = _served(load)
    a = calibrate(build, replay, low)
    b = calibrate(build, replay, low + gap)
    if a.met and b.met:
        assert b.schedule.replica_hours >= a.schedule.replica_hours


def test_bad_input_is_refused_with_its_cause() -> None:
    with pytest.raises(ValueError, match="factor"):
        need_from_load(np.ones(3), 0.0)
    with pytest.raises(ValueError, match="load"):
        need_from_load(np.array([1.0, math.nan]), 1.0)
    with pytest.raises(ValueError, match="lead_s"):
        plan(np.ones(3), step_s=15.0, lead_s=-1.0, tail_s=0.0)
    with pytest.raises(ValueError, match="target"):
        calibrate(lambda f: plan(np.ones(2), step_s=1.0, lead_s=0, tail_s=0), _served(np.ones(2)),
                  1.5)  # fmt: skip
