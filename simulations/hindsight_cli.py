"""``prescaler hindsight``: the hindsight schedule for the demand a fleet's Prometheus recorded.

Reads the history as ``tune --prometheus`` does (or a trace), computes the
calibrated hindsight schedule (:mod:`simulations.hindsight_run`) and writes
it as OpenMetrics for ``promtool tsdb create-blocks-from openmetrics``, so
the fleet dashboard draws it beside what the fleet ran. Offline, because
the schedule at a moment depends on demand after it; as blocks, because
Prometheus's remote write refuses samples that far back.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.profiles import use_profile
from simulations.cli import run_subcommand
from simulations.cli_messages import message_of
from simulations.cli_types import count_flag, fraction_flag, number_flag
from simulations.fleet_prometheus import fetch_fleet_trace, parse_since, write_fleet_trace
from simulations.fleet_trace import parse_labels
from simulations.hindsight import plan
from simulations.hindsight_run import bound_pair, bound_summary, timing
from simulations.outcome import attainment, idle_attainment
from simulations.policies import HINDSIGHT_STEP_S, step_load
from simulations.sim_types import SimConfig
from simulations.traffic import TrafficOptions, load_workload
from simulations.tune.request import DEFAULT_TARGET

__all__ = ["SERIES", "main", "openmetrics", "register"]

SERIES = ("prescaler_hindsight_replicas", "prescaler_hindsight_ready_replicas")
"""The replicas the schedule orders (the Deployment's count, one start-up
ahead) and the replicas it holds Ready."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "hindsight",
        help="the hindsight schedule (the bound) for a fleet's recorded demand, as a series "
        "to backfill into Prometheus",
        description="Compute the cheapest replica schedule perfect foresight could run on the "
        "demand a fleet's Prometheus recorded (or a trace), meeting the SLO target when "
        "replayed, and write it as OpenMetrics for `promtool tsdb create-blocks-from "
        "openmetrics`.",
    )
    p.add_argument("trace", metavar="TRACE", nargs="?", default=None,
                   help="a trace file instead of --prometheus")  # fmt: skip
    p.add_argument("--prometheus", default=None, metavar="URL",
                   help="read the fleet's vLLM history from this Prometheus")  # fmt: skip
    p.add_argument("--selector", default="", help="label matchers of the fleet's vLLM series, "
                   "e.g. 'namespace=llm,model_name=m'")  # fmt: skip
    p.add_argument("--since", default="7d", help="how far back to read (default %(default)s)")
    p.add_argument("--step", type=number_flag("--step"), default=60.0,
                   help="the rate's resolution, s (default %(default)s)")  # fmt: skip
    p.add_argument("--end", type=number_flag("--end"), default=None, metavar="EPOCH_S",
                   help="the range's end, Unix seconds (default: now)")  # fmt: skip
    p.add_argument("--trace-start", type=number_flag("--trace-start", 0.0, strict=False),
                   default=None, metavar="EPOCH_S",
                   help="TRACE: its first second in Unix time (default: it ends now)")  # fmt: skip
    p.add_argument("--profile", default="llama-3-8b@g5.xlarge",
                   help="engine profile (default %(default)s)")  # fmt: skip
    p.add_argument("--slo-ttft", type=number_flag("--slo-ttft"), default=1.0,
                   help="TTFT SLO, s (default %(default)s)")  # fmt: skip
    p.add_argument(
        "--target",
        type=fraction_flag("--target"),
        default=None,
        help="attainment to meet, a fraction of the idle fleet's (default 0.95)",
    )
    p.add_argument("--factor", type=number_flag("--factor"), default=None,
                   help="plan at this capacity factor instead of calibrating by replay "
                   "(a simulate or tune JSON's capacity_factor)")  # fmt: skip
    p.add_argument("--max-replicas", type=count_flag("--max-replicas"), default=None,
                   help="the fleet's maxReplicaCount (default: unbounded)")  # fmt: skip
    p.add_argument("--namespace", required=True, help="the series' namespace label")
    p.add_argument("--scaledobject", required=True, help="the series' scaledobject label")
    p.add_argument("--out", required=True, metavar="FILE", help="the OpenMetrics file to write")
    p.add_argument("--json", dest="json_path", default=None, help="write a summary JSON here")
    p.set_defaults(func=_run)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def openmetrics(
    series: Mapping[str, Sequence[int]],
    start_epoch_s: float,
    step_s: float,
    labels: Mapping[str, str],
) -> str:
    """``series`` (name -> a value per step) as OpenMetrics gauges with
    timestamps (step ``i`` at ``start_epoch_s + i * step_s``), ``# EOF`` last."""
    text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
    lines: list[str] = []
    for name, values in series.items():
        lines.append(f"# TYPE {name} gauge")
        lines.extend(
            f"{name}{{{text}}} {int(v)} {start_epoch_s + i * step_s:.3f}"
            for i, v in enumerate(values)
        )
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def _workload(args: argparse.Namespace, tmp: Path) -> tuple[Any, float]:
    """The demand as a workload, and the Unix time of its first second."""
    if (args.trace is None) == (args.prometheus is None):
        raise ValueError("give TRACE or --prometheus URL (one of them)")
    if args.prometheus is not None:
        since = parse_since(args.since)
        end = time.time() if args.end is None else args.end
        fleet = fetch_fleet_trace(
            args.prometheus, parse_labels(args.selector), since_s=since, end_s=end,
            step_s=args.step,
        )  # fmt: skip
        counts, tokens = write_fleet_trace(fleet, tmp, "fleet")
        workload = load_workload(counts, TrafficOptions(tokens_from=tokens))
        # the workload starts at the first sample returned, not at end - since: a
        # fleet younger than --since, or a shorter retention, starts later
        return workload, fleet.start_s if fleet.start_s is not None else end - since
    workload = load_workload(args.trace)
    start = time.time() - workload.duration_s if args.trace_start is None else args.trace_start
    return workload, start


