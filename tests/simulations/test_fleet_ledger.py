"""The fleet accounting the simulator and the stack share (simulations.fleet_ledger)."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulations.fleet_ledger import FleetLedger

changes = st.lists(
    st.tuples(st.floats(-100.0, 100.0, allow_nan=False), st.sampled_from([1, 1, -1])),
    max_size=30,
)


@settings(max_examples=40)
@given(changes)
def test_ready_area_is_the_integral_from_zero(events: list[tuple[float, int]]) -> None:
    """Replica-seconds count only from t=0; the peak is the count after each change
    from t=0 on (a fleet Ready before t=0 is seen by the change that closes the books)."""
    events = sorted(events)
    ledger = FleetLedger()
    for at, delta in events:
        ledger.set_ready(at, delta)
    end = 150.0
    ledger.set_ready(end, 0)
    expected, count, peak = 0.0, 0, 0
    bounds = [*events, (end, 0)]
    for (at, delta), (nxt, _) in itertools.pairwise(bounds):
        count += delta
        expected += count * max(0.0, nxt - max(at, 0.0)) if nxt > 0 else 0.0
        if at >= 0.0:
            peak = max(peak, count)
    peak = max(peak, count)  # the closing change at the end
    assert ledger.ready_area == pytest.approx(expected, abs=1e-6)
    assert ledger.ready_max == peak


def test_spot_notices_count_only_interruptions() -> None:
    ledger = FleetLedger()
    ledger.pod_stopping("spot_interruption")
    ledger.pod_stopping("scale_down")
    assert ledger.spot_notices == 1
