"""`prescaler demo --emulator`: one emulated replica behind real HTTP."""

from __future__ import annotations

import math

import pytest

from prescaler.cli import main
from prescaler.demo_emulator import Outcome, load_schedule, metrics_excerpt, summary_table


def test_emulator_demo_runs_short_and_prints_summary(capsys: pytest.CaptureFixture[str]) -> None:
    """`demo --emulator`: a 2-second run exits 0 with the client table and the metrics."""
    code = main(["demo", "--emulator", "--duration", "2", "--profile", "llama-3-8b@p5.48xlarge",
                 "--rate", "5"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "requests sent / completed" in out
    sent, done = out.split("requests sent / completed")[1].split("\n")[0].split("/")
    assert int(sent) == int(done) > 0
    assert "TTFT p50 / p90 / p99" in out and "TPOT p50 / p99" in out
    assert 'vllm:num_requests_waiting{engine="0"' in out
    assert "vllm:generation_tokens_total{" in out


def test_schedule_has_a_burst_and_is_reproducible() -> None:
    """The middle fifth carries about 4x the calm rate; the same seed gives the same plan."""
    plan = load_schedule(100.0, 2.0, seed=3)
    assert plan == load_schedule(100.0, 2.0, seed=3)
    burst = sum(40 <= r.at_s < 60 for r in plan)
    calm = sum(r.at_s < 40 for r in plan)
    assert 2.5 < (burst / 20) / (calm / 40) < 6
    assert all(100 <= r.prompt_words <= 600 and 32 <= r.max_tokens <= 192 for r in plan)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_schedule_rejects_bad_arguments(bad: float) -> None:
    """Durations and rates must be finite and positive (a NaN one used to loop for ever)."""
    with pytest.raises(ValueError, match="duration"):
        load_schedule(bad, 1.0)
    with pytest.raises(ValueError, match="rate"):
        load_schedule(10, bad)


def test_summary_and_excerpt_are_plain_text() -> None:
    """The table reports percentiles in ms; the excerpt keeps only the sample lines asked for."""
    table = summary_table(
        [Outcome(0.1, 0.02, 10, 1.0, True), Outcome(None, None, 0, 1.0, False)], 2.0
    )
    assert "2 / 1" in table and "100 ms" in table and "20 ms" in table
    text = "# HELP vllm:num_requests_running x\nvllm:num_requests_running 1.0\nother 2\n"
    assert metrics_excerpt(text) == "vllm:num_requests_running 1.0"


def test_emulator_demo_refuses_a_nan_rate(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--emulator", "--duration", "1", "--rate", "nan"]) == 2
    assert "rate" in capsys.readouterr().err
