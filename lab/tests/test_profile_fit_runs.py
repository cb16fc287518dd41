"""The profile-fit runs' tables (``lab.profile_fit_runs``): the pure part."""

from __future__ import annotations

from typing import Any

from lab.profile_fit_runs import (
    check_runs_table,
    error_table,
    errors,
    errors_again,
    repeat_table,
    server_table,
    settled_table,
)


def _run(b_ttft: float, c_p90: float) -> dict[str, Any]:
    """A bench JSON with the fields the tables read: load B's relative errors,
    load C's check rows, what the server did, the wake-up and the targets."""
    b = {"median_ttft_s": b_ttft, "p90_ttft_s": -0.3, "median_itl_s": 0.0, "output_throughput": 0.1}
    c = {"ttft_p50_ms": 0.0, "ttft_p90_ms": c_p90, "itl_p50_ms": 0.2, "output_tokens_per_s": 0.0}
    fit = {
        "predictions": {"relative_error": b},
        "rows": [{"metric": m, "error": e} for m, e in c.items()],
    }
    return {
        "predictions": {f"fitted_from_{k}": fit["predictions"] for k in ("bench", "metrics")},
        "rate_checks": {f"fitted_from_{k}": {"rows": fit["rows"]} for k in ("bench", "metrics")},
        "real": {"median_ttft_s": 0.0166, "median_itl_s": 0.00376, "output_throughput": 751.2},
        "fit_load": {"idle_pauses": {"median_ttft_s_by_pause": {"0": 0.0086, "3": 0.0523}}},
        "fits": {"bench": {"stalls": {"wake_s": 0.0587, "wake_tau_s": 2.392}}},
        "target_relative_error": 0.25,
        "target_p90_ttft_relative_error": 0.35,
    }


def test_each_figure_is_held_to_its_own_target() -> None:
    row = dict((name, (error, limit)) for name, error, limit in errors(_run(-0.3, -0.3), "bench"))
    assert row["B TTFT p50"] == (-0.3, 0.25)
    assert row["B TTFT p90"] == (-0.3, 0.35)
    assert row["C TTFT p90"] == (-0.3, 0.35)
    assert len(row) == 8


def test_a_miss_is_bold_and_the_run_not_met() -> None:
    table = error_table([_run(-0.1, -0.3), _run(-0.3, -0.4)], "bench").splitlines()
    assert table[0].startswith("| run (the clients' figures) | B TTFT p50 |")
    first, second = table[2], table[3]
    assert first.startswith("| 1 | −10 | −30 |") and first.endswith("| yes |")
    assert "**−30**" in second and "**−40**" in second and second.endswith("| no |")


def test_the_server_table_reads_what_the_server_did() -> None:
    line = server_table([_run(0.0, 0.0)]).splitlines()[2]
    assert line == "| 1 | 16.6, 3.76, 751 | 8.6 / 52.3 | 58.7 ms, time constant 2.39 s |"


def test_the_repeat_table_shows_the_server_against_itself_where_it_ran_twice() -> None:
    """Only runs that ran loads B and C twice have a row; load C's throughput, which
    the repeat does not read, says so."""
    assert repeat_table([_run(0.0, 0.0)]) is None
    again = _run(0.0, 0.0)
    again["repeat"] = {
        "load_b": {"error": {"median_ttft_s": -0.12, "p90_ttft_s": 0.2, "median_itl_s": 0.03,
                             "output_throughput": -0.05}},
        "load_c": {"error": {"ttft_p50_ms": 0.31, "ttft_p90_ms": -0.4, "itl_p50_ms": 0.0,
                             "itl_p90_ms": 0.1}},
    }  # fmt: skip
    table = repeat_table([_run(0.0, 0.0), again])
    assert table is not None
    lines = table.splitlines()
    assert lines[0].startswith("| run (the server again) | B TTFT p50 |")
    # the second run as a prediction of the first misses load C's median TTFT (+31 %)
    assert lines[2] == "| 2 | −12 | +20 | +3 | −5 | +31 | −40 | +0 | n/a | no |"


