"""The compiled gRPC front (``front/``, ``scaler.front``): real child
process, real gRPC over TCP, KEDA's call pattern.

What must hold: every answer is byte for byte what the Python service would
give; the polled calls are answered from the table once learned; errors,
first calls, streams, health and reflection pass through; decisions and
removals reach the front; a killed front comes back on the same port.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from decision.policy import Decision
from protos import externalscaler_pb2 as pb
from scaler.front import FrontProcess
from scaler.server import RunningServer, start_server
from scaler.service import METRIC_NAME, SERVICE_NAME
from scaler.telemetry import ScalerTelemetry
from tests.scaler.fake_state import FakeState
from tests.scaler.front_support import front_options
from tests.scaler.keda_client import KedaClient, ref

META = {
    "scalerAddress": "prescaler.keda:9090",
    "prometheusAddress": "http://prometheus:9090",
    "selector": 'app="vllm"',
    "maxReplicas": "20",
    "model": "llama",
}
KEY = ("llm", "llama")
SO = ref("llama", "llm", META)
GET_METRICS = pb.GetMetricsRequest(scaledObjectRef=SO, metricName=METRIC_NAME)
# Golden wire bytes, the same as the Python service's (test_service.py).
SPEC_BYTES = bytes.fromhex(
    "0a270a1a7072657363616c65722d646573697265642d7265706c69636173100119000000000000f03f"
)
METRICS_7_BYTES = bytes.fromhex(
    "0a270a1a7072657363616c65722d646573697265642d7265706c696361731007190000000000001c40"
)


class Harness:
    def __init__(self, running: RunningServer, state: FakeState, telemetry: ScalerTelemetry):
        self.running, self.state, self.telemetry = running, state, telemetry
        self.address = f"127.0.0.1:{running.port}"
        self.client = KedaClient(self.address)
        self.stub = self.client.stub
        self.raw = grpc.aio.insecure_channel(self.address)

    def raw_call(self, method: str) -> Callable[[bytes], Awaitable[bytes]]:
        """A call that sends these exact bytes (as Go's protobuf might order them)."""
        return self.raw.unary_unary(f"/externalscaler.ExternalScaler/{method}")  # type: ignore[return-value]

    async def metrics(self) -> float:
        reply = await self.stub.GetMetrics(GET_METRICS, timeout=5)
        return reply.metricValues[0].metricValueFloat


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    state, telemetry = FakeState(), ScalerTelemetry()
    running = await start_server(
        state, telemetry, host="127.0.0.1", port=0, front=front_options(report_interval_s=0.1)
    )
    assert running.front is not None
    h = Harness(running, state, telemetry)
    try:
        yield h
    finally:
        await h.client.close()
        await h.raw.close()
        await running.close()


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _decide(h: Harness, replicas: int, reason: str = "queue", **kw: bool) -> None:
    h.state.decisions[KEY] = Decision(1.0, replicas, reason, {}, **kw)


async def _learned(h: Harness) -> None:
    """Poll until the front answers from its table (register is not called)."""

    async def served_by_front() -> bool:
        await h.client.poll(SO)
        before = h.state.register_calls
        for _ in range(3):
            await h.client.poll(SO)
        return h.state.register_calls == before

    await eventually(served_by_front)


async def test_answers_are_the_python_bytes(harness: Harness) -> None:
    _decide(harness, 7)
    spec = harness.raw_call("GetMetricSpec")
    metrics = harness.raw_call("GetMetrics")
    first = (await spec(SO.SerializeToString()), await metrics(GET_METRICS.SerializeToString()))
    await _learned(harness)
    again = (await spec(SO.SerializeToString()), await metrics(GET_METRICS.SerializeToString()))
    assert first == again == (SPEC_BYTES, METRICS_7_BYTES)


async def test_polls_are_answered_by_the_front_and_still_count_as_polls(
    harness: Harness,
) -> None:
    """After the first answers, 50 polls reach Python only as the front's
    reports: the state still sees the object as polled (never expired)."""
    _decide(harness, 3)
    await _learned(harness)
    before = harness.state.register_calls
    for _ in range(50):
        await harness.client.poll(SO)
    await asyncio.sleep(0.4)  # a few report intervals
    touched = harness.state.register_calls - before
    assert 1 <= touched <= 10


async def test_a_new_decision_reaches_the_front(harness: Harness) -> None:
    _decide(harness, 3)
    await _learned(harness)
    assert await harness.metrics() == 3
    _decide(harness, 11)

    async def updated() -> bool:
        return await harness.metrics() == 11

    await eventually(updated, timeout_s=2.0)
    harness.state.active[KEY] = True

    async def active() -> bool:
        return (await harness.stub.IsActive(SO)).result

    await eventually(active, timeout_s=2.0)


async def test_metadata_in_any_map_order_is_one_object(harness: Harness) -> None:
    """Go's protobuf marshals map entries in random order: every order of the
    same metadata is the same cached object, answered by the front."""
    _decide(harness, 5)
    await _learned(harness)
    base = pb.ScaledObjectRef(name=SO.name, namespace=SO.namespace).SerializeToString()
    pieces = [
        pb.ScaledObjectRef(scalerMetadata={k: v}).SerializeToString() for k, v in META.items()
    ]
    metrics = harness.raw_call("GetMetrics")
    before = harness.state.register_calls
    for order in itertools.islice(itertools.permutations(pieces), 24):
        ref_bytes = base + b"".join(order)
        assert pb.ScaledObjectRef.FromString(ref_bytes) == SO
        request = (
            b"\x0a"  # field 1 (scaledObjectRef), length-delimited
            + _varint(len(ref_bytes))
            + ref_bytes
            + pb.GetMetricsRequest(metricName=METRIC_NAME).SerializeToString()
        )
        reply = pb.GetMetricsResponse.FromString(await metrics(request))
        assert reply.metricValues[0].metricValue == 5
    await asyncio.sleep(0.3)
    assert harness.state.register_calls - before <= 5  # reports, not 24 forwarded calls


async def test_changed_metadata_is_judged_by_the_scaler(harness: Harness) -> None:
    """Same name, other metadata: not the cached object; bad values are still refused."""
    _decide(harness, 5)
    await _learned(harness)
    bad = ref(SO.name, SO.namespace, {**META, "maxReplicas": "lots"})
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=bad), timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "maxReplicas" in (caught.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=SO, metricName="other"), timeout=5
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_duplicate_metadata_keys_keep_protobufs_last_wins(harness: Harness) -> None:
    """A map key sent twice means the last value; the front must not guess."""
    _decide(harness, 5)
    first = pb.ScaledObjectRef(
        name=SO.name, namespace=SO.namespace, scalerMetadata={**META, "maxReplicas": "lots"}
    ).SerializeToString()
    last = pb.ScaledObjectRef(scalerMetadata={"maxReplicas": "20"}).SerializeToString()
    reply = await harness.raw_call("IsActive")(first + last)
    assert pb.IsActiveResponse.FromString(reply).result is False
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await harness.raw_call("IsActive")(last + first)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_unavailable_until_data_then_answered(harness: Harness) -> None:
    """warming_up is UNAVAILABLE through the front too, until a decision exists."""
    _decide(harness, 0, reason="warming_up", data_stale=True)
    await harness.stub.GetMetricSpec(SO, timeout=5)
    for _ in range(3):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await harness.stub.GetMetrics(GET_METRICS, timeout=5)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        await asyncio.sleep(0.25)  # the table has caught up: still UNAVAILABLE
    _decide(harness, 4)

    async def answered() -> bool:
        return await harness.metrics() == 4

    await eventually(answered)


