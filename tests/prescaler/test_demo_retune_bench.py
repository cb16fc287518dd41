"""Benchmark (``-m bench``): regenerate the demo's tuned fixture with its
documented command, ``prescaler demo --retune``, into a temporary file, then
score it as the demo does.

It checks the regenerated fixture has the documented protocol (every side
the same trials, seed and held-back share) and the same sides as the shipped
one, and records each side's chosen setting, its tuning-part and held-back
figures, whether it equals the shipped fixture's (the study runs in
``--bench-jobs`` processes, default 2, whose interleaving can
change what TPE samples, so equality is recorded, not required), the demo's
verdict and the wall time. ``--bench-trials`` (default the documented 100)
narrows the budget for a quick look. Writes
``bench-results/demo_retune.json``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from prescaler.cli import main
from prescaler.demo_tuned import FIXTURE, HOLDOUT, PRUNE, SEED, TRIALS, load_fixture
from tests.support.options import suite_options

pytestmark = [pytest.mark.bench, pytest.mark.timeout(2 * 3600)]

RESULTS = Path(__file__).resolve().parents[2] / "bench-results"


def test_retune_regenerates_the_fixture(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trials = suite_options().bench_trials or TRIALS
    jobs = suite_options().bench_jobs or 2
    path = tmp_path / "demo_tuned.yaml"
    wall0 = time.perf_counter()
    code = main(["demo", "--retune", "--tuned", str(path), "--trials", str(trials),
                 "--jobs", str(jobs), "--out", str(tmp_path / "out"), "--quiet"])  # fmt: skip
    wall = time.perf_counter() - wall0
    out = capsys.readouterr().out
    assert code == 0, out
    fresh, shipped = load_fixture(path), load_fixture(FIXTURE)
    assert (fresh.trials, fresh.holdout, fresh.seed) == (trials, HOLDOUT, SEED)
    assert fresh.prune == PRUNE
    assert [s.name for s in fresh.sides] == [s.name for s in shipped.sides]
    assert all(trials <= s.trials <= trials + jobs - 1 for s in fresh.sides)
    demo = json.loads((tmp_path / "out" / "summary.json").read_text())["demo"]
    sides = {}
    for side in fresh.sides:
        was = shipped.side(side.name)
        sides[side.name] = {
            "setting": dict(side.setting),
            "same_as_shipped": was is not None and dict(was.setting) == dict(side.setting),
            "tuning": None if side.tuning is None else vars(side.tuning),
            "held_back": None if side.held_back is None else vars(side.held_back),
        }
    RESULTS.mkdir(exist_ok=True)
    report = {"trials": trials, "jobs": jobs, "wall_s": round(wall, 1), "sides": sides,
              "rows": demo["rows"], "best_tuned_keda": demo["best_tuned_keda"],
              "cost_ratio_prescaler_to_best_keda": demo["cost_ratio_prescaler_to_best_keda"],
              "outcome": demo["outcome"], "verdict": demo["verdict"]}  # fmt: skip
    (RESULTS / "demo_retune.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: report[k] for k in ("wall_s", "outcome", "verdict")}, indent=2))
