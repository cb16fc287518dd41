"""``prescaler stack``: the autoscaling loop as real local processes, on a trace.

Thin: flags are checked here (NaN, infinities, negatives are usage errors),
:class:`stack.run.StackRun` does the work. The summary is the same table and
JSON as ``prescaler simulate``'s (:mod:`simulations.report`), plus a
``stack`` object with the control plane's counts.
"""

from __future__ import annotations

import argparse
import sys

from simulations.cli import add_window_arguments, window_options
from simulations.cli_types import count_flag, number_flag
from simulations.policies import DEFAULT_MAX_REPLICAS
from simulations.traffic import DEFAULT_TOKENS_TRACE

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "stack",
        help="run Prometheus, the scaler, emulated replicas, KEDA/HPA/Karpenter and a load "
        "generator locally on a trace",
        description="Replay a trace against real local processes: Prometheus, `prescaler "
        "serve`, `prescaler emulate` replicas, and a controller playing KEDA, the HPA and "
        "Karpenter with the simulator's rules; print the same summary as `prescaler "
        "simulate`. Needs the `prometheus` binary. All traffic stays on 127.0.0.1.",
    )
    p.add_argument(
        "--trace",
        default=str(DEFAULT_TOKENS_TRACE),
        help="trace or rate file (default: the shipped Azure conversation trace)",
    )
    p.add_argument(
        "--speed",
        type=number_flag("--speed"),
        default=10.0,
        help="compress time K-fold everywhere: trace, engine, start-up, scrape, poll and "
        "sync intervals (default %(default)s, at most 120)",
    )
    p.add_argument("--policy", choices=("predictive", "reactive"), default="predictive")
    # trace seconds; the rate's default: 2-4 replicas on the shipped trace's first minutes
    add_window_arguments(p, rate_scale=0.5, duration_s=300.0)
    p.add_argument(
        "--scaledobject",
        default=None,
        help="predictive: the ScaledObject YAML whose trigger the scaler gets "
        "(default manifests/vllm/gpu/scaledobject.yaml)",
    )
    p.add_argument(
        "--max-replicas",
        type=count_flag("--max-replicas"),
        default=DEFAULT_MAX_REPLICAS,
        help="reactive: its ScaledObject's maxReplicaCount (default %(default)s, the shipped "
        "GPU ScaledObject's, as `prescaler simulate`); predictive keeps its YAML's",
    )
    p.add_argument(
        "--initial-replicas",
        type=count_flag("--initial-replicas"),
        default=None,
        help="fleet Ready as the window opens (default: what the traffic in the 5 min "
        "before --start needs, as `prescaler simulate`; 1 at the trace's start)",
    )
    p.add_argument(
        "--keep",
        default=None,
        metavar="DIR",
        help="work in DIR and keep it: Prometheus data (DIR/data), logs, configs",
    )
    p.add_argument(
        "--view",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="live terminal view (default: on when stdout is a terminal)",
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from stack.processes import StackError, quiet_grpc_forks

    quiet_grpc_forks()  # before stack.run loads gRPC
    from stack.run import StackOptions, StackRun

    try:
        opts = StackOptions(
            trace=args.trace,
            policy=args.policy,
            speed=args.speed,
            **window_options(args),
            scaledobject=args.scaledobject,
            keep=args.keep,
            view=args.view,
            max_replicas=args.max_replicas,
            initial_replicas=args.initial_replicas,
        )
        run = StackRun(opts)
    except (ValueError, KeyError, OSError) as exc:
        from simulations.cli_messages import WINDOW_FLAGS, in_flags

        print(f"prescaler stack: {in_flags(str(exc), WINDOW_FLAGS)}", file=sys.stderr)
        return 2
    try:
        run.run()
    except StackError as exc:
        print(f"prescaler stack: {exc}", file=sys.stderr)
        return 1
    finally:
        run.cleanup()
    return 130 if run.interrupted else 0
