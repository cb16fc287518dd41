"""Step-time model: invariants (monotonicity, bounds) and a few calibration points."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.profiles import get_profile, profile_names
from engine.steptime import StepTimer, soft_max, step_time_s, weight_bytes
from engine.throughput import RequestMix, saturated_throughput
from tests.support.engine_calibration import calibration_points, closed_loop_ms_per_token

NAMES = profile_names()
counts = st.integers(min_value=0, max_value=20_000)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(NAMES),
    prefill=counts,
    decode=st.integers(min_value=0, max_value=512),
    context=st.integers(min_value=0, max_value=2_000_000),
    bump=st.integers(min_value=1, max_value=5_000),
    which=st.sampled_from(["prefill", "decode", "context"]),
)
def test_step_time_is_monotone_in_each_argument(
    name: str, prefill: int, decode: int, context: int, bump: int, which: str
) -> None:
    p = get_profile(name)
    base = p.step_time_s(prefill, decode, context)
    args = {"prefill": prefill, "decode": decode, "context": context}
    args[which] += bump
    bumped = p.step_time_s(args["prefill"], args["decode"], args["context"])
    assert bumped >= base


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(NAMES),
    prefill=st.one_of(st.just(0), counts),
    decode=st.integers(min_value=0, max_value=512),
    context=st.integers(min_value=0, max_value=2_000_000),
)
def test_folded_step_timer_is_bit_identical_to_the_reference(
    name: str, prefill: int, decode: int, context: int
) -> None:
    """A profile's step time folds its constants once (the simulator's hot path);
    it must return exactly what the reference roofline function returns, or a
    simulation's results would drift with the optimisation."""
    p = get_profile(name)
    reference = step_time_s(p.model, p.hardware, p.tp, p.precision, prefill, decode, context)
    assert p.step_time_s(prefill, decode, context) == reference
    timer = pickle.loads(pickle.dumps(StepTimer(p.model, p.hardware, p.tp, p.precision)))
    assert timer.time_s(prefill, decode, context) == reference


@settings(max_examples=40, deadline=None)
@given(
    a=st.floats(min_value=0, max_value=10, allow_nan=False),
    b=st.floats(min_value=0, max_value=10, allow_nan=False),
    knee=st.floats(min_value=1, max_value=16),
)
def test_soft_max_lies_between_max_and_sum(a: float, b: float, knee: float) -> None:
    value = soft_max(a, b, knee)
    assert max(a, b) - 1e-12 <= value <= a + b + 1e-12


def test_empty_step_is_free_and_negative_counts_are_refused() -> None:
    p = get_profile("llama-3-8b@g5.xlarge")
    assert p.step_time_s(0, 0, 0) == 0.0
    with pytest.raises(ValueError, match="must be >= 0"):
        p.step_time_s(-1, 1, 10)


def test_decode_is_bounded_below_by_the_bandwidth_roofline() -> None:
    for name in NAMES:
        p = get_profile(name)
        floor = weight_bytes(p.model, p.precision) / p.tp / (p.hardware.bandwidth_gbps * 1e9)
        assert p.step_time_s(0, 1, 512) > floor


def test_precision_and_parallelism_change_speed_as_expected() -> None:
    bf16 = get_profile("llama-3-8b@p5.48xlarge")
    fp8 = get_profile("llama-3-8b-fp8@p5.48xlarge")
    assert fp8.decode_itl_s(1, 1024) < bf16.decode_itl_s(1, 1024)
    one = get_profile("llama-3-8b@g5.xlarge")
    two = get_profile("llama-3-8b-tp2@g5.12xlarge")
    assert two.decode_itl_s(1, 1024) < one.decode_itl_s(1, 1024)
    # The all-reduces are not free: TP 2 is less than twice as fast.
    assert two.decode_itl_s(1, 1024) > one.decode_itl_s(1, 1024) / 2
    no_comm = dataclasses.replace(
        two, hardware=dataclasses.replace(two.hardware, allreduce_latency_s=0.0)
    )
    assert no_comm.step_time_s(100, 8, 4000) < two.step_time_s(100, 8, 4000)


def test_decode_becomes_compute_bound_at_large_batch_on_a100() -> None:
    p = get_profile("llama-3-8b@p4de.24xlarge")
    # Vidur: flat up to ~64 tokens, then rising: 512 tokens cost > 3x one token.
    assert p.linear_time_s(64) < 1.2 * p.linear_time_s(1)
    assert p.linear_time_s(512) > 3 * p.linear_time_s(1)


def test_closed_loop_latency_grows_with_users() -> None:
    p = get_profile("llama-2-7b@g5.2xlarge")
    values = [closed_loop_ms_per_token(p, u, 230, 50) for u in (1, 5, 10, 20)]
    assert values == sorted(values)


def test_saturated_batch_is_limited_by_kv_and_max_num_seqs() -> None:
    p = get_profile("llama-3-8b@g6.xlarge")
    mix = RequestMix(215, 197, 1.2)
    kv_limited = saturated_throughput(
        p, kv_tokens=p.kv_tokens, max_num_seqs=256, block_size=16, mix=mix, chunked_prefill=True
    )
    assert kv_limited.batch * mix.inflight_context <= p.kv_tokens
    seq_limited = saturated_throughput(
        p, kv_tokens=p.kv_tokens, max_num_seqs=8, block_size=16, mix=mix, chunked_prefill=True
    )
    assert seq_limited.batch == 8
    assert seq_limited.output_tokens_per_s < kv_limited.output_tokens_per_s
    with pytest.raises(ValueError, match="prompt_tokens >= 1"):
        RequestMix(0, 10)


# A regression guard for `make test`: a handful of the bench's points.
FAST_POINTS = (
    "a10g llama-2-7b TGI ms/token, 1 users",
    "a10g llama-2-7b TGI ms/token, 20 users",
    "a100 llama-3-8b linear ops, 1 tokens",
    "a100 llama-3-8b linear ops, 512 tokens",
    "h100 llama-3-8b bf16 decode TPOT, concurrency 1",
    "l4 llama-3-8b ShareGPT saturated output",
    "2xa10g tp2 llama-3-8b ShareGPT saturated output",
    "kv tokens llama-3-8b@p4de.24xlarge",
)


def test_a_few_calibration_points_within_15_percent() -> None:
    points = {p.point: p for p in calibration_points()}
    for name in FAST_POINTS:
        assert abs(points[name].error_pct) <= 15.0, points[name]
