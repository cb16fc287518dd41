"""The published A10G run replayed through the catalogue (``lab.published_ttft``)."""

from __future__ import annotations

import pytest

from lab.published_ttft import A10G_LLAMA3_8B, main, replayed, table


def test_the_replay_has_the_published_load_and_answers_every_figure_it_can() -> None:
    got = replayed("llama-3-8b@g5.xlarge", A10G_LLAMA3_8B, seed=0)
    assert set(got) == set(A10G_LLAMA3_8B.figures) - {"tpot_p99_ms"}
    assert all(v > 0 for v in got.values())
    # 100 requests of 228 + 180 tokens at about one a second: throughput near 180 tok/s
    assert got["output_tokens_per_s"] == pytest.approx(180.0, rel=0.3)
    assert got["ttft_p99_ms"] >= got["ttft_median_ms"]


def test_the_table_has_a_row_per_published_figure(capsys: pytest.CaptureFixture[str]) -> None:
    text = table("llama-3-8b@g5.xlarge")
    for name in A10G_LLAMA3_8B.figures:
        assert f"| {name} |" in text
    assert "| tpot_p99_ms | 58.80 | not replayed |" in text
    assert main([]) == 0
    assert "ttft_median_ms" in capsys.readouterr().out
