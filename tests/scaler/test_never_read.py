"""A fleet the scaler never managed to read is answered UNAVAILABLE, never minReplicas.

KEDA keeps the current replica count on an error (and applies the
ScaledObject's own ``fallback`` after ``failureThreshold`` of them); an answer
of ``minReplicas`` instead tells the HPA to shrink a serving fleet. The test
runs ``prescaler serve`` as deployed, with ``metricsUrls`` pointing at a port
that refuses connections (its decider process reading it, Python gRPC
answering from the decider's table), over several refreshes.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys

import grpc
import pytest

from tests.scaler.keda_client import KedaClient, ref
from tests.scaler.test_service import _spawn


def _refused_url() -> str:
    """A loopback URL nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


async def test_never_read_fleet_stays_unavailable() -> None:
    """Five refreshes of a refused scrape: GetMetrics and IsActive answer
    UNAVAILABLE every time (before the fix: 1 replica from the second refresh)."""
    proc, port, _ = _spawn(
        [
            sys.executable,
            "-m",
            "prescaler.cli",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--metrics-port",
            "-1",
            "--refresh-seconds",
            "1",
            "--grace-seconds",
            "1",
        ]
    )
    meta = {"metricsUrls": _refused_url(), "minReplicas": "1", "maxReplicas": "20"}
    so = ref("llama", "llm", meta)
    codes: list[grpc.StatusCode] = []
    details: list[str] = []
    try:
        async with KedaClient(f"127.0.0.1:{port}") as client:
            targets = await client.get_metric_spec(so, 10)
            name = targets[0].hpa_metric_name
            for _ in range(6):
                await asyncio.sleep(1.0)
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await client.get_metrics(so, name, 10)
                codes.append(err.value.code())
                details.append(err.value.details() or "")
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await client.is_active(so, 10)
                codes.append(err.value.code())
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
    assert set(codes) == {grpc.StatusCode.UNAVAILABLE}
    assert "direct scrape: no reading from" in details[-1], details[-1]
