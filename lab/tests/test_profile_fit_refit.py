"""The saved runs' refit (``lab.profile_fit_refit``): the parts that read a run."""

from __future__ import annotations

from typing import Any

import pytest

from engine.profile_check import check_document, check_profile
from engine.profile_files import read_profile_file
from engine.serving_replay import ServingLoad
from lab.profile_fit_refit import (
    BASE,
    JOIN_S,
    has_waves,
    load_a_runs,
    load_b,
    load_c_document,
    run_base,
)


def _seen(clients: int) -> dict[str, float]:
    return {
        "median_ttft_s": 0.008 + 0.001 * clients, "median_itl_s": 0.003, "mean_itl_s": 0.0032,
        "p99_itl_s": 0.006, "p90_ttft_s": 0.01, "p99_ttft_s": 0.014,
        "output_throughput": 300.0 * clients, "requests": 40 * clients,
    }  # fmt: skip


REAL = {
    "median_ttft_s": 0.016, "p90_ttft_s": 0.02, "median_itl_s": 0.0037,
    "output_throughput": 750.0, "mean_itl_s": 0.0038, "p99_ttft_s": 0.03,
}  # fmt: skip


def _run() -> dict[str, Any]:
    """A bench JSON with the fields the refit reads."""
    starts = [0.5 * i for i in range(6)]
    rows = {
        "ttft_p50_ms": 9.0, "ttft_p90_ms": 12.0, "itl_p50_ms": 3.5, "itl_p90_ms": 6.0,
        "itl_p99_ms": 9.0, "output_tokens_per_s": 80.0,
    }  # fmt: skip
    return {
        "fit_load": {
            "phases": [[1, 25.0, 64], [4, 25.0, 256]],
            "output_tokens": 48,
            "seen_by_clients": [_seen(1), _seen(4)],
        },
        "fits": {
            "bench": {"stalls": {"wake_s": 0.003, "wake_tau_s": 0.5, "wake_max_idle_s": 3.0}},
            "metrics": {"num_gpu_blocks": 900},
        },
        "real": REAL,
        "check_load": {
            "num_requests": 12,
            "prompt_tokens": 200,
            "output_tokens": 96,
            "max_concurrency": 3,
        },
        "rate_check_load": {"request_rate": 1.5, "prompt_tokens": 128, "output_tokens": 64},
        "rate_check_requests": {"start_s": starts, "ttft_s": [0.009 + 0.001 * i for i in range(6)]},
        "rate_checks": {
            "fitted_from_bench": {"rows": [{"metric": m, "measured": v} for m, v in rows.items()]}
        },
        "target_relative_error": 0.25,
    }


BURSTY: Any = "bursty"  # no description the refit knows


def test_load_a_is_read_phase_by_phase_under_either_description() -> None:
    """Each phase keeps its clients, prompt and medians; steady clients spread over one
    decode and pause a gap, the old description over the join time, in step after."""
    steady = load_a_runs(_run(), "steady")
    together = load_a_runs(_run(), "together")
    assert [r.load.max_concurrency for r in steady] == [1, 4]
    assert [r.load.prompt_tokens for r in steady] == [64, 256]
    assert [r.median_ttft_s for r in steady] == pytest.approx([0.009, 0.012])
    assert steady[1].load.first_arrivals_over_s == pytest.approx(0.003 * 48)
    assert steady[1].load.think_s == pytest.approx(0.003)
    assert together[1].load.first_arrivals_over_s == JOIN_S
    assert together[1].load.think_s == 0.0
    with pytest.raises(ValueError, match="clients must be one of"):
        load_a_runs(_run(), BURSTY)
    assert not has_waves(_run())


def _run_with_waves() -> dict[str, Any]:
    run = _run()
    run["fit_load"]["phases"].append([4, 25.0, 448])
    run["fit_load"]["seen_by_clients"].append(_seen(4))
    run["fit_load"]["phases_in_step"] = [False, False, True]
    return run


def test_the_waves_are_replayed_in_step_under_either_description_or_left_out() -> None:
    """A phase sent in waves starts its clients together with no pause (identical
    requests then stay in step); without waves the refit reads the other phases alone."""
    run = _run_with_waves()
    assert has_waves(run)
    for clients in ("steady", "together"):
        wave = load_a_runs(run, clients)[-1]
        assert (wave.load.max_concurrency, wave.load.prompt_tokens) == (4, 448)
        assert wave.load.first_arrivals_over_s == 0.0
        assert wave.load.think_s == 0.0
    without = load_a_runs(run, "steady", waves=False)
    assert [r.load.prompt_tokens for r in without] == [64, 256]


def test_the_base_takes_the_runs_capacity_and_wake_up() -> None:
    base = run_base(_run(), read_profile_file(BASE))
    assert base.vllm.num_gpu_blocks == 900
    assert (base.stalls.wake_s, base.stalls.wake_tau_s, base.stalls.wake_max_idle_s) == (
        0.003,
        0.5,
        3.0,
    )


def test_loads_b_and_c_are_read_from_the_run() -> None:
    """Load B is the run's recorded load; load C becomes a result file the check
    replays at its own send times, with the measured figures as the run kept them."""
    assert load_b(_run()) == ServingLoad(12, 200, 96, max_concurrency=3)
    profile = run_base(_run(), read_profile_file(BASE))
    doc = load_c_document(_run())
    assert doc["input_lens"] == [128] * 6 and doc["output_lens"] == [64] * 6
    check = check_document(check_profile(profile, doc, "load C"), source="load C", tolerance=0.25)
    measured = {r["metric"]: r["measured"] for r in check["rows"]}
    assert check["load"]["requests"] == 6 and check["load"]["send_times"]
    assert measured["itl_p90_ms"] == pytest.approx(6.0)
    assert measured["output_tokens_per_s"] == pytest.approx(80.0)
    assert measured["ttft_p50_ms"] == pytest.approx(11.5)