def _twice(b_ttft: float, b_p90: float, again_b_p90: float) -> dict[str, Any]:
    """A run whose loads ran twice: every prediction 1.0; load B's first-run errors
    as given, its second run measuring 1.0 except ``again_b_p90`` at p90 TTFT."""
    doc = _run(b_ttft, 0.0)
    doc["predictions"] = {
        f"fitted_from_{k}": {
            "relative_error": {"median_ttft_s": b_ttft, "p90_ttft_s": b_p90,
                               "median_itl_s": 0.0, "output_throughput": 0.0},
            "predicted": {"median_ttft_s": 1.0, "p90_ttft_s": 1.0, "median_itl_s": 1.0,
                          "output_throughput": 1.0},
        }
        for k in ("bench", "metrics")
    }  # fmt: skip
    rows = [
        {"metric": m, "error": 0.0, "predicted": 1.0}
        for m in ("ttft_p50_ms", "ttft_p90_ms", "itl_p50_ms", "output_tokens_per_s")
    ]
    doc["rate_checks"] = {f"fitted_from_{k}": {"rows": rows} for k in ("bench", "metrics")}
    doc["repeat"] = {
        "load_b": {"again": {"median_ttft_s": 1.0, "p90_ttft_s": again_b_p90,
                             "median_itl_s": 1.0, "output_throughput": 1.0}},
        "load_c": {"again": {"ttft_p50_ms": 1.0, "ttft_p90_ms": 1.0, "itl_p50_ms": 2.0}},
    }  # fmt: skip
    return doc


def test_a_miss_against_both_runs_is_told_from_one_against_one() -> None:
    """Load B's p90 TTFT missed against both of the server's runs is settled; its
    median TTFT missed against the first only is not; load C's second run, kept as
    figures only, is compared with the first run's prediction (its throughput was
    not kept: not compared)."""
    doc = _twice(b_ttft=-0.3, b_p90=-0.4, again_b_p90=2.0)
    again = {name: error for name, error, _ in errors_again(doc, "bench")}
    assert again["B TTFT p50"] == 0.0 and again["B TTFT p90"] == -0.5
    assert again["C ITL p50"] == -0.5 and again["C tok/s"] is None
    table = settled_table([_run(0.0, 0.0), doc])
    assert table is not None
    line = table.splitlines()[2]
    assert line == "| 2 | the clients' figures | no, no | B TTFT p90 | B TTFT p50, C ITL p50 |"
    assert settled_table([_run(0.0, 0.0)]) is None


def test_a_run_that_replayed_both_runs_of_load_c_is_read_from_that_check() -> None:
    doc = _twice(b_ttft=0.0, b_p90=0.0, again_b_p90=1.0)
    doc["rate_checks_runs"] = {
        f"fitted_from_{k}": {
            "rows": [{"metric": m, "runs_error": [0.0, 0.1]}
                     for m in ("ttft_p50_ms", "ttft_p90_ms", "itl_p50_ms", "output_tokens_per_s")]
        }
        for k in ("bench", "metrics")
    }  # fmt: skip
    again = {name: error for name, error, _ in errors_again(doc, "bench")}
    assert again["C ITL p50"] == 0.1 and again["C tok/s"] == 0.1
    table = settled_table([doc])
    assert table is not None and "| 1 | the clients' figures | yes, yes | - | - |" in table


def test_the_check_on_both_runs_fails_only_on_a_figure_missed_in_both() -> None:
    doc = _run(0.0, 0.0)
    assert check_runs_table([doc]) is None
    rows = [
        {"metric": "ttft_p50_ms", "runs_error": [0.1, -0.3]},
        {"metric": "itl_p90_ms", "runs_error": [-0.4, -0.3]},
        {"metric": "itl_p99_ms", "runs_error": [-0.4, None]},
    ]
    doc["rate_checks_runs"] = {
        "fitted_from_bench": {"tolerance": 0.25, "rows": rows},
        "fitted_from_metrics": {"tolerance": 0.25, "rows": rows[:1]},
    }
    table = check_runs_table([doc])
    assert table is not None
    lines = table.splitlines()
    # a figure one run did not measure is judged on the other, as the check does
    assert lines[2] == (
        "| 1 | the clients' figures | failed | itl_p90_ms (−40 / −30), itl_p99_ms (−40 / n/a) "
        "| ttft_p50_ms |"
    )
    assert lines[3] == "| 1 | `/metrics` | passed | - | ttft_p50_ms |"
