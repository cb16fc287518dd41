"""Profiles: catalogue, validation, KV capacity, prices and start-up times."""

from __future__ import annotations

import re

import pytest

from engine.hardware import GIB, INSTANCES
from engine.models import LLAMA_3_8B, LLAMA_3_70B
from engine.profiles import (
    Profile,
    StartupTimes,
    VllmSettings,
    build_profile,
    get_profile,
    profile_names,
)
from engine.steptime import weight_bytes

REQUIRED = (
    "llama-3-8b@g5.xlarge",
    "llama-3-8b@g5.2xlarge",
    "mistral-7b@g5.xlarge",
    "mistral-7b@g6.xlarge",
    "llama-3-8b@g6.xlarge",
    "llama-3-8b@p4de.24xlarge",
    "llama-3-8b@p5.48xlarge",
    "llama-3-8b@inf2.xlarge",
    "llama-3-8b@inf2.8xlarge",
    "llama-3-70b-awq@g5.12xlarge",
    "llama-3-70b@p5.48xlarge",
    "llama-3-8b-tp2@g5.12xlarge",
)


def test_every_catalogued_profile_loads_and_names_itself() -> None:
    names = profile_names()
    assert names == sorted(names)
    for name in REQUIRED:
        assert name in names
    for name in names:
        p = get_profile(name)
        assert isinstance(p, Profile)
        assert p.name == name
        assert name.endswith("@" + p.instance_type)
        assert p.kv_tokens >= p.vllm.max_model_len
        assert p.price_spot_per_hour < p.price_on_demand_per_hour
        assert p.startup.total_s > 0


def test_unknown_name_lists_every_known_profile() -> None:
    with pytest.raises(ValueError) as err:
        get_profile("gpt-5@g5.xlarge")
    message = str(err.value)
    assert "gpt-5@g5.xlarge" in message
    for name in profile_names():
        assert name in message


def test_bf16_70b_on_g5_12xlarge_is_refused_with_the_reason() -> None:
    refusal = r"llama-3-70b in bf16 does not fit on g5\.12xlarge"
    with pytest.raises(ValueError, match=refusal) as err:
        get_profile("llama-3-70b@g5.12xlarge")
    assert "GiB per device at TP 4" in str(err.value)
    assert "awq" in str(err.value)
    with pytest.raises(ValueError, match="does not fit"):
        build_profile(LLAMA_3_70B, "g5.12xlarge", tp=4)
    # The AWQ variant runs on the same instance.
    assert get_profile("llama-3-70b-awq@g5.12xlarge").tp == 4


def test_names_outside_the_catalogue_are_built_or_refused() -> None:
    p = get_profile("mistral-7b-fp8@p5.48xlarge")
    assert (p.precision, p.tp, p.model.name) == ("fp8", 1, "mistral-7b")
    with pytest.raises(ValueError, match="FP8"):
        get_profile("llama-3-8b-fp8@g5.xlarge")  # A10G has no FP8 tensor cores
    with pytest.raises(ValueError, match="exceeds"):
        get_profile("llama-3-8b-tp2@g5.xlarge")


def test_model_constants_match_calibration_section_0() -> None:
    assert LLAMA_3_8B.kv_bytes_per_token(2) == 128 * 1024
    # vLLM logs "Loading model weights took 14.9888 GB" (GiB) for Llama-3-8B.
    assert weight_bytes(LLAMA_3_8B, "bf16") / GIB == pytest.approx(14.99, abs=0.1)
    assert LLAMA_3_8B.linear_flops_per_token() == pytest.approx(13.96e9)


@pytest.mark.parametrize(
    ("name", "low", "high"),
    [
        ("llama-3-8b@g5.xlarge", 20_000, 30_000),
        ("llama-3-8b@g6.xlarge", 20_000, 30_000),
        ("llama-3-8b@p4de.24xlarge", 440_000, 450_000),
        ("llama-3-8b@p5.48xlarge", 440_000, 450_000),
    ],
)
def test_kv_capacity_in_calibration_ranges(name: str, low: int, high: int) -> None:
    assert low <= get_profile(name).kv_tokens <= high


def test_kv_capacity_is_tensor_parallel_aware() -> None:
    one = get_profile("llama-3-8b@g5.xlarge")
    two = get_profile("llama-3-8b-tp2@g5.12xlarge")
    # Half the weights and half the KV heads per GPU: far more than twice the tokens.
    assert two.kv_tokens > 4 * one.kv_tokens


