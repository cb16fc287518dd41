"""The scaler bench's load generator (``tests/scaler/keda_loadgen.py``) against
a small grpc.aio server: every object is polled with KEDA's three calls each
interval, "warming_up" answers are counted apart from errors, and the last
GetMetrics reply of each object comes back as the server's bytes."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import time
from pathlib import Path
from typing import Any

import grpc

from protos import externalscaler_pb2 as pb
from protos import externalscaler_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parents[2]


class _Scaler(pb_grpc.ExternalScalerServicer):
    """Answers each object with its index as the metric; object ``cold``
    is still warming up, object ``broken`` fails."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def _check(self, ref: Any, context: Any) -> None:
        if ref.name == "cold":
            await context.abort(grpc.StatusCode.UNAVAILABLE, "warming_up: backfilling")
        if ref.name == "broken":
            await context.abort(grpc.StatusCode.INTERNAL, "boom")

    async def GetMetricSpec(self, request: Any, context: Any) -> Any:
        self.calls.append(f"{request.name}:spec")
        await self._check(request, context)
        return pb.GetMetricSpecResponse()

    async def GetMetrics(self, request: Any, context: Any) -> Any:
        self.calls.append(f"{request.scaledObjectRef.name}:metrics")
        value = float(request.scaledObjectRef.name.removeprefix("so-"))
        return pb.GetMetricsResponse(
            metricValues=[pb.MetricValue(metricName=request.metricName, metricValueFloat=value)]
        )

    async def IsActive(self, request: Any, context: Any) -> Any:
        self.calls.append(f"{request.name}:active")
        return pb.IsActiveResponse(result=True)


def _plan(port: int, names: list[str], seconds: float, interval_s: float) -> dict[str, Any]:
    objects = []
    for name in names:
        ref = pb.ScaledObjectRef(name=name, namespace="ns")
        request = pb.GetMetricsRequest(scaledObjectRef=ref, metricName="m")
        objects.append(
            {
                "name": name,
                "ref": base64.b64encode(ref.SerializeToString()).decode(),
                "metrics_request": base64.b64encode(request.SerializeToString()).decode(),
            }
        )
    return {
        "address": f"127.0.0.1:{port}",
        "start_at": time.time() + 0.5,
        "seconds": seconds,
        "interval_s": interval_s,
        "timeout_s": 5.0,
        "seed": 1,
        "objects": objects,
    }


async def test_polls_every_object_each_interval_in_kedas_order() -> None:
    scaler = _Scaler()
    server = grpc.aio.server()
    pb_grpc.add_ExternalScalerServicer_to_server(scaler, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        plan = _plan(port, ["so-1", "so-2", "cold", "broken"], seconds=2.0, interval_s=0.5)
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.scaler.keda_loadgen",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            cwd=ROOT,
        )
        out, _ = await asyncio.wait_for(process.communicate(json.dumps(plan).encode()), 60)
        assert process.returncode == 0
    finally:
        await server.stop(None)
    result = json.loads(out)
    # 2 s at 0.5 s from a phase in [0, 0.5): 4 polls per object
    assert result["polls"] == 8
    assert result["warming_up"] == 4
    assert result["errors"] == 4
    assert result["error_samples"] == ["INTERNAL: boom"] * 4
    assert {m: len(v) for m, v in result["latencies"].items()} == {
        "GetMetricSpec": 8,
        "GetMetrics": 8,
        "IsActive": 8,
    }
    assert all(0 <= at < 2.5 and 0 < took < 5 for at, took in result["latencies"]["GetMetrics"])
    values = {
        name: pb.GetMetricsResponse.FromString(base64.b64decode(raw)).metricValues[0]
        for name, raw in result["last_metrics"].items()
    }
    assert {name: v.metricValueFloat for name, v in values.items()} == {"so-1": 1.0, "so-2": 2.0}
    # each poll: spec, metrics, active, in that order; a failed spec ends the poll
    so1 = [c for c in scaler.calls if c.startswith("so-1:")]
    assert so1 == ["so-1:spec", "so-1:metrics", "so-1:active"] * 4
    assert [c for c in scaler.calls if c.startswith("cold:")] == ["cold:spec"] * 4


async def test_an_unexpected_exception_counts_as_an_error() -> None:
    """Not only an RPC error: anything a call raises is one error with a
    sample, and the poll loop (and so the result) goes on."""
    from tests.scaler.keda_loadgen import _poll_object, _Totals

    class _Channel:
        def unary_unary(self, method: str) -> Any:
            async def call(request: bytes, timeout: float | None = None) -> bytes:
                raise RuntimeError("channel closed")

            return call

    plan = _plan(0, ["so-1"], seconds=0.3, interval_s=0.1)
    totals = _Totals()
    start = asyncio.get_running_loop().time()
    await _poll_object(
        _Channel(),  # type: ignore[arg-type]
        plan["objects"][0],
        start,
        start + 0.25,
        0.0,
        0.1,
        None,
        totals,
    )
    assert totals.polls == 0
    assert totals.errors == 3
    assert totals.error_samples == ["RuntimeError: channel closed"] * 3


def test_a_plan_missing_a_key_exits_2_in_one_line(monkeypatch: Any, capsys: Any) -> None:
    import io

    from tests.scaler.keda_loadgen import main

    plan = _plan(1, ["so-1"], seconds=1.0, interval_s=1.0)
    del plan["seconds"]
    del plan["objects"][0]["ref"]
    for broken, said in (
        (plan, "missing seconds"),
        ({**plan, "seconds": 1.0}, "objects[0] missing ref"),
        ([], "not a JSON object"),
    ):
        monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(broken)))
        assert main() == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err == f"keda-loadgen: bad plan: {said}\n"
