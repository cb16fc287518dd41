"""``prescaler engine ...``: print what the engine model derives for each profile,
and fit a profile to a real server's measurements.

A thin shell: the figures come from ``engine.profiles.profile_summary`` and
the fit from ``engine.profile_fit``; this module reads the inputs, writes
the profile file and formats the report.
"""

from __future__ import annotations

import argparse
from typing import Any

from engine.check_cli import register_check
from engine.cli_shell import print_report
from engine.load_cli import register_load
from engine.profile_fit_cli import register_fit_profile
from engine.profiles import SUMMARY_BATCHES, SUMMARY_CONTEXT_TOKENS, all_profile_summaries


def register(subparsers: Any) -> None:
    """Add ``engine`` and its ``profiles`` and ``fit-profile`` subcommands to the top-level CLI."""
    engine = subparsers.add_parser(
        "engine", help="inspect the replica performance model (profiles, step times)"
    )
    engine_sub = engine.add_subparsers(dest="engine_command")
    engine_sub.required = True
    profiles = engine_sub.add_parser(
        "profiles",
        help="each profile's decode ITL, prefill rate, KV capacity and price",
        description=(
            "Derived figures of every replica profile: decode inter-token latency at "
            f"batch {', '.join(map(str, SUMMARY_BATCHES))} with {SUMMARY_CONTEXT_TOKENS} tokens "
            "of context per sequence (null where the replica cannot hold that batch), "
            "prefill tokens/s, KV-cache token capacity and price per replica-hour."
        ),
    )
    profiles.add_argument(
        "--json", action="store_true", help="print a JSON list instead of a table"
    )
    profiles.set_defaults(func=run_profiles)
    register_fit_profile(engine_sub)
    register_load(engine_sub)
    register_check(engine_sub)
    # a missing subcommand's one-line error names them all, not the dest
    engine_sub.metavar = "{" + ",".join(engine_sub.choices) + "}"


def run_profiles(args: argparse.Namespace) -> int:
    print_report(all_profile_summaries(), args.json, format_table)
    return 0


def _fmt_ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def format_table(summaries: list[dict[str, Any]]) -> str:
    """An aligned text table of profile summaries."""
    header = [
        "profile", "tp",
        *(f"itl@{b} ms" for b in SUMMARY_BATCHES),
        "prefill tok/s", "kv tokens", "max len", "$/h od", "$/h spot",
    ]  # fmt: skip
    rows = [header]
    for s in summaries:
        rows.append(
            [
                s["name"],
                str(s["tp"]),
                *(_fmt_ms(s["itl_ms"][str(b)]) for b in SUMMARY_BATCHES),
                f"{s['prefill_tokens_per_s']:.0f}",
                str(s["kv_tokens"]),
                str(s["max_model_len"]),
                f"{s['price_on_demand_per_hour']:.3f}",
                f"{s['price_spot_per_hour']:.3f}",
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = []
    for r in rows:
        rest = [c.rjust(w) for c, w in zip(r[1:], widths[1:], strict=True)]
        cells = [r[0].ljust(widths[0]), *rest]
        lines.append("  ".join(cells).rstrip())
    lines.insert(1, "  ".join("-" * w for w in widths))
    note = (
        f"ITL: decode step with {SUMMARY_CONTEXT_TOKENS} tokens of context per sequence; "
        "'-' = batch does not fit (KV cache or max_num_seqs)."
    )
    return "\n".join([*lines, note]) + "\n"