def test_inferentia_kv_is_static_batch_times_sequence() -> None:
    p = get_profile("llama-3-8b@inf2.xlarge")
    assert p.hardware.static_kv
    assert p.kv_tokens == p.vllm.max_num_seqs * p.vllm.max_model_len
    smaller = p.with_vllm(max_num_seqs=4)
    assert smaller.kv_tokens == 4 * p.vllm.max_model_len
    with pytest.raises(ValueError, match="static KV does not fit"):
        p.with_vllm(max_num_seqs=64, max_num_batched_tokens=4096)


def test_num_gpu_blocks_overrides_the_derived_capacity() -> None:
    p = get_profile("llama-3-8b@g6.xlarge").with_vllm(num_gpu_blocks=1000)
    assert p.kv_blocks == 1000
    assert p.kv_tokens == 16_000
    with pytest.raises(ValueError, match="fewer than max_model_len"):
        get_profile("llama-3-8b@g6.xlarge").with_vllm(num_gpu_blocks=100)


def test_with_vllm_revalidates_and_names_bad_settings() -> None:
    p = get_profile("llama-3-8b@g5.xlarge")
    assert p.with_vllm(max_num_seqs=64).vllm.max_num_seqs == 64
    assert p.vllm.max_num_seqs == 256  # the original is unchanged
    with pytest.raises(ValueError, match=r"unknown vLLM setting.*max_seqs"):
        p.with_vllm(max_seqs=3)
    with pytest.raises(ValueError, match="KV cache holds"):
        p.with_vllm(gpu_memory_utilization=0.75)
    lower = p.with_vllm(gpu_memory_utilization=0.85)
    assert lower.kv_tokens < p.kv_tokens


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"gpu_memory_utilization": 0.0}, "gpu_memory_utilization must be in"),
        ({"gpu_memory_utilization": 1.2}, "gpu_memory_utilization must be in"),
        ({"max_model_len": 0}, "max_model_len must be an integer >= 1"),
        ({"max_num_seqs": 2.5}, "max_num_seqs must be an integer"),
        ({"block_size": 7}, "block_size must be one of"),
        ({"max_num_seqs": 512, "max_num_batched_tokens": 256}, "must be >= max_num_seqs"),
        ({"enable_chunked_prefill": False, "max_num_batched_tokens": 2048}, "without chunked"),
        ({"num_gpu_blocks": 0}, "num_gpu_blocks must be None or an integer >= 1"),
    ],
)
def test_vllm_settings_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        VllmSettings(**kwargs)  # type: ignore[arg-type]


def test_max_model_len_beyond_the_model_context_is_refused() -> None:
    with pytest.raises(ValueError, match="exceeds llama-3-8b's context"):
        get_profile("llama-3-8b@p5.48xlarge").with_vllm(max_model_len=16384)


def test_prices_follow_calibration_section_6() -> None:
    h100 = get_profile("llama-3-8b@p5.48xlarge")
    assert h100.price_on_demand_per_hour == pytest.approx(55.04 / 8)
    assert get_profile("llama-3-70b@p5.48xlarge").price_on_demand_per_hour == pytest.approx(55.04)
    g5 = get_profile("llama-3-8b@g5.xlarge")
    assert g5.price_on_demand_per_hour == pytest.approx(1.006)
    assert g5.price_spot_per_hour == pytest.approx(1.006 * (1 - 0.47))
    tp2 = get_profile("llama-3-8b-tp2@g5.12xlarge")
    assert tp2.price_on_demand_per_hour == pytest.approx(5.672 / 2)
    for inst in INSTANCES.values():
        assert 0 < inst.price_spot_per_hour < inst.price_on_demand_per_hour


def test_startup_defaults_are_the_optimised_case() -> None:
    s = get_profile("llama-3-8b@g5.xlarge").startup
    assert s.total_s == pytest.approx(150.0)  # calibration §8: about 2.5 min
    assert get_profile("llama-3-70b@p5.48xlarge").startup.total_s > s.total_s
    with pytest.raises(ValueError, match="image_pull_s must be >= 0"):
        StartupTimes(node_ready_s=1, image_pull_s=-1, model_load_s=1)


def test_saturated_throughput_uses_the_profiles_own_limits() -> None:
    p = get_profile("llama-3-8b@inf2.xlarge")
    sat = p.saturated_throughput()
    assert sat.batch == p.vllm.max_num_seqs  # the compiled batch is the limit
    assert sat.output_tokens_per_s == pytest.approx(sat.batch / sat.step_s)
    h100 = get_profile("llama-3-8b@p5.48xlarge").saturated_throughput()
    assert h100.output_tokens_per_s > 10 * sat.output_tokens_per_s
