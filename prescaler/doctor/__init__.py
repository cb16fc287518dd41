"""``prescaler doctor``: is the autoscaling loop of one ScaledObject really closed?

Given the ScaledObject (and optionally the HPA's status), Prometheus and the
scaler, it checks each link and prints one line per check: OK, WARN or FAIL
with the cause and the fix; the exit status is 1 when any check failed.
``inputs`` reads the files, ``fetch`` and ``gather`` do the I/O, ``checks``
are pure functions over what was fetched, ``run`` puts them in order.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["doctor_command", "register"]


def register(sub: Any) -> None:
    p = sub.add_parser(
        "doctor",
        help="check that a ScaledObject's autoscaling loop is really closed",
        description=(
            "One line per check (bounds, series, answer, movement, hpa, max): OK, WARN or "
            "FAIL with the cause and the fix. Exit 0: no FAIL; 1: a check failed; 2: bad input."
        ),
    )
    p.add_argument("scaledobject", type=Path, help="the ScaledObject (YAML or JSON, as applied)")
    p.add_argument(
        "--prometheus",
        help="Prometheus URL this machine reaches (default: the trigger's prometheusAddress)",
    )
    p.add_argument("--scaler", help="the scaler's host:port, for --scaler-metrics' default "
                   "(its gRPC is never called: that would register the object)")  # fmt: skip
    p.add_argument(
        "--scaler-metrics",
        help="the scaler's /metrics URL (default: http://<--scaler host>:9091/metrics)",
    )
    p.add_argument("--hpa", type=Path, help="the HPA as `kubectl get hpa -o json` prints it")
    p.add_argument("--name", help="the ScaledObject's name, when the file holds several")
    p.add_argument(
        "--window-seconds",
        type=float,
        default=3600.0,
        help="how far back the movement and max checks look (default 3600)",
    )
    p.add_argument(
        "--settle-seconds",
        type=float,
        default=12.0,
        help="seconds between the two reads of the scaler's /metrics, above its "
        "--refresh-seconds (default 12)",
    )
    p.add_argument(
        "--rate-window-seconds",
        type=float,
        default=120.0,
        help="rate() window of the scaler's queries, as prescaler serve's (default 120)",
    )
    p.add_argument("--timeout-seconds", type=float, default=10.0, help="per request (default 10)")
    p.set_defaults(func=doctor_command)


def doctor_command(args: argparse.Namespace) -> int:
    from prescaler.doctor.checks import exit_code, summary
    from prescaler.doctor.inputs import InputError
    from prescaler.doctor.run import DoctorOptions, run_doctor

    for flag in ("window_seconds", "settle_seconds", "rate_window_seconds", "timeout_seconds"):
        if not getattr(args, flag) > 0:
            print(f"prescaler doctor: --{flag.replace('_', '-')} must be > 0", file=sys.stderr)
            return 2
    opts = DoctorOptions(
        scaledobject=args.scaledobject,
        prometheus=args.prometheus,
        scaler=args.scaler,
        scaler_metrics=args.scaler_metrics,
        hpa=args.hpa,
        name=args.name,
        window_s=args.window_seconds,
        settle_s=args.settle_seconds,
        rate_window_s=args.rate_window_seconds,
        timeout_s=args.timeout_seconds,
    )
    try:
        findings = run_doctor(opts)
    except InputError as exc:
        print(f"prescaler doctor: {exc}", file=sys.stderr)
        return 2
    for finding in findings:
        print(finding.line())
    print(summary(findings))
    return exit_code(findings)
