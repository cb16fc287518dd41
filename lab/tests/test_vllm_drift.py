"""The drift probe's per-phase figures (``lab.vllm_drift``): the pure part."""

from __future__ import annotations

import pytest

from lab.vllm_drift import phase_figures
from lab.vllm_streaming import Response


def test_a_phase_reads_its_medians_and_tokens_per_second() -> None:
    responses = [
        Response(ttft_s=0.010 * k, gaps_s=(0.003, 0.003, 0.005), after_first_s=0.011, tokens=4)
        for k in (1, 2, 3)
    ]
    figures = phase_figures(responses, seconds=2.0)
    assert figures["requests"] == 3
    assert figures["ttft_p50_ms"] == pytest.approx(20.0)
    assert 20.0 < figures["ttft_p90_ms"] <= 30.0
    assert figures["gap_p50_ms"] == pytest.approx(3.0)
    assert figures["tokens_per_s"] == pytest.approx(6.0)