async def test_a_forgotten_object_is_forwarded_again(harness: Harness) -> None:
    _decide(harness, 6)
    await _learned(harness)
    await asyncio.sleep(0.3)  # the polls' reports are in (a report re-registers)
    del harness.state.registered[KEY]
    del harness.state.decisions[KEY]
    await asyncio.sleep(0.5)  # the table's sweep sees it gone
    before = harness.state.register_calls
    await harness.client.poll(SO)
    assert harness.state.register_calls - before >= 3  # every call reached Python
    assert KEY in harness.state.registered


async def test_stream_is_active_health_and_reflection_pass_through(harness: Harness) -> None:
    stream = harness.stub.StreamIsActive(SO)
    await asyncio.sleep(0.3)
    harness.state.burst(*KEY)
    first = await asyncio.wait_for(stream.read(), 5)
    assert first.result is True
    stream.cancel()
    health = health_pb2_grpc.HealthStub(harness.raw)
    reply = await health.Check(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    reflection = reflection_pb2_grpc.ServerReflectionStub(harness.raw)

    async def ask() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
        yield reflection_pb2.ServerReflectionRequest(list_services="")

    names = set()
    async for answer in reflection.ServerReflectionInfo(ask()):
        names = {s.name for s in answer.list_services_response.service}
    assert SERVICE_NAME in names
    assert "prescaler.front.v1.Front" not in names  # internal, not advertised


async def test_latency_histogram_counts_front_answers(harness: Harness) -> None:
    _decide(harness, 2)
    await _learned(harness)
    for _ in range(20):
        await harness.metrics()

    def count() -> float:
        text = harness.telemetry.render().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if (
                    sample.name == "prescaler_grpc_request_duration_seconds_count"
                    and sample.labels.get("method") == "GetMetrics"
                ):
                    return sample.value
        return 0.0

    async def counted() -> bool:
        return count() >= 20

    await eventually(counted)


async def test_a_killed_front_comes_back_on_the_same_port(harness: Harness) -> None:
    _decide(harness, 8)
    await _learned(harness)
    front = harness.running.front
    assert front is not None and front.pid is not None
    port, pid = front.port, front.pid
    os.kill(pid, signal.SIGKILL)

    async def back() -> bool:
        try:
            return front.pid != pid and await harness.metrics() == 8
        except grpc.aio.AioRpcError:
            return False

    await eventually(back, timeout_s=10.0)
    assert front.port == port == harness.running.port
    assert front.restarts == 1


async def test_drain_lets_the_front_finish_then_stops(harness: Harness) -> None:
    _decide(harness, 2)
    await _learned(harness)
    front = harness.running.front
    assert front is not None
    await harness.running.drain(2.0)
    assert front.pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(front.pid, 0)
    with pytest.raises(grpc.aio.AioRpcError):
        await harness.stub.GetMetrics(GET_METRICS, timeout=1)


async def test_the_front_exits_when_its_parent_is_gone(tmp_path: Path) -> None:
    """Its stdin is the parent's pipe: EOF means the scaler died."""
    process = FrontProcess(
        front_options(),
        host="127.0.0.1",
        port=0,
        backend=tmp_path / "nobody.sock",
        private_dir=tmp_path,
        tls=None,
        grace_s=1.0,
    )
    await process.start()
    child = process._process
    assert child is not None and child.stdin is not None
    child.stdin.close()
    assert await asyncio.wait_for(child.wait(), 10) == 0
    await process.kill()


async def test_a_binary_that_does_not_start_is_a_clear_error(tmp_path: Path) -> None:
    fake = tmp_path / "prescaler-front"
    fake.write_text("#!/bin/sh\necho nope >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(OSError, match="did not start"):
        await start_server(
            FakeState(),
            ScalerTelemetry(),
            host="127.0.0.1",
            port=0,
            front=type(front_options())(fake),
        )
