"""`prescaler demo`: the recipe as written, tuned KEDA and tuned prescaler on the
held-back part of the shipped trace, from the shipped tuned fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from engine.profiles import get_profile
from prescaler.cli import main
from prescaler.demo_tuned import FIXTURE, HOLDOUT, held_back_start, load_fixture
from simulations.runner import idle_attainment
from simulations.traffic import DEFAULT_TOKENS_TRACE, TrafficOptions, load_workload

LABELS = (
    "what you run today",
    "KEDA tuned: queue",
    "KEDA tuned: queue + KV",
    "prescaler tuned",
    "static fleet",
    "oracle",
    "hindsight schedule",
    "best possible",
)


def test_demo_scores_the_tuned_setups_on_the_held_back_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default demo (what `make demo` runs), on 240 s of the held-back part:
    every row with its attainment, cost and meaning, the verdict with the cost
    ratio to the best tuned KEDA, what it does not show, and its files."""
    code = main(["demo", "--duration", "240", "--out", str(tmp_path), "--quiet", "--jobs", "1",
                 "--no-plot"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    table = out.split("what each row is:")[0]
    starts = [next(i for i, line in enumerate(table.splitlines()) if line.startswith(label))
              for label in LABELS]  # fmt: skip
    assert starts == sorted(starts)
    meanings = out.split("what each row is:")[1]
    assert all(f"  {label}" in meanings for label in LABELS)
    doc = json.loads((tmp_path / "summary.json").read_text())
    demo = doc["demo"]
    assert [r["label"] for r in demo["rows"]] == list(LABELS)
    # scored where tune's held-back part starts, the ceiling of that window
    start = held_back_start(str(DEFAULT_TOKENS_TRACE), HOLDOUT)
    assert demo["held_back_start_s"] == start
    window = TrafficOptions(start_s=start, duration_s=240.0)
    workload = load_workload(str(DEFAULT_TOKENS_TRACE), window)
    ceiling = idle_attainment(workload, get_profile("llama-3-8b@g5.xlarge"), 1.0)
    assert demo["rows"][-1]["slo_attainment"] == ceiling
    # the ratio is the rows' own figures, and the verdict says it in words
    rows = {r["policy"]: r for r in demo["rows"]}
    ratio = demo["cost_ratio_prescaler_to_best_keda"]
    keda = rows[demo["best_tuned_keda"]]
    assert ratio == rows["prescaler-tuned"]["cost_per_month_usd"] / keda["cost_per_month_usd"]
    assert demo["outcome"] in ("win", "tie", "loss")
    assert f"{ratio:.2f}x the cost of {keda['label']}" in " ".join(out.split())
    assert demo["tuning"]["prescaler"]["met_target"] is True
    assert "a team on plain KEDA, before adopting prescaler's trigger" in out
    assert "what this does not show" in out and "a simulator rather than a cluster" in out
    # the tuned ScaledObjects the rows ran, each readable and named after its row
    for side in load_fixture(FIXTURE).sides:
        path = tmp_path / "scaledobjects" / f"{side.run_name}.yaml"
        assert yaml.safe_load(path.read_text())["metadata"]["name"] == side.run_name
        assert side.run_name in doc["policies"]
    # the plots are simulate's (tests/simulations/test_report.py); drawing six
    # panels is most of a demo's time, so this run skips them
    assert not (tmp_path / "timeline.png").exists() and "plots:" not in out


def test_demo_refuses_a_fixture_tuned_for_another_profile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Scoring settings tuned for one GPU on another would mislead: refused,
    naming the fixture and the command that re-tunes."""
    assert main(["demo", "--profile", "llama-3-8b@p5.48xlarge", "--duration", "60"]) == 2
    err = capsys.readouterr().err
    assert str(FIXTURE) in err and "--retune" in err


@pytest.mark.parametrize(
    ("flags", "named"),
    [(["--duration", "0"], "--duration"), (["--duration", "nan"], "--duration"),
     (["--duration", "inf"], "--duration"), (["--emulator", "--duration", "0"], "--duration"),
     (["--jobs", "0"], "--jobs"), (["--retune", "--trials", "0"], "--trials")],
)  # fmt: skip
def test_demo_refuses_bad_flags(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", *flags]) == 2
    assert named in capsys.readouterr().err
