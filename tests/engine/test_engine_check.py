"""``prescaler engine check`` (and ``prescaler engine load``) against a real emulator
server: the replayed load must predict what the server's clients saw, a profile's
request overhead must reach them, and ``--record`` must write the outcome."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from engine.check_cli import format_check
from engine.percentile import percentile
from engine.profile_check import (
    NothingToCompareError,
    check_document,
    check_profile,
)
from engine.profile_files import read_profile_file, write_profile_file
from engine.profile_types import RequestOverhead
from engine.profiles import get_profile
from tests.support.cli_run import run_cli
from tests.support.emulator import emulator_process

DATA = Path(__file__).parent / "data" / "check"
#: A run of ``prescaler engine load`` against ``prescaler emulate --profile FIXTURE_PROFILE``
#: (regenerate: python -m tests.engine.test_engine_check)
FIXTURE = DATA / "emulator_load_result.json"
FIXTURE_PROFILE = "llama-3-8b@g5.xlarge"
FIXTURE_LOAD = ["--num-prompts", "24", "--input-len", "300", "--output-len", "24",
                "--max-concurrency", "4"]  # fmt: skip
OVERHEAD = RequestOverhead(
    in_fixed_s=0.04, in_per_prompt_token_s=2e-5, out_fixed_s=0.02, out_per_output_token_s=0.002
)


def _rows(report: dict[str, object]) -> dict[str, dict[str, float | None]]:
    return {r["metric"]: r for r in report["rows"]}  # type: ignore[attr-defined,index]


def test_a_shipped_result_file_is_checked_side_by_side() -> None:
    """The stored run (the emulator, the same profile): every figure measured, each
    prediction within 25 %, exit 0; the text shows measured, predicted and error."""
    code, stdout, stderr = run_cli(
        ["engine", "check", "--profile", FIXTURE_PROFILE, "--bench-result", str(FIXTURE),
         "--json"]
    )  # fmt: skip
    assert code == 0, stderr
    report = json.loads(stdout)
    rows = _rows(report)
    assert set(rows) == {f"{m}_p{p}_ms" for m in ("ttft", "itl") for p in (50, 90, 99)} | {
        "output_tokens_per_s"
    }
    assert all(r["measured"] is not None and r["predicted"] > 0 for r in rows.values())
    assert report["passed"] and report["max_abs_error"] <= 0.25
    assert report["load"]["per_request_lengths"] and report["load"]["send_times"]
    code, text, _ = run_cli(
        ["engine", "check", "--profile", FIXTURE_PROFILE, "--bench-result", str(FIXTURE)]
    )
    assert code == 0 and "measured" in text and "ttft_p90_ms" in text and " %" in text


def test_a_vllm_result_without_per_request_lists_uses_its_own_percentiles() -> None:
    """``vllm bench serve --save-result`` without ``--save-detailed`` keeps medians and
    p99 only: those are compared, p90 is shown unmeasured."""
    doc = json.loads(FIXTURE.read_text())
    for key in ("input_lens", "output_lens", "ttfts", "itls", "errors", "start_times"):
        del doc[key]
    for key in [k for k in doc if k.startswith("p90_")]:
        del doc[key]
    check = check_profile(get_profile(FIXTURE_PROFILE), doc, "run.json")
    rows = {r.metric: r for r in check.rows}
    assert rows["ttft_p90_ms"].measured is None and rows["ttft_p90_ms"].error is None
    assert rows["ttft_p50_ms"].measured == doc["median_ttft_ms"]
    assert rows["itl_p99_ms"].measured == doc["p99_itl_ms"]
    assert check.load.lengths is None


def test_a_profile_that_is_off_fails_the_check() -> None:
    """A profile twice as slow in memory: the check names the worst figure and exits 1."""
    slow = get_profile(FIXTURE_PROFILE)
    slow = dataclasses.replace(
        slow, hardware=dataclasses.replace(slow.hardware, eta_mem=slow.hardware.eta_mem / 2)
    )
    check = check_profile(slow, json.loads(FIXTURE.read_text()), "run.json")
    assert check.max_abs_error > 0.5 and check.worst is not None
    assert check.worst.metric.startswith("itl") or check.worst.metric == "output_tokens_per_s"


def test_check_against_a_running_emulator_with_request_overhead(tmp_path: Path) -> None:
    """``--url``: a load on ``prescaler emulate`` serving a profile with time outside the
    scheduler. Its own profile predicts the clients' TTFT and ITL; the same profile
    without the overhead misses TTFT by about that time (so the server carried it);
    ``--record`` writes the outcome into the file, which still loads, equal."""
    profile = dataclasses.replace(get_profile(FIXTURE_PROFILE), request_overhead=OVERHEAD)
    path = write_profile_file(profile, tmp_path / "with-overhead.yaml", "a test profile")
    saved = tmp_path / "run.json"
    with emulator_process(profile=str(path)) as url:
        code, stdout, stderr = run_cli(
            ["engine", "check", "--profile", str(path), "--url", url, *FIXTURE_LOAD,
             "--save-result", str(saved), "--record", "--json"]
        )  # fmt: skip
    assert code == 0, stdout + stderr
    report = json.loads(stdout)
    rows = _rows(report)
    assert abs(rows["ttft_p50_ms"]["error"]) < 0.2  # type: ignore[arg-type]
    assert abs(rows["itl_p50_ms"]["error"]) < 0.2  # type: ignore[arg-type]
    recorded = read_profile_file(path)
    assert recorded == profile and recorded.checked is not None
    assert recorded.checked.passed and recorded.checked.against == url
    assert path.read_text().startswith("# a test profile\n")
    plain = check_profile(get_profile(FIXTURE_PROFILE), json.loads(saved.read_text()), "run")
    ttft = {r.metric: r for r in plain.rows}["ttft_p50_ms"]
    assert ttft.measured is not None
    assert ttft.measured - ttft.predicted == pytest.approx(OVERHEAD.ttft_s(300) * 1e3, rel=0.5)


def test_check_errors_are_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"completed": 3}))
    code, _, err = run_cli(["engine", "check", "--profile", FIXTURE_PROFILE, "--bench-result",
                         str(bad)])  # fmt: skip
    assert code == 2 and "total_input_tokens" in err and err.count("\n") == 1
    code, _, err = run_cli(["engine", "check", "--profile", FIXTURE_PROFILE, "--bench-result",
                         str(FIXTURE), "--record"])  # fmt: skip
    assert code == 2 and "--record" in err and err.count("\n") == 1


def test_a_check_that_compared_nothing_exits_2_and_records_nothing(tmp_path: Path) -> None:
    """A run whose every request failed (each listed with an error, or with no first
    token as an older ``engine load`` wrote a token-less stream) compares nothing: one
    line naming why, exit 2, and ``--record`` leaves the profile file as it was."""
    doc = json.loads(FIXTURE.read_text())
    doc["ttfts"] = [0.0] * len(doc["ttfts"])  # errors all "": the old token-less streams
    doc["itls"] = [[] for _ in doc["itls"]]
    run = tmp_path / "run.json"
    run.write_text(json.dumps(doc))
    path = write_profile_file(get_profile(FIXTURE_PROFILE), tmp_path / "p.yaml", "mine")
    before = path.read_text()
    code, out, err = run_cli(["engine", "check", "--profile", str(path), "--bench-result",
                           str(run), "--record", "--json"])  # fmt: skip
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "nothing to compare" in err and "no request in the run succeeded" in err
    assert path.read_text() == before


def test_a_cut_replay_without_any_measured_figure_has_no_verdict() -> None:
    """Per-request lengths but no per-request times nor send times, replay cut: the
    file's own percentiles and throughput are the whole run's, so none is compared,
    and the error says so rather than passing with an error of 0."""
    doc = json.loads(FIXTURE.read_text())
    for key in ("ttfts", "itls", "start_times"):
        del doc[key]
    with pytest.raises(NothingToCompareError, match="on the 8 replayed requests of 24"):
        check_profile(get_profile(FIXTURE_PROFILE), doc, "run.json", max_requests=8)
    whole = check_profile(get_profile(FIXTURE_PROFILE), doc, "run.json")
    assert not whole.cut and whole.worst is not None  # uncut: the file's own figures


def test_a_cut_replay_is_compared_with_the_same_requests() -> None:
    """Replay cut to the first 8 of 24 requests sent: every measured figure is those 8
    requests' own (TTFT, ITL from their lists; tokens/s from their send times and
    token times), the report says it was cut, and the text says so in a line."""
    doc = json.loads(FIXTURE.read_text())
    order = sorted(range(len(doc["start_times"])), key=lambda i: doc["start_times"][i])[:8]
    check = check_profile(get_profile(FIXTURE_PROFILE), doc, "run.json", max_requests=8)
    rows = {r.metric: r for r in check.rows}
    assert check.cut and check.load.num_requests == 8 and check.requests_in_run == 24
    first_ttfts = [doc["ttfts"][i] for i in order]
    first_gaps = [g for i in order for g in doc["itls"][i]]
    for p in (50, 90, 99):
        assert rows[f"ttft_p{p}_ms"].measured == pytest.approx(percentile(first_ttfts, p) * 1e3)
        assert rows[f"itl_p{p}_ms"].measured == pytest.approx(percentile(first_gaps, p) * 1e3)
    # the whole run's p99 TTFT is another figure: comparing with it would mix two loads
    assert rows["ttft_p99_ms"].measured != pytest.approx(doc["p99_ttft_ms"])
    ends = [doc["start_times"][i] + doc["ttfts"][i] + sum(doc["itls"][i]) for i in order]
    tokens = sum(doc["output_lens"][i] for i in order)
    span = max(ends) - min(doc["start_times"][i] for i in order)
    assert rows["output_tokens_per_s"].measured == pytest.approx(tokens / span)
    report = check_document(check, source="run.json", tolerance=0.25)
    assert report["load"]["cut"] and report["load"]["requests_in_run"] == 24
    assert "replayed the first 8 of the run's 24 successful requests" in format_check(report)
    del doc["start_times"]
    unsent = check_profile(get_profile(FIXTURE_PROFILE), doc, "run.json", max_requests=8)
    assert {r.metric: r for r in unsent.rows}["output_tokens_per_s"].measured is None
    text = format_check(check_document(unsent, source="run.json", tolerance=0.25))
    assert "output_tokens_per_s unmeasured: the file has no start_times" in text
    uncut = check_document(
        check_profile(get_profile(FIXTURE_PROFILE), json.loads(FIXTURE.read_text()), "r"),
        source="r",
        tolerance=0.25,
    )
    assert not uncut["load"]["cut"] and "replayed the first" not in format_check(uncut)


if __name__ == "__main__":
    # regenerate the fixture against a fresh emulator
    with emulator_process(profile=FIXTURE_PROFILE) as server:
        code, _, err = run_cli(
            ["engine", "load", server, *FIXTURE_LOAD, "--save-result", str(FIXTURE)]
        )
    assert code == 0, err
    print(FIXTURE)


def test_the_reminder_tune_prints_follows_the_checked_block() -> None:
    from engine.profile_check import check_reminder
    from engine.profile_types import CheckRecord

    profile = get_profile(FIXTURE_PROFILE)
    line = check_reminder(profile, "my.yaml")
    assert line is not None and "never checked" in line and "--profile my.yaml" in line
    assert "\n" not in line
    good = dataclasses.replace(profile, checked=CheckRecord("t", "run.json", 0.05, "x", True))
    assert check_reminder(good, "my.yaml") is None
    bad = dataclasses.replace(profile, checked=CheckRecord("t", "run.json", 0.4, "ttft_p50_ms"))
    worse = check_reminder(bad, "my.yaml")
    assert worse is not None and "ttft_p50_ms off by 40 %" in worse