def hindsight(args: argparse.Namespace) -> dict[str, Any]:
    """Compute and write; the summary."""
    profile = use_profile(args.profile)
    config = SimConfig(slo_ttft_s=args.slo_ttft)
    with tempfile.TemporaryDirectory(prefix="prescaler-hindsight-") as tmp:
        workload, start = _workload(args, Path(tmp))
    if len(workload) == 0:
        raise ValueError("no requests in the range read")
    fraction = DEFAULT_TARGET if args.target is None else args.target
    target = fraction * idle_attainment(workload, profile, config.slo_ttft_s)
    summary: dict[str, Any] = {"trace": workload.name, "start_epoch_s": start,
                               "duration_s": workload.duration_s, "requests": len(workload),
                               "target": fraction, "target_attainment": target}  # fmt: skip
    if args.factor is not None:
        t = timing(profile, config, workload.duration_s)
        load = step_load(workload, profile, HINDSIGHT_STEP_S)
        sched = plan(load, step_s=HINDSIGHT_STEP_S, lead_s=t.lead_s, tail_s=t.tail_s,
                     factor=args.factor, max_replicas=args.max_replicas,
                     gpus_per_replica=t.gpus_per_replica)  # fmt: skip
        summary |= {"capacity_factor": args.factor, "calibrated": False,
                    "model_gpu_hours": round(sched.gpu_hours, 6)}  # fmt: skip
    else:
        stated, instant = bound_pair(
            workload, profile, config, target, max_replicas=args.max_replicas
        )
        sched = stated.schedule
        summary |= {"calibrated": True, **bound_summary(stated, instant, fraction)}
        summary["slo_attainment"] = attainment(stated.result)
    labels = {"namespace": args.namespace, "scaledobject": args.scaledobject}
    text = openmetrics(
        {SERIES[0]: sched.orders.tolist(), SERIES[1]: sched.ready.tolist()},
        start, sched.step_s, labels,
    )  # fmt: skip
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    summary |= {"step_s": sched.step_s, "samples": int(sched.orders.size), "out": str(out)}
    return summary


def _run(args: argparse.Namespace) -> int:
    try:
        summary = hindsight(args)
    except (ValueError, KeyError, OSError) as exc:
        print(f"prescaler hindsight: {message_of(exc)}", file=sys.stderr)
        return 2
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")
    calibrated = (
        f"meets {100 * summary['slo_attainment']:.2f} % against a target of "
        f"{100 * summary['target_attainment']:.2f} % when replayed"
        if summary["calibrated"]
        else f"planned at capacity factor {summary['capacity_factor']:g} (not replayed)"
    )
    hours = summary["duration_s"] / 3600.0
    print(f"{summary['trace']}: {summary['requests']:,} requests over {hours:.1f} h; the "
          f"hindsight schedule {calibrated}; {summary['samples']:,} samples of "
          f"{', '.join(SERIES)} in {summary['out']}")  # fmt: skip
    print(
        f"backfill: promtool tsdb create-blocks-from openmetrics {summary['out']} "
        'PROMETHEUS_DATA_DIR (docs/simulator.md, "The hindsight schedule on the dashboard")'
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m simulations.hindsight_cli`` (the same as ``prescaler hindsight``)."""
    return run_subcommand(register, "hindsight", argv)


if __name__ == "__main__":
    sys.exit(main())
