"""The streaming probe's per-phase figures tell a streamed response from a buffered one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab.vllm_streaming import Response, summary


def test_a_streamed_response_has_one_chunk_per_token_and_steady_gaps() -> None:
    streamed = [Response(0.010, (0.002,) * 47, 0.094, 48) for _ in range(10)]
    figures = summary(streamed)
    assert figures["ttft_p50_ms"] == pytest.approx(10.0)
    assert figures["gap_p50_ms"] == pytest.approx(2.0)
    assert figures["tpot_p50_ms"] == pytest.approx(2.0)
    assert figures["chunks_per_response"] == 48


def test_a_buffered_response_shows_as_a_long_ttft_and_gaps_near_zero() -> None:
    """The whole response arrives at once: TTFT is the request's whole time."""
    buffered = [Response(0.096, (1e-6,) * 47, 47e-6, 48) for _ in range(9)]
    buffered.append(Response(0.300, (1e-6,) * 47, 47e-6, 48))
    figures = summary(buffered)
    assert figures["ttft_p50_ms"] == pytest.approx(96.0)
    assert figures["ttft_p90_ms"] == pytest.approx(116.4)  # numpy's linear p90
    assert figures["gap_p50_ms"] < 0.01 and figures["tpot_p50_ms"] < 0.01


def test_a_probe_s_result_file_says_where_the_server_and_its_clients_ran(tmp_path: Path) -> None:
    from lab.vllm_streaming import PinnedServer, write_run

    out = tmp_path / "runs" / "probe.json"
    write_run(out, PinnedServer("http://127.0.0.1:1", [1], [0]), {"phases": [1, 2]})
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["server_cpus"] == [1] and doc["client_cpus"] == [0]
    assert doc["phases"] == [1, 2] and doc["loadavg_1m_after"] >= 0
