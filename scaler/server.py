"""The scaler's gRPC server: start, serve, drain.

Apart from the servicer (``scaler.service``), which answers each call from
memory, this module owns the process's lifecycle around it: the server and
its options, health and reflection, TLS, the state's start and stop (with
``prescaler serve``, the decider process: ``scaler.decider_process``), the
metrics endpoint, and the signal-driven drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from grpc_health.v1 import health as grpc_health
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from scaler.service import (
    SERVICE_NAME,
    ExternalScalerService,
    ScalerStateProtocol,
    add_service,
)
from scaler.telemetry import MetricsServer, ScalerTelemetry
from scaler.tls import ServerTls, server_credentials

__all__ = ["RunningServer", "run_server", "start_server"]

log = logging.getLogger(__name__)

_SERVER_OPTIONS: list[tuple[str, Any]] = [
    # KEDA holds one connection and a StreamIsActive stream open for hours:
    # allow its keepalive pings instead of answering GOAWAY too_many_pings.
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_pings_without_data", 0),
    ("grpc.so_reuseport", 0),
]


@dataclass
class RunningServer:
    """A started gRPC server with its health servicer and bound port."""

    server: grpc.aio.Server
    port: int
    health: Any  # grpc_health.aio.HealthServicer
    service: ExternalScalerService

    async def drain(self, grace_s: float) -> None:
        """Health NOT_SERVING, then stop accepting and let calls finish."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace_s)

    async def close(self) -> None:
        """Stop at once, without draining (tests, aborted starts)."""
        await self.server.stop(0)


async def start_server(
    state: ScalerStateProtocol,
    telemetry: ScalerTelemetry,
    *,
    host: str = "0.0.0.0",
    port: int = 9090,
    tls: ServerTls | None = None,
    allow_cross_namespace: bool = False,
) -> RunningServer:
    """Build, bind and start the gRPC server (port 0 picks a free port)."""
    server = grpc.aio.server(options=_SERVER_OPTIONS)
    service = ExternalScalerService(state, telemetry, allow_cross_namespace=allow_cross_namespace)
    add_service(service, server)
    health = grpc_health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    reflection.enable_server_reflection(
        (
            SERVICE_NAME,
            health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
            reflection.SERVICE_NAME,
        ),
        server,
    )
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if tls is None:
        bound = server.add_insecure_port(address)
    else:
        bound = server.add_secure_port(address, server_credentials(tls))
    if bound == 0:
        raise OSError(f"cannot bind gRPC server to {address}")
    await server.start()
    await health.set("", health_pb2.HealthCheckResponse.SERVING)
    await health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
    return RunningServer(server, bound, health, service)


async def run_server(
    state: ScalerStateProtocol,
    telemetry: ScalerTelemetry,
    *,
    host: str = "0.0.0.0",
    port: int = 9090,
    metrics_port: int | None = 9091,
    tls: ServerTls | None = None,
    grace_s: float = 10.0,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[RunningServer, MetricsServer | None], Awaitable[None] | None] | None = None,
    allow_cross_namespace: bool = False,
) -> int:
    """Run until SIGTERM/SIGINT (or ``stop`` is set), then drain gracefully.

    Order on shutdown: health NOT_SERVING (so a readiness probe and KEDA's
    round_robin move away), gRPC stop with ``grace_s`` for in-flight calls,
    then the state's background loop and the metrics endpoint. Returns 0.
    """
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    metrics: MetricsServer | None = None
    running: RunningServer | None = None
    try:
        await state.start()
        running = await start_server(
            state,
            telemetry,
            host=host,
            port=port,
            tls=tls,
            allow_cross_namespace=allow_cross_namespace,
        )
        if metrics_port is not None:
            metrics = await telemetry.serve(host, metrics_port)
        log.info(
            "prescaler serving gRPC on %s:%d%s (Python gRPC)%s",
            host,
            running.port,
            " (TLS)" if tls and not tls.mutual else " (mTLS)" if tls else "",
            f", metrics on :{metrics.port}" if metrics else "",
        )
        if on_ready is not None:
            result = on_ready(running, metrics)
            if asyncio.iscoroutine(result):
                await result
        await stop.wait()
        log.info("draining (grace %.1f s)", grace_s)
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        if running is not None:
            await running.drain(grace_s)
        await state.stop()
        if metrics is not None:
            await metrics.stop()
    return 0
