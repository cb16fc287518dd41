"""``prescaler serve``'s two processes for real: the gRPC server answering
from the decider's table over TCP, the decider a real child process reading
a fake vLLM page; killed mid-poll, it is restarted and no call fails."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable

import aiohttp
import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from protos import externalscaler_pb2 as pb
from scaler.decider_process import DeciderProcess
from scaler.decider_wire import DeciderConfig, TableUpdate
from scaler.decision_table import DecisionTable
from scaler.server import start_server
from scaler.service import METRIC_NAME
from scaler.telemetry import ScalerTelemetry
from tests.scaler.conftest import Engine, FakeVllm
from tests.scaler.keda_client import KedaClient, ref

pytestmark = pytest.mark.integration


async def _until(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.05)


async def test_a_killed_decider_restarts_while_every_call_is_answered(
    fake_vllm: Callable[..., FakeVllm],
) -> None:
    vllm = fake_vllm(engines=[Engine(waiting=9.0, running=2.0)])
    so = ref("llama", "llm", {"metricsUrls": vllm.url, "maxReplicas": "20"})
    request = pb.GetMetricsRequest(scaledObjectRef=so, metricName=METRIC_NAME)
    telemetry = ScalerTelemetry(part="rpc")
    decider = DeciderProcess(DeciderConfig(refresh_interval_s=0.5), telemetry)
    await decider.start()
    running = await start_server(decider, telemetry, host="127.0.0.1", port=0)
    metrics = await telemetry.serve("127.0.0.1", 0)
    client = KedaClient(f"127.0.0.1:{running.port}")
    try:
        with pytest.raises(grpc.aio.AioRpcError) as first:
            await client.stub.GetMetrics(request)
        assert first.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "warming_up" in (first.value.details() or "")

        answers: list[int] = []

        async def answered() -> None:
            try:
                response = await client.stub.GetMetrics(request)
            except grpc.aio.AioRpcError:
                return
            answers.append(response.metricValues[0].metricValue)

        while not answers:
            await answered()
            await asyncio.sleep(0.05)
        expected = answers[-1]
        assert expected >= 3  # 9 waiting at 3 per replica

        # The decider's series and this process's latency, each family once.
        async with aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{metrics.port}/metrics"
            async with session.get(url) as response:
                text = await response.text()
        names = [family.name for family in text_string_to_metric_families(text)]
        assert len(names) == len(set(names))
        assert 'prescaler_desired_replicas{namespace="llm",scaledobject="llama"}' in text
        assert "prescaler_grpc_request_duration_seconds" in names

        # Kill the decider mid-poll: every call is still answered, the same.
        errors: list[str] = []
        served: list[int] = []
        stop = asyncio.Event()

        async def poll() -> None:
            while not stop.is_set():
                try:
                    response = await client.stub.GetMetrics(request)
                    served.append(response.metricValues[0].metricValue)
                    await client.stub.IsActive(so)
                except grpc.aio.AioRpcError as exc:
                    errors.append(f"{exc.code()}: {exc.details()}")
                await asyncio.sleep(0.01)

        poller = asyncio.create_task(poll())
        await asyncio.sleep(0.2)
        old_pid = decider.pid
        assert old_pid is not None
        os.kill(old_pid, signal.SIGKILL)
        await _until(lambda: decider.restarts == 1, "the decider's death is noticed")
        await _until(
            lambda: (
                decider.pid not in (None, old_pid)
                and decider.status().get("objects_ready") == 1.0
                and decider.status().get("refreshes", 0) >= 2
            ),
            "a new decider answers again",
        )
        stop.set()
        await poller
        assert errors == []
        assert len(served) > 10 and set(served) == {expected}
    finally:
        await client.close()
        await running.close()
        await metrics.stop()
        await decider.stop()
    assert decider.pid is None


class _TableFailingOnce(DecisionTable):
    """A table whose next update raises: a bug anywhere on the serving side."""

    fail_next = False

    def apply(self, update: TableUpdate) -> None:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("a bug while applying an update")
        super().apply(update)


async def test_a_failed_supervision_or_a_stuck_decider_is_restarted() -> None:
    table = _TableFailingOnce()
    decider = DeciderProcess(
        DeciderConfig(refresh_interval_s=0.2),
        ScalerTelemetry(part="rpc"),
        table=table,
        stuck_after_s=1.5,
    )
    await decider.start()
    try:
        await _until(lambda: "objects" in decider.status(), "the decider reports")
        text = (await decider.exposition()).decode()
        assert "prescaler_decider_up 1.0" in text
        assert "prescaler_decider_restarts_total 0.0" in text
        assert "# TYPE prescaler_desired_replicas gauge" in text  # the decider's own series

        # Not an OSError: the supervisor still restarts, and stops serving
        # the lost decider's series meanwhile.
        table.fail_next = True
        await _until(lambda: decider.restarts >= 1, "a failed supervision restarts")
        assert not decider.connected
        text = (await decider.exposition()).decode()
        assert "prescaler_decider_up 0.0" in text
        assert "prescaler_desired_replicas" not in text

        # Alive but silent: killed once stuck_after_s passes, then restarted.
        await _until(lambda: decider.connected and decider.pid is not None, "a new decider")
        stuck = decider.pid
        assert stuck is not None
        os.kill(stuck, signal.SIGSTOP)
        await _until(lambda: decider.pid not in (None, stuck), "the stuck decider is replaced")
        assert decider.restarts >= 2
    finally:
        await decider.stop()
