"""The idle-wake probe's table (``lab.vllm_idle_wake``): the pure part."""

from __future__ import annotations

import pytest

from lab.vllm_idle_wake import PAUSES_S, summary


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
