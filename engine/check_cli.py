"""``prescaler engine check``: does a profile predict what a real server measured?

A thin shell around ``engine.profile_check_runs``: reads one or several
``vllm bench serve`` results of one load (or puts the load on a running
server with ``engine.load_client``, as often as ``--runs`` says, and keeps
each result), replays each through the profile, prints TTFT and ITL (p50,
p90, p99) and output throughput side by side with the error of each (with
several runs, each run's error and the figures the runs disagree on), and
with ``--record`` writes the outcome into the profile file (the ``checked``
block ``prescaler tune`` looks for).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any

from engine.bench_result import BenchResultError
from engine.cli_shell import read_json, run_reported, write_json
from engine.load_cli import add_load_arguments, put_load
from engine.load_client import LoadError
from engine.profile_check import DEFAULT_TOLERANCE
from engine.profile_check_runs import check_runs, check_runs_document
from engine.profile_files import read_profile_file, write_profile_file
from engine.profile_schema import ProfileFileError
from engine.profile_types import CheckRecord, Profile
from engine.profiles import get_profile, is_profile_path

COMMAND = "prescaler engine check"


def register_check(engine_sub: Any) -> None:
    """Add ``check`` under ``prescaler engine``."""
    check = engine_sub.add_parser(
        "check",
        help="replay a measured load through a profile: TTFT, ITL and throughput side by side",
        description=(
            "Compare a profile with a real server: give the JSON a `vllm bench serve "
            "--save-result` (or `prescaler engine load --save-result`) run wrote, or a "
            "running server's URL and a load to put on it. The same load is replayed "
            "through the engine model; TTFT and ITL (p50, p90, p99) and output tokens/s "
            "are printed measured and predicted, with each error. Run it before "
            "trusting a tuning result (docs/profiles.md)."
        ),
    )
    check.add_argument("--profile", required=True, help="profile: a name or a .yaml path")
    source = check.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--bench-result",
        action="append",
        help="a vllm bench serve result JSON; give it again for each further run of the "
        "same load: the runs' median is shown, the figures the runs disagree on are named, "
        "and the check fails only on a figure missed in every run",
    )
    source.add_argument("--url", help="a running server's root URL: put the load on it")
    add_load_arguments(check, required=False)
    check.add_argument(
        "--runs",
        type=int,
        default=1,
        help="with --url: put the load on the server this many times, back to back, run K "
        "with --seed + 2(K - 1) (other prompts and arrivals, so no run meets another's "
        "cached prefixes) (default %(default)s)",
    )
    check.add_argument(
        "--save-result",
        help="with --url: also keep the measured result here (with --runs, run K >= 2 "
        "as NAME-runK.json beside it)",
    )
    check.add_argument(
        "--tolerance",
        type=float,
        default=DEFAULT_TOLERANCE,
        help="largest relative error that passes (default %(default)s); exit 1 beyond it",
    )
    check.add_argument(
        "--record",
        action="store_true",
        help="write the outcome into the profile file (its `checked` block)",
    )
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    errors = (ValueError, LoadError)
    report = run_reported(COMMAND, errors, lambda: _check(args), format_check, args.json)
    if report is None:
        return 2
    return 0 if report["passed"] else 1


def run_path(path: str, run: int) -> str:
    """Where ``--save-result`` keeps run ``run`` (1-based): the path itself for the
    first, ``NAME-runK.SUFFIX`` beside it for the others."""
    if run == 1:
        return path
    target = Path(path)
    return str(target.with_name(f"{target.stem}-run{run}{target.suffix}"))


def run_seed(seed: int, run: int) -> int:
    """The ``--seed`` run ``run`` (1-based) of ``--runs`` uses: the load client draws
    arrivals from ``seed`` and prompts from ``seed + 1``, so each run steps by two and
    no run reuses another's draws (other prompts: no cached prefix from an earlier run)."""
    return seed + 2 * (run - 1)


def _result_docs(args: argparse.Namespace) -> list[tuple[dict[str, Any], str]]:
    if args.bench_result:
        if args.runs != 1:
            raise ValueError("--runs puts the load on a server: it goes with --url")
        docs = []
        for path in args.bench_result:
            doc = read_json(path)
            if not isinstance(doc, dict):
                raise BenchResultError(path, "(document)", "expected a JSON object")
            docs.append((doc, path))
        return docs
    if args.input_len is None or args.output_len is None:
        raise ValueError("with --url, give the load: --input-len and --output-len at least")
    if args.runs < 1:
        raise ValueError(f"--runs must be >= 1, got {args.runs}")
    docs = []
    for run in range(1, args.runs + 1):
        seeded = argparse.Namespace(**{**vars(args), "seed": run_seed(args.seed, run)})
        doc = put_load(args.url, seeded)
        if args.save_result:
            write_json(run_path(args.save_result, run), doc)
        docs.append((doc, args.url if args.runs == 1 else f"{args.url} (run {run})"))
    return docs


