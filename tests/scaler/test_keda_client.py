"""The KEDA/HPA emulation in keda_client.py against docs/control-plane.md's arithmetic."""

from __future__ import annotations

import math

import pytest

from tests.scaler.keda_client import (
    DEFAULT_BEHAVIOR,
    SEED_BEHAVIOR,
    HpaModel,
    KedaActivation,
    keda_value,
    milli,
)


def test_keda_value_rules() -> None:
    """Float field if > 0, else the int field; NaN, Inf, negatives -> 0; milli truncation."""
    assert keda_value(3.5, 4) == 3.5
    assert keda_value(0.0, 4) == 4.0
    assert keda_value(-1.0, 7) == 7.0
    assert keda_value(math.nan, 0) == 0.0
    assert keda_value(0.0, -3) == 0.0
    assert keda_value(math.inf, 0) == 0.0
    assert milli(1.23456) == 1234
    assert milli(math.nan) == milli(-2) == milli(math.inf) == 0


def test_average_value_lands_on_the_value() -> None:
    """ratio = sum / (target x current); outside tolerance desired = ceil(sum / target)."""
    hpa = HpaModel(max_replicas=50)
    assert hpa.proposal(4, 10_000, 1000) == 10
    assert hpa.proposal(4, 4_300, 1000) == 4  # ratio 1.075: inside the 10 % tolerance
    assert hpa.proposal(4, 4_500, 1000) == 5  # ratio 1.125: ceil(4.5)
    assert hpa.proposal(10, 10_500, 1000) == 10  # ratio 1.05: no change
    # |1 - 1.1| is 0.10000000000000009 in float64, as in Go: 11 vs 10 does scale
    assert hpa.proposal(10, 11_000, 1000) == 11
    assert hpa.proposal(10, 8_000, 1000) == 8
    with pytest.raises(ValueError):
        hpa.proposal(1, 1000, 0)


def test_value_metric_type_uses_ready_pods() -> None:
    hpa = HpaModel(metric_type="Value")
    assert hpa.proposal(4, 6_000, 1000, ready_pods=3) == 18  # ceil(6 x 3)
    assert hpa.proposal(4, 1_050, 1000) == 4  # within tolerance


def test_default_scale_up_rate() -> None:
    """Default scaleUp: max(+4 pods, +100 %) per 15 s."""
    hpa = HpaModel(max_replicas=100)
    assert hpa.sync(0, 2, 40_000, 1000) == 6  # max(2 + 4, 2 x 2)
    assert hpa.sync(5, 6, 40_000, 1000) == 6  # same period: the +4 is spent
    assert hpa.sync(15, 6, 40_000, 1000) == 12  # new period: max(6 + 4, 12)
    assert hpa.sync(30, 12, 40_000, 1000) == 24
    assert hpa.sync(45, 24, 40_000, 1000) == 40


def test_default_scale_down_window() -> None:
    """Scale-down waits 300 s (max recommendation in the window), then 100 %/15 s."""
    hpa = HpaModel()
    current = 10
    for t in range(0, 300, 15):
        current = hpa.sync(t, current, 2_000, 1000)
        assert current == 10, t
    assert hpa.sync(300, current, 2_000, 1000) == 2


def test_seed_behavior_scale_down_is_10_percent_per_minute() -> None:
    hpa = HpaModel(behavior=SEED_BEHAVIOR)
    current, seen = 10, []
    for t in range(0, 421, 15):
        current = hpa.sync(t, current, 2_000, 1000)
        seen.append((t, current))
    changes = [(t, r) for (t, r), (_, prev) in zip(seen[1:], seen, strict=False) if r != prev]
    assert changes == [(300, 9), (360, 8), (420, 7)]


def test_bounds_and_zero() -> None:
    hpa = HpaModel(min_replicas=2, max_replicas=5, behavior=DEFAULT_BEHAVIOR)
    assert hpa.sync(0, 0, 9_000, 1000) == 0  # HPA is off at zero (KEDA's job)
    assert hpa.sync(0, 1, 0, 1000) == 2  # below min: min
    assert hpa.sync(0, 7, 7_000, 1000) == 5  # above max: max
    assert hpa.sync(15, 4, 9_000, 1000) == 5  # clamped at max
    with pytest.raises(ValueError):
        HpaModel(min_replicas=0)


def test_keda_activation() -> None:
    keda = KedaActivation(min_replica_count=0, cooldown_s=300)
    assert keda.step(0, True, 0) == 1  # 0 -> max(minReplicaCount, 1)
    assert keda.step(30, False, 3) == 3  # inactive, but inside cooldown
    assert keda.step(299, False, 3) == 3
    assert keda.step(300, False, 3) == 0
    assert KedaActivation(min_replica_count=2).step(0, True, 0) == 2
    assert KedaActivation(min_replica_count=1).step(1e6, False, 1) == 1  # never to 0
