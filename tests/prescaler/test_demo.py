"""`prescaler demo`: the simulator comparison by default, the emulator demo behind a flag."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from engine.profiles import get_profile
from prescaler.cli import main
from prescaler.demo import Outcome, load_schedule, metrics_excerpt, oracle_note, summary_table
from simulations.report import CEILING_LABEL
from simulations.runner import idle_attainment
from simulations.traffic import DEFAULT_TOKENS_TRACE, TrafficOptions, load_workload


def test_demo_replays_the_shipped_trace_under_four_policies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default demo (what `make demo` runs) compares static, reactive, predictive
    and oracle on the shipped trace, prints the table and writes plots + JSON."""
    code = main(["demo", "--duration", "240", "--out", str(tmp_path), "--quiet", "--jobs", "1"])
    out = capsys.readouterr().out
    assert code == 0
    header = out.splitlines()[2]
    assert all(name in header for name in ("static", "reactive", "predictive", "oracle"))
    assert "P99 TTFT" in out and "cost ratio to oracle" in out
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert list(doc["policies"]) == ["static", "reactive", "predictive", "oracle"]
    assert (tmp_path / "timeline.png").exists() and (tmp_path / "timeline-ttft.png").exists()
    # the best any fleet could do on these 240 s, under every column
    workload = load_workload(str(DEFAULT_TOKENS_TRACE), TrafficOptions(duration_s=240.0))
    ceiling = idle_attainment(workload, get_profile("llama-3-8b@g5.xlarge"), 1.0)
    row = next(line for line in out.splitlines() if line.startswith(CEILING_LABEL))
    assert row.split()[-4:] == [f"{100 * ceiling:.1f}", "%"] * 2
    # one plain line per column, no project jargon
    static = doc["policies"]["static"]["static_replicas"]
    assert f"static      {static} replicas always on" in out
    for name in ("reactive", "predictive", "oracle"):
        assert any(
            line.strip().startswith(f"{name} ") for line in out.split("what each")[1].splitlines()
        )
    assert f"the other {100 * (1 - ceiling):.1f} % of prompts" in out
    assert "seeds" not in out


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


@pytest.mark.parametrize("bad", ["0", "nan", "inf"])
def test_demo_refuses_bad_duration(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    """--duration must be a finite positive number."""
    assert main(["demo", "--emulator", "--duration", bad]) == 2
    assert "--duration" in capsys.readouterr().err
    assert main(["demo", "--duration", bad]) == 2
    assert "--duration" in capsys.readouterr().err


def test_demo_refuses_a_nan_rate(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--emulator", "--duration", "1", "--rate", "nan"]) == 2
    assert "rate" in capsys.readouterr().err


def _doc(oracle: float, predictive: float) -> dict[str, Any]:
    return {
        "policies": {
            "predictive": {
                "slo_attainment": predictive,
                "mean_replicas": 11.75,
                "cost_ratio_to_oracle": 1.77,
            },
            "oracle": {"slo_attainment": oracle, "mean_replicas": 7.05},
        }
    }


def test_oracle_note_says_why_only_when_the_oracle_trails() -> None:
    """Below predictive, the note gives both attainments, the oracle's sizing (85 % of
    what replicas sustain, nothing spare for bursts, one average start-up ahead, the
    node start-up range) and what predictive pays for its margin; at or above it, no
    note."""
    profile = get_profile("llama-3-8b@g5.xlarge")
    note = oracle_note(_doc(0.8304, 0.8379), profile)
    assert note is not None
    for part in ("83.0 % vs 83.8 %", "85 %", "(150 s) ahead", "30 to 90 s", "11.8 vs 7.0", "burst"):
        assert part in note, (part, note)
    assert "1.77x" in note
    assert oracle_note(_doc(0.84, 0.8379), profile) is None
    assert oracle_note({"policies": {"oracle": {"slo_attainment": 0.5}}}, profile) is None