def _check(args: argparse.Namespace) -> dict[str, Any]:
    if args.record and not is_profile_path(args.profile):
        raise ValueError(
            f"--record writes into the profile file: {args.profile!r} is not a .yaml path"
        )
    if not args.tolerance > 0:
        raise ValueError(f"--tolerance must be > 0, got {args.tolerance}")
    profile = get_profile(args.profile)
    runs = check_runs(profile, _result_docs(args))
    report = check_runs_document(runs, tolerance=args.tolerance)
    if args.record:
        record = CheckRecord(
            at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            against=(
                ", ".join(args.bench_result)
                if args.bench_result
                else args.url + (f" ({args.runs} runs)" if args.runs > 1 else "")
            ),
            max_abs_error=round(report["max_abs_error"], 4),
            worst_metric=report["worst_metric"] or "",
            passed=report["passed"],
        )
        record_check(args.profile, record)
        report["recorded"] = args.profile
    return report


def record_check(path: str, record: CheckRecord) -> Profile:
    """Write ``record`` into the profile file at ``path``, keeping its leading comments."""
    target = Path(path)
    try:
        text = target.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileFileError(path, "(file)", f"cannot read: {exc.strerror}") from None
    header = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        header.append(line[1:].removeprefix(" "))
    profile = dataclasses.replace(read_profile_file(target), checked=record)
    write_profile_file(profile, target, "\n".join(header))
    return profile


def _unmeasured(report: dict[str, Any], metric: str) -> bool:
    return any(r["metric"] == metric and r["measured"] is None for r in report["rows"])


def _percent(error: float | None) -> str:
    return "-" if error is None else f"{100 * error:+.1f} %"


def format_check(report: dict[str, Any]) -> str:
    load = report["load"]
    how = (
        f"{load['max_concurrency']} at a time"
        if load["max_concurrency"]
        else ("all at once" if load["request_rate"] is None else f"{load['request_rate']}/s")
    )
    runs = report.get("runs", [])
    several = len(runs) > 1
    more = len(runs) - 1
    against = report["source"] + (
        f" and {more} more run{'s' if more > 1 else ''} of the same load" if several else ""
    )
    lines = [
        f"profile {report['profile']} against {against}: {load['requests']} requests "
        f"of {load['mean_prompt_tokens']} + {load['mean_output_tokens']} tokens (mean), {how}",
    ]
    if load.get("cut"):
        note = (
            " (output_tokens_per_s unmeasured: the file has no start_times)"
            if _unmeasured(report, "output_tokens_per_s")
            else ""
        )
        lines.append(
            f"replayed the first {load['requests']} of the run's {load['requests_in_run']} "
            f"successful requests; every measured figure is theirs{note}"
        )
    if several:
        lines.append("measured and predicted: the median over the runs; then each run's own error")
    header = f"{'':22s}{'measured':>12s}{'predicted':>12s}{'error':>9s}"
    if several:
        header += "".join(f"{f'run {i + 1}':>10s}" for i in range(len(runs)))
    lines.append(header)
    unsettled = set(report.get("unsettled", []))
    for row in report["rows"]:
        measured = "-" if row["measured"] is None else f"{row['measured']:.2f}"
        line = (
            f"{row['metric']:22s}{measured:>12s}{row['predicted']:>12.2f}"
            f"{_percent(row['error']):>9s}"
        )
        if several:
            line += "".join(f"{_percent(e):>10s}" for e in row["runs_error"])
            if row["metric"] in unsettled:
                line += "  unsettled"
        lines.append(line)
    tolerance = f"tolerance {100 * report['tolerance']:.0f} %"
    worst = f"{report['worst_metric']} at {100 * report['max_abs_error']:.1f} %"
    if not several:
        verdict = "passed" if report["passed"] else "FAILED"
        lines.append(f"{verdict}: worst {worst} ({tolerance})")
    elif report["passed"]:
        lines.append(
            f"passed: no figure missed in every run ({tolerance}); worst on the runs' "
            f"median {worst}"
        )
    else:
        rows = {row["metric"]: row for row in report["rows"]}
        missed = "; ".join(
            f"{m} ({', '.join(_percent(e) for e in rows[m]['runs_error'])})"
            for m in report["missed"]
        )
        lines.append(f"FAILED: missed in every run ({tolerance}): {missed}")
    if unsettled:
        lines.append(
            f"unsettled: {', '.join(sorted(unsettled))}: met in some runs and missed in "
            "others; at this tolerance the run decides these, not the profile (they do not "
            "fail the check)"
        )
    if "recorded" in report:
        lines.append(f"recorded in {report['recorded']} (checked:)")
    return "\n".join(lines) + "\n"
