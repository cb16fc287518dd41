"""The first token's parts (``lab.vllm_ttft_parts``): the pure part."""

from __future__ import annotations

import pytest

from lab.vllm_streaming import Response
from lab.vllm_ttft_parts import parts


def test_a_phase_splits_the_clients_mean_ttft_by_the_servers_sums() -> None:
    responses = [
        Response(ttft_s=t, gaps_s=(0.003, 0.004), after_first_s=0.007, tokens=3)
        for t in (0.010, 0.014)
    ]
    # what two requests added to the sums: server TTFT 20 ms, queue 0.2 ms, prefill 12 ms;
    # a histogram the page lacked counts as nothing added
    before = {"server_ttft_s": 1.0, "server_queue_s": 0.5, "server_prefill_s": 2.0}
    after = {"server_ttft_s": 1.020, "server_queue_s": 0.5002, "server_prefill_s": 2.012}
    figures = parts(responses, before, after)
    assert figures["requests"] == 2
    assert figures["client_ttft_ms"] == pytest.approx(12.0)
    assert figures["server_ttft_ms"] == pytest.approx(10.0)
    assert figures["outside_server_ms"] == pytest.approx(2.0)
    assert figures["queue_ms"] == pytest.approx(0.1)
    assert figures["prefill_ms"] == pytest.approx(6.0)
    assert figures["gap_p50_ms"] == pytest.approx(3.5)
