"""Per-replica capacity from engine profiles (decision.capacity)."""

from __future__ import annotations

import dataclasses

import pytest

from decision.capacity import RequestShape, capacity_for, profile_capacity
from decision.policy import ReplicaCapacity
from decision.settings import ScalerSettings

BASE = ScalerSettings(prometheus_address="http://p:9090")


class LinearModel:
    """A toy step model: 10 ms + 1 ms per decode sequence + 0.01 ms per prefill token."""

    kv_tokens = 100_000

    class vllm:
        max_num_seqs = 256
        block_size = 16

    def step_time_s(self, prefill_tokens: int, decode_seqs: int, context_tokens: int) -> float:
        return 0.010 + 0.001 * decode_seqs + 0.00001 * prefill_tokens


def test_batch_limited_by_itl_budget() -> None:
    """The largest batch whose step fits the ITL budget sets the capacity."""
    cap = profile_capacity(LinearModel(), mix=RequestShape(100, 100), itl_budget_s=0.05)
    # step(B) = 0.010 + 0.001 B + 0.00001 B = 0.010 + 0.00101 B <= 0.05 -> B = 39
    step = 0.010 + 0.00101 * 39
    assert cap.requests_per_s == pytest.approx((39 / 100) / step)
    assert cap.tokens_per_s == pytest.approx((39 + 39) / step)


def test_batch_limited_by_kv_target() -> None:
    cap_hi = profile_capacity(
        LinearModel(), kv_target=0.8, mix=RequestShape(4000, 1000), itl_budget_s=10
    )
    cap_lo = profile_capacity(
        LinearModel(), kv_target=0.4, mix=RequestShape(4000, 1000), itl_budget_s=10
    )
    assert cap_lo.tokens_per_s < cap_hi.tokens_per_s  # type: ignore[operator]


def test_real_profiles_give_plausible_capacity() -> None:
    profiles = pytest.importorskip("engine.profiles")
    for name in profiles.profile_names():
        cap = profile_capacity(profiles.get_profile(name))
        assert cap.requests_per_s is not None and cap.requests_per_s > 0, name
        assert cap.tokens_per_s is not None and 100 < cap.tokens_per_s < 1e6, name


def test_capacity_for_settings() -> None:
    assert capacity_for(BASE) == ReplicaCapacity.unknown()
    explicit = capacity_for(dataclasses.replace(BASE, capacity_tokens_per_second=1500.0))
    assert explicit == ReplicaCapacity(requests_per_s=None, tokens_per_s=1500.0)
    profiles = pytest.importorskip("engine.profiles")
    name = profiles.profile_names()[0]
    derived = capacity_for(dataclasses.replace(BASE, profile=name))
    assert derived == profile_capacity(profiles.get_profile(name))


def test_capacity_at_a_speed_scales_the_profile_only() -> None:
    """A replica running K times faster carries K x the profile's capacity per
    clock second; an explicit tokens/s is already in clock seconds."""
    profiles = pytest.importorskip("engine.profiles")
    settings = dataclasses.replace(BASE, profile=profiles.profile_names()[0])
    plain = capacity_for(settings)
    fast = capacity_for(settings, 4.0)
    assert plain.requests_per_s is not None and plain.tokens_per_s is not None
    assert fast.requests_per_s == pytest.approx(4.0 * plain.requests_per_s)
    assert fast.tokens_per_s == pytest.approx(4.0 * plain.tokens_per_s)
    explicit = dataclasses.replace(BASE, capacity_tokens_per_second=1500.0)
    assert capacity_for(explicit, 4.0) == capacity_for(explicit)


def test_tracker_counts_capacity_at_its_config_speed() -> None:
    """The speed reaches a tracker through its config, not a substitution."""
    from decision.tracker import Tracker
    from decision.tracker_data import TrackerConfig

    profiles = pytest.importorskip("engine.profiles")
    settings = dataclasses.replace(BASE, profile=profiles.profile_names()[0])
    plain = Tracker(("ns", "a"), settings, TrackerConfig()).capacity(0.0)
    fast = Tracker(("ns", "a"), settings, TrackerConfig(speed=10.0)).capacity(0.0)
    assert plain == capacity_for(settings)
    assert fast == capacity_for(settings, 10.0)
    with pytest.raises(ValueError, match="speed"):
        TrackerConfig(speed=0.0)


def test_a_profile_that_stalls_loses_the_stalled_share_of_its_capacity() -> None:
    profiles = pytest.importorskip("engine.profiles")
    types = pytest.importorskip("engine.profile_types")
    base = profiles.get_profile("llama-3-8b@g5.xlarge")
    plain = profile_capacity(base)
    stalled = profile_capacity(
        dataclasses.replace(base, stalls=types.EngineStalls(share=0.2, mean_s=0.1))
    )
    assert plain.tokens_per_s is not None and stalled.tokens_per_s is not None
    assert stalled.tokens_per_s == pytest.approx(0.8 * plain.tokens_per_s)
    assert stalled.requests_per_s == pytest.approx(0.8 * (plain.requests_per_s or 0.0))
