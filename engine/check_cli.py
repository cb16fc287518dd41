"""``prescaler engine check``: does a profile predict what a real server measured?

A thin shell around ``engine.profile_check``: reads a ``vllm bench serve``
result (or puts a load on a running server with ``engine.load_client`` and
keeps its result), replays the same load through the profile, prints TTFT
and ITL (p50, p90, p99) and output throughput side by side with the error of
each, and with ``--record`` writes the outcome into the profile file (the
``checked`` block ``prescaler tune`` looks for).
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
from engine.profile_check import DEFAULT_TOLERANCE, check_document, check_profile
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
    source.add_argument("--bench-result", help="a vllm bench serve result JSON")
    source.add_argument("--url", help="a running server's root URL: put the load on it")
    add_load_arguments(check, required=False)
    check.add_argument("--save-result", help="with --url: also keep the measured result here")
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


def _result_doc(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    if args.bench_result:
        doc = read_json(args.bench_result)
        if not isinstance(doc, dict):
            raise BenchResultError(args.bench_result, "(document)", "expected a JSON object")
        return doc, args.bench_result
    if args.input_len is None or args.output_len is None:
        raise ValueError("with --url, give the load: --input-len and --output-len at least")
    doc = put_load(args.url, args)
    if args.save_result:
        write_json(args.save_result, doc)
    return doc, args.url


def _check(args: argparse.Namespace) -> dict[str, Any]:
    if args.record and not is_profile_path(args.profile):
        raise ValueError(
            f"--record writes into the profile file: {args.profile!r} is not a .yaml path"
        )
    if not args.tolerance > 0:
        raise ValueError(f"--tolerance must be > 0, got {args.tolerance}")
    profile = get_profile(args.profile)
    doc, source = _result_doc(args)
    check = check_profile(profile, doc, source)
    report = check_document(check, source=source, tolerance=args.tolerance)
    if args.record:
        record = CheckRecord(
            at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            against=source,
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


def format_check(report: dict[str, Any]) -> str:
    load = report["load"]
    how = (
        f"{load['max_concurrency']} at a time"
        if load["max_concurrency"]
        else ("all at once" if load["request_rate"] is None else f"{load['request_rate']}/s")
    )
    lines = [
        f"profile {report['profile']} against {report['source']}: {load['requests']} requests "
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
    lines.append(f"{'':22s}{'measured':>12s}{'predicted':>12s}{'error':>9s}")
    for row in report["rows"]:
        measured = "-" if row["measured"] is None else f"{row['measured']:.2f}"
        error = "-" if row["error"] is None else f"{100 * row['error']:+.1f} %"
        lines.append(f"{row['metric']:22s}{measured:>12s}{row['predicted']:>12.2f}{error:>9s}")
    verdict = "passed" if report["passed"] else "FAILED"
    lines.append(
        f"{verdict}: worst {report['worst_metric']} at {100 * report['max_abs_error']:.1f} % "
        f"(tolerance {100 * report['tolerance']:.0f} %)"
    )
    if "recorded" in report:
        lines.append(f"recorded in {report['recorded']} (checked:)")
    return "\n".join(lines) + "\n"
