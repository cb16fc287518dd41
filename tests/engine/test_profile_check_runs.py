"""``engine.profile_check_runs``: a profile against several runs of one load, and
``prescaler engine check`` with ``--bench-result`` given more than once or ``--runs``."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.bench_result import BenchResultError
from engine.check_cli import format_check, run_path
from engine.profile_check import check_document, check_profile
from engine.profile_check_runs import check_runs, check_runs_document
from engine.profiles import get_profile
from tests.support.cli_run import run_cli
from tests.support.emulator import emulator_process

FIXTURE = Path(__file__).parent / "data" / "check" / "emulator_load_result.json"
PROFILE = "llama-3-8b@g5.xlarge"
DOC: dict[str, Any] = json.loads(FIXTURE.read_text())


def _slower_first_tokens(factor: float) -> dict[str, Any]:
    """The stored run with every TTFT ``factor`` times as long (a slower second run)."""
    doc = copy.deepcopy(DOC)
    doc["ttfts"] = [t * factor for t in doc["ttfts"]]
    return doc


def _rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["metric"]: r for r in report["rows"]}


@settings(max_examples=5, deadline=None)
@given(st.integers(min_value=1, max_value=4))
def test_copies_of_one_run_check_as_that_run(copies: int) -> None:
    """However often one run is given, the figures are that run's own and no run
    disagrees with another."""
    single = check_document(
        check_profile(get_profile(PROFILE), DOC, "run.json"), source="run.json", tolerance=0.25
    )
    runs = check_runs(get_profile(PROFILE), [(DOC, "run.json")] * copies)
    report = check_runs_document(runs, tolerance=0.25)
    assert report["unsettled"] == [] and len(report["runs"]) == copies
    for ours, theirs in zip(report["rows"], single["rows"], strict=True):
        assert ours["measured"] == pytest.approx(theirs["measured"])
        assert ours["predicted"] == pytest.approx(theirs["predicted"])
        assert ours["runs_error"] == [theirs["error"]] * copies
    assert report["passed"] == single["passed"]


def test_a_figure_one_run_meets_and_another_misses_is_unsettled() -> None:
    """A second run whose first tokens came 30 % later: the TTFT figures are the median
    of the two runs, the profile meets them in run 1 and misses them in run 2, and the
    report names them; ITL and throughput, alike in both runs, stay settled."""
    runs = check_runs(
        get_profile(PROFILE), [(DOC, "a.json"), (_slower_first_tokens(1.3), "b.json")]
    )
    report = check_runs_document(runs, tolerance=0.2)
    rows = _rows(report)
    first, second = rows["ttft_p50_ms"]["runs_measured"]
    assert second == pytest.approx(1.3 * first)
    assert rows["ttft_p50_ms"]["measured"] == pytest.approx((first + second) / 2)
    assert rows["ttft_p50_ms"]["runs_met"] == [True, False]
    assert set(report["unsettled"]) == {"ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms"}
    assert rows["itl_p50_ms"]["runs_met"] == [True, True]
    assert [r["source"] for r in report["runs"]] == ["a.json", "b.json"]
    assert report["source"] == "a.json" and report["passed"]  # the median is within 20 %
    text = format_check(report)
    assert "1 more run of the same load" in text and "run 2" in text
    assert "unsettled: ttft_p50_ms, ttft_p90_ms, ttft_p99_ms" in text


def test_a_run_of_another_load_is_refused_naming_the_file_and_field() -> None:
    other_cap = copy.deepcopy(DOC)
    other_cap["max_concurrency"] = 8
    with pytest.raises(BenchResultError, match=r"b\.json: field 'max_concurrency': 8 against 4"):
        check_runs(get_profile(PROFILE), [(DOC, "a.json"), (other_cap, "b.json")])
    longer = copy.deepcopy(DOC)
    longer["input_lens"] = [2 * n for n in longer["input_lens"]]
    with pytest.raises(BenchResultError, match="mean prompt tokens 600 against 300"):
        check_runs(get_profile(PROFILE), [(DOC, "a.json"), (longer, "c.json")])
    with pytest.raises(ValueError, match="at least one run"):
        check_runs(get_profile(PROFILE), [])


def test_the_cli_reads_several_results_and_says_which_figures_are_unsettled(
    tmp_path: Path,
) -> None:
    slow = tmp_path / "again.json"
    slow.write_text(json.dumps(_slower_first_tokens(1.3)))
    code, stdout, stderr = run_cli(
        ["engine", "check", "--profile", PROFILE, "--bench-result", str(FIXTURE),
         "--bench-result", str(slow), "--tolerance", "0.2", "--json"]
    )  # fmt: skip
    assert code == 0, stderr
    report = json.loads(stdout)
    assert len(report["runs"]) == 2 and not report["runs"][1]["passed"]
    assert "ttft_p50_ms" in report["unsettled"]
    code, _, err = run_cli(
        ["engine", "check", "--profile", PROFILE, "--bench-result", str(FIXTURE), "--runs", "2"]
    )
    assert code == 2 and "--runs" in err and err.count("\n") == 1


def test_runs_on_a_server_are_each_kept(tmp_path: Path) -> None:
    """``--url --runs 2``: the load twice on a running emulator, the second with the next
    seed, each result kept beside ``--save-result``; both appear in the report."""
    saved = tmp_path / "run.json"
    load = ["--num-prompts", "8", "--input-len", "300", "--output-len", "16",
            "--max-concurrency", "2"]  # fmt: skip
    with emulator_process(profile=PROFILE) as url:
        code, stdout, stderr = run_cli(
            ["engine", "check", "--profile", PROFILE, "--url", url, *load, "--runs", "2",
             "--save-result", str(saved), "--json"]
        )  # fmt: skip
    assert code in (0, 1), stderr
    report = json.loads(stdout)
    assert [r["source"] for r in report["runs"]] == [f"{url} (run 1)", f"{url} (run 2)"]
    first = json.loads(saved.read_text())
    second = json.loads(Path(run_path(str(saved), 2)).read_text())
    assert first["completed"] == second["completed"] == 8
    assert run_path(str(saved), 2).endswith("run-run2.json")
    assert all(len(r["runs_measured"]) == 2 for r in report["rows"])
