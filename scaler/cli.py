"""``prescaler serve``: flags in, one library call out."""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["register", "serve_command"]

StateFactory = Callable[..., Any]


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the KEDA external scaler (gRPC) with its own /metrics",
        description="Predictive KEDA external scaler for vLLM. Point a ScaledObject trigger of "
        "type external (or external-push) at --port; Prometheus scrapes --metrics-port.",
    )
    p.add_argument("--host", default="0.0.0.0", help="address to bind (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=9090, help="gRPC port (default 9090; 0 = any free)")
    p.add_argument(
        "--metrics-port",
        type=int,
        default=9091,
        help="own /metrics port (default 9091; 0 = any free; -1 = off)",
    )
    p.add_argument("--tls-cert", help="server certificate chain (PEM); enables TLS")
    p.add_argument("--tls-key", help="server private key (PEM)")
    p.add_argument("--client-ca", help="CA for client certificates (PEM); enables mTLS")
    p.add_argument(
        "--refresh-seconds",
        type=float,
        default=5.0,
        help="how often live signals are read (default 5)",
    )
    p.add_argument(
        "--refit-seconds",
        type=float,
        default=600.0,
        help="how often forecasters are refitted (default 600)",
    )
    p.add_argument(
        "--forecast-step-seconds",
        type=float,
        default=None,
        help="forecast bin width, a multiple of --refresh-seconds (default max(15, refresh))",
    )
    p.add_argument(
        "--fit-window-seconds",
        type=float,
        default=None,
        help="history each forecaster fits on, and the backfill reads from Prometheus "
        "(default 259200, 3 days: the daily seasonal terms need two full days; "
        "shorter costs less CPU and memory per ScaledObject)",
    )
    p.add_argument(
        "--rate-window-seconds",
        type=float,
        default=120.0,
        help="PromQL rate() window, >= ~4 vLLM scrape intervals (default 120)",
    )
    p.add_argument(
        "--grace-seconds",
        type=float,
        default=10.0,
        help="drain time for in-flight calls on SIGTERM (default 10)",
    )
    p.add_argument(
        "--allow-cross-namespace",
        action="store_true",
        help="let a ScaledObject read series of other namespaces (a namespace matcher "
        "in selector other than its own, namespace beside podSelector, or any "
        "gatewayRateQuery); off by default so one tenant cannot scale on another's load",
    )
    p.add_argument(
        "--decider-process",
        "--forecast-worker",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run the live loop (sources, trackers, forecasts) in a child process, the "
        "decider, so its work never delays an RPC (default on; --no-decider-process "
        "keeps one process; --forecast-worker is the old name)",
    )
    for removed in ("--front", "--front-binary"):
        p.add_argument(removed, nargs="?", action=_Removed, help=argparse.SUPPRESS)
    p.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level (default info)",
    )
    p.set_defaults(func=serve_command)


REMOVED_FRONT = (
    "--front and --front-binary were removed with the compiled gRPC front: "
    "Python gRPC serves KEDA directly; drop the flag"
)


