"""``prescaler engine fit-profile``: a profile file fitted to a real server's measurements.

A thin shell around ``engine.profile_fit``: reads ``vllm bench serve``
results (one or several runs) and/or /metrics pages (scraped now, or from a file of earlier
scrapes), writes the fitted profile as YAML and reports which fields the
data determined and which were kept from the base.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from engine.bench_result import bench_measurement
from engine.cli_shell import read_json, run_reported
from engine.metrics_reader import ScrapeError, read_pages, scrape_pages, write_pages
from engine.metrics_windows import MetricsPage, load_windows
from engine.profile_files import write_profile_file
from engine.profile_fit import FACTOR_FIELDS, ProfileFit
from engine.profile_fit_measurements import fit_to_measurements
from engine.profile_fit_wake import idle_requests
from engine.profiles import Profile, get_profile

COMMAND = "prescaler engine fit-profile"


def register_fit_profile(engine_sub: Any) -> None:
    """Add ``fit-profile`` under ``prescaler engine``."""
    fit = engine_sub.add_parser(
        "fit-profile",
        help="fit a profile file to a vllm bench serve result and/or a vLLM's /metrics",
        description=(
            "Start from a base profile (a name or a file) and scale its step-time figures "
            "(effective memory bandwidth, compute, per-step overhead) until the engine model "
            "reproduces what a real vLLM measured; take its KV capacity from "
            "vllm:cache_config_info. Writes a profile YAML and says which fields the data "
            "determined and which were kept from the base (docs/profiles.md)."
        ),
    )
    fit.add_argument("--base", required=True, help="base profile: a name or a .yaml path")
    fit.add_argument("--out", required=True, help="where to write the fitted profile (.yaml)")
    fit.add_argument("--name", help="the fitted profile's name (default: <base>-fitted)")
    fit.add_argument(
        "--bench-result",
        action="append",
        help="the JSON file `vllm bench serve --save-result` wrote; give it once per run "
        "(runs at two prompt lengths separate a request's fixed time from its prefill)",
    )
    fit.add_argument(
        "--wake-result",
        help="a result file of requests sent one at a time after idle pauses (`prescaler "
        "engine load --idle-pauses ... --save-result`): the idle server's wake-up "
        "(stalls.wake_s, stalls.wake_tau_s) is read from it; alone, it adds the wake-up "
        "to the base and fits nothing else",
    )
    fit.add_argument(
        "--metrics-url", help="a running vLLM's /metrics URL, scraped for --duration seconds"
    )
    fit.add_argument("--metrics-pages", help="pages scraped earlier (JSON lines, see --save-pages)")
    fit.add_argument(
        "--duration", type=float, default=120.0, help="seconds to scrape (default %(default)s)"
    )
    fit.add_argument(
        "--interval", type=float, default=2.0, help="seconds between scrapes (default %(default)s)"
    )
    fit.add_argument(
        "--window",
        type=float,
        default=10.0,
        help="shortest stretch of pages taken as one measurement (default %(default)s s)",
    )
    fit.add_argument("--model-name", help="keep only samples with this model_name label")
    fit.add_argument("--save-pages", help="also write the scraped pages to this file")
    fit.add_argument("--json", action="store_true", help="print the report as JSON")
    fit.set_defaults(func=run_fit_profile)


def run_fit_profile(args: argparse.Namespace) -> int:
    errors = (ValueError, ScrapeError)
    report = run_reported(COMMAND, errors, lambda: _fit(args), format_report, args.json)
    if report is None:
        return 2
    for warning in report["warnings"]:
        sys.stderr.write(f"{COMMAND}: warning: {warning}\n")
    return 0


def _fit(args: argparse.Namespace) -> dict[str, Any]:
    if not (args.bench_result or args.metrics_url or args.metrics_pages or args.wake_result):
        raise ValueError(
            "give --bench-result and/or --metrics-url or --metrics-pages, and/or --wake-result"
        )
    if args.metrics_url and args.metrics_pages:
        raise ValueError("give --metrics-url or --metrics-pages, not both")
    base = get_profile(args.base)
    runs = args.bench_result or []
    bench = [bench_measurement(read_json(path), path) for path in runs]
    pages: list[MetricsPage] | None = None
    if args.metrics_url:
        pages = scrape_pages(args.metrics_url, duration_s=args.duration, interval_s=args.interval)
        if args.save_pages:
            write_pages(pages, args.save_pages)
    elif args.metrics_pages:
        pages = read_pages(args.metrics_pages)
    windows = last = None
    if pages is not None:
        windows, last = load_windows(pages, min_window_s=args.window, model_name=args.model_name)
    idle = None
    if args.wake_result:
        idle = idle_requests(read_json(args.wake_result), args.wake_result)
    name = args.name or f"{base.name}-fitted"
    fit = fit_to_measurements(
        base,
        bench=bench,
        windows=windows,
        last_page=last,
        name=name,
        idle=idle,
        idle_source=args.wake_result or "",
    )
    pages_from = args.metrics_url or args.metrics_pages
    sources = [
        *runs,
        *([pages_from] if pages_from else []),
        *([args.wake_result] if args.wake_result else []),
    ]
    header = (
        f"Fitted by `{COMMAND}` from {' and '.join(sources)}, starting from {base.name}.\n"
        f"Determined: {', '.join(f for f, _ in fit.determined) or 'nothing'}."
    )
    write_profile_file(fit.profile, args.out, header)
    return fit_report(fit, base=base, out=args.out)


def _value(profile: Profile, dotted: str) -> Any:
    node: Any = profile
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def _uncertainty(fit: ProfileFit, field: str) -> float | None:
    """The relative 1-sigma uncertainty of a determined field (its own, else its
    factor's), if any."""
    if field in fit.field_uncertainty:
        return fit.field_uncertainty[field]
    for factor, fields in FACTOR_FIELDS.items():
        if field in fields and factor in fit.log_sd:
            return math.exp(fit.log_sd[factor]) - 1.0
    return None


def fit_report(fit: ProfileFit, *, base: Profile, out: str) -> dict[str, Any]:
    """The JSON report of a fit (docs/contracts.md)."""
    return {
        "profile": fit.profile.name,
        "out": out,
        "base": base.name,
        "determined": [
            {
                "field": field,
                "base": _value(base, field),
                "fitted": _value(fit.profile, field),
                "source": source,
                "uncertainty": _uncertainty(fit, field),
            }
            for field, source in fit.determined
        ],
        "kept": list(fit.kept),
        "kept_reasons": dict(fit.kept_reasons),
        "warnings": list(fit.warnings),
        "factors": fit.factors,
        "factor_uncertainty": {f: math.exp(sd) - 1.0 for f, sd in fit.log_sd.items()},
        "targets": [
            {
                "name": t.name,
                "measured": t.measured,
                "base_model": t.base_model,
                "fitted_model": t.fitted_model,
                "fitted_error": t.fitted_error,
                # a histogram quantile's bucket: the fit matches the bucket, not the value
                **({} if t.bucket is None else {"bucket": list(t.bucket)}),
            }
            for t in fit.targets
        ],
    }


def format_report(report: dict[str, Any]) -> str:
    lines = [f"wrote {report['out']}: profile {report['profile']} (base {report['base']})"]
    lines.append("determined by the data:")
    for d in report["determined"] or [
        {"field": "(nothing)", "base": "", "fitted": "", "source": "", "uncertainty": None}
    ]:
        sd = d.get("uncertainty")
        spread = "" if sd is None else f" (x/ {1 + sd:.2f}, 1 sigma)"
        lines.append(f"  {d['field']}: {d['base']} -> {d['fitted']}{spread}  [{d['source']}]")
    reasons: dict[str, str] = report.get("kept_reasons", {})
    by_reason: dict[str, list[str]] = {}
    for field in report["kept"]:
        by_reason.setdefault(reasons.get(field, "kept from the base"), []).append(field)
    lines.append("kept from the base:")
    for reason, fields in by_reason.items():
        lines.append(f"  {', '.join(fields)}: {reason}")
    lines.append("matched figures (measured / base profile / fitted profile):")
    for t in report["targets"]:
        bucket = t.get("bucket")
        within = "" if bucket is None else f" [bucket {bucket[0]:g} to {bucket[1]:g}]"
        lines.append(
            f"  {t['name']}: {t['measured']:.6g} / {t['base_model']:.6g} / "
            f"{t['fitted_model']:.6g} ({100 * t['fitted_error']:+.1f} %){within}"
        )
    return "\n".join(lines) + "\n"
