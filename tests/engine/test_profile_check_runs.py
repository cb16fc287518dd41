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
from engine.check_cli import format_check, run_path, run_seed
from engine.profile_check import check_document, check_profile
from engine.profile_check_runs import check_runs, check_runs_document, verdict
from engine.profile_files import read_profile_file, write_profile_file
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
    assert report["source"] == "a.json" and report["passed"] and report["missed"] == []
    text = format_check(report)
    assert "1 more run of the same load" in text and "run 2" in text
    assert "unsettled: ttft_p50_ms, ttft_p90_ms, ttft_p99_ms" in text
    assert "passed: no figure missed in every run" in text


def test_the_check_fails_on_a_figure_missed_in_every_run_only() -> None:
    """First tokens 30 % and 60 % later in two runs: at 20 % the TTFT figures are
    missed in both (the check fails, naming them with each run's error); against the
    stored run and one 60 % later they are missed in one run only (unsettled), and the
    check passes although the runs' median misses them."""
    profile = get_profile(PROFILE)
    both = check_runs(profile, [(_slower_first_tokens(1.3), "b"), (_slower_first_tokens(1.6), "c")])
    report = check_runs_document(both, tolerance=0.2)
    assert not report["passed"] and "ttft_p50_ms" in report["missed"]
    assert report["unsettled"] == []
    assert "FAILED: missed in every run (tolerance 20 %): ttft_p50_ms (" in format_check(report)
    one = check_runs(profile, [(DOC, "a"), (_slower_first_tokens(1.6), "c")])
    report = check_runs_document(one, tolerance=0.2)
    ttft = _rows(report)["ttft_p50_ms"]
    assert abs(ttft["error"]) > 0.2 and ttft["runs_met"] == [True, False]
    assert report["passed"] and report["missed"] == [] and "ttft_p50_ms" in report["unsettled"]


def test_a_figure_measured_in_some_runs_only_pairs_sides_from_those_runs() -> None:
    """A second run saved without per-request lists nor p90 keys: its p90 figures are
    unmeasured, so their median, measured and predicted, is the first run's alone,
    and they are neither missed nor unsettled on its account."""
    bare = copy.deepcopy(DOC)
    for key in ("input_lens", "output_lens", "ttfts", "itls", "errors", "start_times"):
        del bare[key]
    for key in [k for k in bare if k.startswith("p90_")]:
        del bare[key]
    runs = check_runs(get_profile(PROFILE), [(DOC, "a"), (bare, "b")])
    report = check_runs_document(runs, tolerance=0.25)
    first = check_document(
        check_profile(get_profile(PROFILE), DOC, "a"), source="a", tolerance=0.25
    )
    row, alone = _rows(report)["ttft_p90_ms"], _rows(first)["ttft_p90_ms"]
    assert row["runs_measured"][1] is None and row["runs_met"][1] is None
    assert row["measured"] == pytest.approx(alone["measured"])
    assert row["predicted"] == pytest.approx(alone["predicted"])


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
    paced = copy.deepcopy(DOC)
    paced["request_rate"] = 4.0
    with pytest.raises(BenchResultError, match="request_rate"):
        check_runs(get_profile(PROFILE), [(DOC, "a.json"), (paced, "d.json")])


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
    code, _, err = run_cli(
        ["engine", "check", "--profile", PROFILE, "--url", "http://127.0.0.1:9",
         "--input-len", "8", "--output-len", "8", "--runs", "0"]
    )  # fmt: skip
    assert code == 2 and "--runs must be >= 1" in err and err.count("\n") == 1


def test_record_after_several_runs_names_them_all(tmp_path: Path) -> None:
    path = write_profile_file(get_profile(PROFILE), tmp_path / "p.yaml", "mine")
    slow = tmp_path / "again.json"
    slow.write_text(json.dumps(_slower_first_tokens(1.3)))
    code, _, stderr = run_cli(
        ["engine", "check", "--profile", str(path), "--bench-result", str(FIXTURE),
         "--bench-result", str(slow), "--tolerance", "0.2", "--record"]
    )  # fmt: skip
    assert code == 0, stderr
    record = read_profile_file(path).checked
    assert record is not None and record.passed
    assert record.against == f"{FIXTURE}, {slow}"


def test_each_run_draws_its_own_arrivals_and_prompts() -> None:
    """The load client draws arrivals from the seed and prompts from the seed + 1:
    the seeds of five runs never share a draw."""
    seeds = [run_seed(7, run) for run in range(1, 6)]
    assert seeds[0] == 7
    draws = [{s, s + 1} for s in seeds]
    assert all(a.isdisjoint(b) for i, a in enumerate(draws) for b in draws[i + 1 :])


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
    assert run_path(str(saved), 2) == str(tmp_path / "run-run2.json")
    first = json.loads(saved.read_text())
    second = json.loads((tmp_path / "run-run2.json").read_text())
    assert first["completed"] == second["completed"] == 8
    assert all(len(r["runs_measured"]) == 2 for r in report["rows"])


def test_a_figure_s_verdict_reads_only_the_runs_that_measured_it() -> None:
    assert verdict([0.1, -0.2], 0.25) == "met"
    assert verdict([-0.3, 0.4, None], 0.25) == "missed"
    assert verdict([0.1, -0.3], 0.25) == "unsettled"
    assert verdict([None, None], 0.25) is None