class _Removed(argparse.Action):
    """A removed flag: a usage error like any other (one line, exit status 2)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        parser.error(REMOVED_FRONT)


def _is_multiple(value: float, of: float) -> bool:
    ratio = value / of
    return ratio >= 1 and abs(ratio - round(ratio)) < 1e-9


def _check(args: argparse.Namespace) -> str | None:
    if not 0 <= args.port <= 65535:
        return f"--port must be 0-65535, got {args.port}"
    if not -1 <= args.metrics_port <= 65535:
        return f"--metrics-port must be -1 (off) or 0-65535, got {args.metrics_port}"
    if (args.tls_cert is None) != (args.tls_key is None):
        return "--tls-cert and --tls-key go together"
    if args.client_ca is not None and args.tls_cert is None:
        return "--client-ca (mTLS) needs --tls-cert and --tls-key"
    for flag in (
        "refresh_seconds",
        "refit_seconds",
        "forecast_step_seconds",
        "fit_window_seconds",
        "rate_window_seconds",
        "grace_seconds",
    ):
        value = getattr(args, flag)
        if value is not None and not math.isfinite(value):
            # inf would reach a PromQL range ("[infs]") or a sleep; NaN slips
            # past every comparison below.
            return f"--{flag.replace('_', '-')} must be a finite number, got {value}"
    for flag in ("refresh_seconds", "refit_seconds"):
        if not getattr(args, flag) > 0:
            return f"--{flag.replace('_', '-')} must be > 0"
    step = args.forecast_step_seconds
    if step is not None and not (step > 0 and _is_multiple(step, args.refresh_seconds)):
        return "--forecast-step-seconds must be a positive multiple of --refresh-seconds"
    fit = args.fit_window_seconds
    step_s = step if step is not None else max(15.0, args.refresh_seconds)
    if fit is not None and not fit >= step_s:
        return f"--fit-window-seconds must be at least one forecast step ({step_s:g} s)"
    if not args.rate_window_seconds >= 1:
        return "--rate-window-seconds must be >= 1"
    if args.grace_seconds < 0:
        return "--grace-seconds must be >= 0"
    return None


def serve_command(
    args: argparse.Namespace,
    *,
    state_factory: StateFactory | None = None,
    speed: float = 1.0,
) -> int:
    """Run the scaler until SIGTERM; ``state_factory(telemetry=, refresh_interval_s=,
    refit_interval_s=, source_factory=)`` replaces the live loop with a state
    in this process (for embedding/tests). ``speed`` is ``ScalerState``'s
    (the stack's faster world, ``stack.speed``); it reaches the decider."""
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    problem = _check(args)
    if problem:
        print(f"prescaler serve: {problem}", file=sys.stderr)
        return 2

    from scaler.server import run_server
    from scaler.tls import TlsError, load_server_tls

    tls = None
    if args.tls_cert:
        try:
            tls = load_server_tls(args.tls_cert, args.tls_key, args.client_ca)
        except TlsError as exc:
            print(f"prescaler serve: {exc}", file=sys.stderr)
            return 2
    state, telemetry = _live_state(args, state_factory, speed)
    try:
        return asyncio.run(
            run_server(
                state,
                telemetry,
                host=args.host,
                port=args.port,
                metrics_port=None if args.metrics_port < 0 else args.metrics_port,
                tls=tls,
                grace_s=args.grace_seconds,
                allow_cross_namespace=args.allow_cross_namespace,
            )
        )
    except OSError as exc:
        print(f"prescaler serve: {exc}", file=sys.stderr)
        return 1


def _live_state(
    args: argparse.Namespace, state_factory: StateFactory | None, speed: float = 1.0
) -> tuple[Any, Any]:
    """The state the service answers from, and the telemetry it exports: the
    decider process (``--decider-process``, the default), or the live loop in
    this process (``--no-decider-process``, or ``state_factory``)."""
    from scaler.telemetry import ScalerTelemetry

    step = args.forecast_step_seconds
    if state_factory is None and args.decider_process:
        from scaler.decider_process import DeciderProcess
        from scaler.decider_wire import DeciderConfig

        telemetry = ScalerTelemetry(part="rpc")
        config = DeciderConfig(
            refresh_interval_s=args.refresh_seconds,
            refit_interval_s=args.refit_seconds,
            forecast_step_s=step,
            fit_window_s=args.fit_window_seconds,
            rate_window_s=args.rate_window_seconds,
            speed=speed,
        )
        return DeciderProcess(config, telemetry, log_level=args.log_level), telemetry
    if state_factory is None:
        from scaler.state import ScalerState

        state_factory = ScalerState
    from scaler.sources import default_source_factory

    telemetry = ScalerTelemetry()
    optional: dict[str, Any] = {"forecast_step_s": step} if step is not None else {}
    if args.fit_window_seconds is not None:
        optional["fit_window_s"] = args.fit_window_seconds
    if speed != 1.0:
        optional["speed"] = speed
    state = state_factory(
        telemetry=telemetry,
        refresh_interval_s=args.refresh_seconds,
        refit_interval_s=args.refit_seconds,
        source_factory=default_source_factory(rate_window_s=args.rate_window_seconds),
        **optional,
    )
    return state, telemetry
