"""Rebuilding a kept run's fitted profile (``lab.profile_fit_spread``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from engine.profile_files import read_profile_file
from engine.profile_types import EngineStalls, Profile, RequestOverhead
from engine.serving_replay import replay_load
from lab.profile_fit_spread import BASE, WAVES, fitted_profile, spread_row


def _fitted() -> Profile:
    """The base as a fit might leave it: every recorded part moved."""
    base = read_profile_file(BASE)
    hardware = dataclasses.replace(
        base.hardware, eta_mem=1.0, bandwidth_gbps=16.8, eta_compute=0.9, step_overhead_s=0.0025
    )
    return dataclasses.replace(
        base.with_vllm(num_gpu_blocks=8192),
        hardware=hardware,
        request_overhead=RequestOverhead(in_fixed_s=0.0038),
        stalls=EngineStalls(share=0.11, mean_s=0.0012, admit_chance=0.58, admit_mean_s=0.0013),
    )


def _record(profile: Profile) -> dict[str, Any]:
    """What the bench records of a fit (``_fit_doc``'s fields the rebuild reads)."""
    hw = profile.hardware
    return {
        "hardware": {
            "eta_mem": hw.eta_mem, "bandwidth_gbps": hw.bandwidth_gbps,
            "eta_compute": hw.eta_compute, "bf16_tflops": hw.bf16_tflops,
            "step_overhead_s": hw.step_overhead_s,
        },
        "num_gpu_blocks": profile.vllm.num_gpu_blocks,
        "block_size": profile.vllm.block_size,
        "request_overhead_in_fixed_s": profile.request_overhead.in_fixed_s,
        "stalls": dataclasses.asdict(profile.stalls),
        "factors": {"compute": 1.8, "bandwidth": 3.4},
    }  # fmt: skip


def test_a_recorded_fit_rebuilds_the_profile_it_came_from() -> None:
    fitted = _fitted()
    assert fitted_profile(_record(fitted), read_profile_file(BASE)) == fitted


def test_a_row_replays_load_b_and_the_waves_through_the_rebuilt_profile() -> None:
    fitted = _fitted()
    doc: dict[str, Any] = {
        "fits": {"bench": _record(fitted)},
        "check_load": {
            "num_requests": 12, "prompt_tokens": 200, "output_tokens": 96, "max_concurrency": 3,
        },
        "real": {"median_ttft_s": 0.012},
        "fit_load": {
            "phases": [[4, 25.0, 256], [4, 25.0, 448]],
            "phases_in_step": [False, True],
            "seen_by_clients": [{"median_ttft_s": 0.01}, {"median_ttft_s": 0.02}],
        },
    }  # fmt: skip
    row = spread_row(doc, "bench", read_profile_file(BASE))
    assert row["waves_ttft_ms"] == 1e3 * replay_load(fitted, WAVES).median_ttft_s
    assert row["waves_real_ms"] == 20.0
    assert row["b_real_ms"] == 12.0
    assert row["compute"] == 1.8
    del doc["fit_load"]["phases_in_step"]  # a run kept before the waves
    assert spread_row(doc, "bench", read_profile_file(BASE))["waves_real_ms"] is None


def test_a_refit_is_read_as_its_refit() -> None:
    """A refit file keeps the run's own fit beside the refit: the row is the refit's,
    its load B as the refit recorded it, the waves only where it recorded hardware."""
    fitted = _fitted()
    refit = {**_record(fitted), "factors": {"compute": 0.4, "bandwidth": 1.2}}
    doc: dict[str, Any] = {
        "fits": {"bench": _record(read_profile_file(BASE))},
        "refit": refit,
        "predictions": {"fitted_from_bench": {"predicted": {"median_ttft_s": 0.025}}},
        "real": {"median_ttft_s": 0.012},
        "fit_load": {"seen_by_clients": [{"median_ttft_s": 0.01}]},
    }
    row = spread_row(doc, "bench", read_profile_file(BASE))
    assert (row["compute"], row["b_ttft_ms"]) == (0.4, 25.0)
    assert row["waves_ttft_ms"] == 1e3 * replay_load(fitted, WAVES).median_ttft_s
    del refit["hardware"]  # a refit written before it recorded its hardware
    assert spread_row(doc, "bench", read_profile_file(BASE))["waves_ttft_ms"] is None
