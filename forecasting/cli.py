"""``prescaler backtest``: flags in, one library call, table and JSON out."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

from forecasting.backtest import BacktestResult, backtest
from forecasting.readers import read_series
from forecasting.registry import backtest_methods
from forecasting.significance import RatioInterval, mae_ratios


def _seconds(text: str) -> float:
    """A finite, positive number of seconds (argparse type): NaN or inf would
    otherwise reach the step arithmetic and fail there, far from the flag."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text}")
    return value


def _count(text: str) -> int:
    """A whole number >= 1 (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "backtest",
        help="rolling-origin evaluation of every forecaster on a trace",
        description="Rolling-origin backtest (no look-ahead) of the forecasters on INPUT.",
    )
    p.add_argument("input", metavar="INPUT", help="trace or rate file (format from its header)")
    p.add_argument("--horizon", type=_seconds, required=True, help="forecast horizon, seconds")
    p.add_argument(
        "--step",
        type=_seconds,
        default=None,
        help="step, seconds (default: native; 30 for per-request traces)",
    )
    p.add_argument(
        "--methods",
        default=",".join(backtest_methods()),
        help="comma-separated methods (default: the anchors, the sf_* statsforecast "
        "baselines when installed, prescaler)",
    )
    p.add_argument(
        "--signal",
        default="requests_per_s",
        help="requests_per_s, prompt_tokens_per_s, output_tokens_per_s",
    )
    p.add_argument(
        "--window", type=_seconds, default=None, help="only the last S seconds of the series"
    )
    p.add_argument("--max-origins", type=_count, default=400, help="origins scored (evenly spaced)")
    p.add_argument("--json", dest="json_path", default=None, help="write the summary JSON here")
    p.add_argument("--plot", dest="plot_path", default=None, help="write a plot here (PNG)")
    p.set_defaults(func=run)


def summary(
    result: BacktestResult,
    input_name: str,
    horizon: int,
    ratios: dict[str, RatioInterval],
) -> dict[str, Any]:
    """The ``backtest --json`` contract, extended (when ``prescaler`` and
    another method were scored) by ``prescaler_mae_ratio``: per other method,
    ``MAE(prescaler) / MAE(method)`` and its 90 % paired block-bootstrap
    interval (``forecasting.significance``; ``ratios`` from :func:`prescaler_ratios`)."""
    doc: dict[str, Any] = {
        "input": input_name,
        "step_s": round(result.step_s),
        "horizon_s": round(horizon * result.step_s),
        "methods": {m: s.as_contract() for m, s in result.scores[horizon].items()},
    }
    if ratios:
        doc["prescaler_mae_ratio"] = {
            m: {
                "ratio": _json_number(r.ratio),
                "interval90": [_json_number(r.low), _json_number(r.high)],
            }
            for m, r in ratios.items()
        }
    return doc


def _json_number(x: float) -> float | None:
    """``x``, or ``null`` where it is not finite: prescaler erred where the
    other method never did (an infinite ratio). Why: ``json.dumps`` would
    write the bare token ``Infinity``, which is not JSON, and strict parsers
    (``jq``, browsers, Go's encoding/json) refuse the whole file."""
    return x if math.isfinite(x) else None


def prescaler_ratios(result: BacktestResult, horizon: int) -> dict[str, RatioInterval]:
    """Prescaler's MAE ratio to each other method scored ({} without prescaler
    or without another method); a bootstrap, so computed once per run."""
    if "prescaler" not in result.scores[horizon] or len(result.scores[horizon]) < 2:
        return {}
    return mae_ratios(result, horizon, "prescaler")


def format_table(result: BacktestResult, horizon: int, ratios: dict[str, RatioInterval]) -> str:
    """One row per method; with ``prescaler`` among them, a last column says
    how its MAE compares with each method's, and whether beyond noise."""
    head = (
        f"{'method':15s} {'mae':>10s} {'mase':>7s} {'pinball_p90':>12s} "
        f"{'cov_p90':>8s} {'fit_s':>8s}"
    )
    rows = [head + ("  prescaler MAE / this (90 % interval)" if ratios else "")]
    for name, s in result.scores[horizon].items():
        row = (
            f"{name:15s} {s.mae:10.4g} {s.mase:7.3f} {s.pinball_p90:12.4g} "
            f"{s.coverage_p90:8.2f} {s.fit_seconds:8.4f}"
        )
        if name in ratios:
            r = ratios[name]
            verdict = (
                "better"
                if r.significantly_better
                else "worse"
                if r.significantly_worse
                else "within noise"
            )
            row += f"  {r.ratio:6.3f} ({r.low:.3f}-{r.high:.3f}) {verdict}"
        rows.append(row)
    return "\n".join(rows)


def run(args: argparse.Namespace) -> int:
    try:
        methods = [m.strip() for m in args.methods.split(",") if m.strip()]
        if not methods:
            raise ValueError(f"--methods names no method: {args.methods!r}")
        for out in (args.json_path, args.plot_path):
            # Fail before a minutes-long backtest, not after it.
            if out is not None and not Path(out).resolve().parent.is_dir():
                raise ValueError(f"{out}: no such directory to write into")
        series = read_series(args.input, args.step, args.signal)
        if args.window is not None:
            last = int(args.window // series.step_s)
            if last < 1:
                raise ValueError(
                    f"--window {args.window:g} s is shorter than one step ({series.step_s:g} s)"
                )
            series = series.window(last)
        horizon = max(1, math.ceil(args.horizon / series.step_s - 1e-9))
        result = backtest(
            series,
            (horizon,),
            methods,
            max_origins=args.max_origins,
            progress=sys.stderr.isatty(),
        )
    except (ValueError, OSError) as exc:
        print(f"prescaler backtest: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"{args.input}: {len(series)} steps of {series.step_s:g} s, horizon "
        f"{horizon} steps ({horizon * series.step_s:g} s), "
        f"{result.scores[horizon][methods[0]].origins} origins from step {result.initial} "
        f"every {result.stride}, refit every "
        f"{result.refit_every} origins"
    )
    ratios = prescaler_ratios(result, horizon)
    print(format_table(result, horizon, ratios))
    try:
        if args.json_path:
            Path(args.json_path).write_text(
                json.dumps(
                    summary(result, str(args.input), horizon, ratios), indent=2, allow_nan=False
                )
            )
        if args.plot_path:
            from forecasting.plot import plot_backtest

            plot_backtest(result, horizon, args.plot_path)
    except OSError as exc:
        print(f"prescaler backtest: error: cannot write: {exc}", file=sys.stderr)
        return 1
    return 0
