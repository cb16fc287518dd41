"""The idle-wake probe's table (``lab.vllm_idle_wake``): the pure part."""

from __future__ import annotations

import pytest

from lab.vllm_idle_wake import PAUSES_S, SERVER_TIMES, histogram_sums, summary


def test_the_table_has_a_row_per_pause_with_its_own_requests_only() -> None:
    # pause p: TTFTs of 10, 20 and 30 ms plus 100 ms per second of pause
    rows = [
        {"pause_s": p, "ttft_s": 0.01 * k + 0.1 * p, "gap_p50_s": 0.003}
        for p in PAUSES_S
        for k in (1, 2, 3)
    ]
    table = summary(rows)
    assert [r["pause_s"] for r in table] == list(PAUSES_S)
    assert all(r["requests"] == 3 for r in table)
    for r in table:
        assert r["ttft_p50_ms"] == pytest.approx(20.0 + 100.0 * r["pause_s"])
        assert r["ttft_p50_ms"] < r["ttft_p90_ms"] <= 30.0 + 100.0 * r["pause_s"]
        assert r["gap_p50_ms"] == pytest.approx(3.0)


PAGE = """\
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.01"} 2
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf"} 3
vllm:time_to_first_token_seconds_count{engine="0"} 3
vllm:time_to_first_token_seconds_sum{engine="0"} 0.05
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf"} 1
vllm:time_to_first_token_seconds_count{engine="1"} 1
vllm:time_to_first_token_seconds_sum{engine="1"} 0.02
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf"} 4
vllm:request_queue_time_seconds_count{engine="0"} 4
vllm:request_queue_time_seconds_sum{engine="0"} 0.001
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0"} 0
"""


def test_the_server_times_are_the_histograms_sums_over_label_sets() -> None:
    sums = histogram_sums(PAGE)
    assert sums == pytest.approx({"server_ttft_s": 0.07, "server_queue_s": 0.001})
    # histograms the page lacks are left out, not read as 0
    assert "server_prefill_s" not in sums and set(sums) <= set(SERVER_TIMES)


def test_the_table_carries_a_server_time_only_where_every_row_has_it() -> None:
    rows = [
        {"pause_s": 0.0, "ttft_s": 0.01, "gap_p50_s": 0.003, "server_prefill_s": 0.004},
        {"pause_s": 0.0, "ttft_s": 0.02, "gap_p50_s": 0.003, "server_prefill_s": 0.006},
        {"pause_s": 0.02, "ttft_s": 0.01, "gap_p50_s": 0.003, "server_prefill_s": 0.004},
        {"pause_s": 0.02, "ttft_s": 0.01, "gap_p50_s": 0.003},
    ]
    first, second = summary(rows)
    assert first["server_prefill_p50_ms"] == pytest.approx(5.0)
    assert "server_prefill_p50_ms" not in second
    assert [r["pause_s"] for r in summary(rows)] == [0.0, 0.02]


@pytest.mark.parametrize("load_client", [False, True])
def test_the_probe_runs_against_the_emulator_over_http(
    monkeypatch: pytest.MonkeyPatch, load_client: bool
) -> None:
    """Every pause is run as often as the others and each row keeps its own pause
    (through ``prescaler engine load``'s client too); the server times are what one
    request added to the emulator's histograms (it renders TTFT, queue and e2e)."""
    import asyncio
    import random
    from collections import Counter

    import lab.vllm_idle_wake as probe
    from tests.support.emulator import running_emulator

    monkeypatch.setattr(probe, "PAUSES_S", (0.0, 0.01))
    monkeypatch.setattr(probe, "REPEATS", 2)
    shape = probe.Shape(prompt_tokens=16, output_tokens=4, server_times=True)
    # stream_one asks for the model the probe's own server serves
    with running_emulator(served_model_name="tiny") as url:
        rows = asyncio.run(probe._run(url, random.Random(0), shape, 0.0, load_client))
    assert Counter(r["pause_s"] for r in rows) == {0.0: 2, 0.01: 2}
    assert all(r["ttft_s"] > 0 and r["gap_p50_s"] >= 0 for r in rows)
    if load_client:
        from engine.load_client import LoadSpec

        spec = LoadSpec(
            num_requests=5, prompt_tokens=16, output_tokens=4, idle_pauses_s=(0.0, 0.01)
        )
        assert [r["pause_s"] for r in rows] == spec.pauses()
        assert not any(k.startswith("server_") for r in rows for k in r)
    else:
        for r in rows:
            # one request's share of each sum; the whole request outlasts its first token
            assert 0 < r["server_ttft_s"] <= r["server_e2e_s"]
            assert r["server_queue_s"] >= 0
