"""The gRPC service over real TCP (port 0), called the way KEDA calls it."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from decision.policy import Decision
from protos import externalscaler_pb2 as pb
from scaler.server import RunningServer, start_server
from scaler.service import METRIC_NAME, SERVICE_NAME, SettingsCache
from scaler.sources.prometheus import PrometheusSource
from scaler.state import ScalerState
from scaler.telemetry import ScalerTelemetry
from tests.scaler.fake_state import FakeState
from tests.scaler.keda_client import HpaModel, KedaClient, ref

ROOT = Path(__file__).resolve().parents[2]
META = {
    "scalerAddress": "prescaler.keda:9090",
    "prometheusAddress": "http://prometheus:9090",
    "selector": 'app="vllm"',
    "maxReplicas": "20",
}
SO = ref("llama", "llm", META)

# Golden wire bytes (protobuf encoding of the expected responses).
SPEC_BYTES = bytes.fromhex(
    "0a270a1a7072657363616c65722d646573697265642d7265706c69636173100119000000000000f03f"
)
METRICS_7_BYTES = bytes.fromhex(
    "0a270a1a7072657363616c65722d646573697265642d7265706c696361731007190000000000001c40"
)


class Harness:
    def __init__(
        self, running: RunningServer, state: FakeState, telemetry: ScalerTelemetry
    ) -> None:
        self.running, self.state, self.telemetry = running, state, telemetry
        self.address = f"127.0.0.1:{running.port}"
        self.client = KedaClient(self.address)
        self.stub = self.client.stub


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    state, telemetry = FakeState(), ScalerTelemetry()
    running = await start_server(state, telemetry, host="127.0.0.1", port=0)
    h = Harness(running, state, telemetry)
    try:
        yield h
    finally:
        await h.client.close()
        await running.server.stop(0)


async def test_get_metric_spec_golden(harness: Harness) -> None:
    """One metric, lowercase URL-safe name, target 1 in both fields, byte for byte."""
    response = await harness.stub.GetMetricSpec(SO)
    assert response.SerializeToString() == SPEC_BYTES
    assert re.fullmatch(r"[a-z0-9-]+", METRIC_NAME)
    assert harness.state.registered[("llm", "llama")].max_replicas == 20


async def test_get_metrics_golden(harness: Harness) -> None:
    harness.state.register("llm", "llama", harness.running.service.settings_cache.get(META))
    harness.state.decisions[("llm", "llama")] = Decision(1.0, 7, "queue", {"queue": 7.0})
    response = await harness.stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=SO, metricName=METRIC_NAME)
    )
    assert response.SerializeToString() == METRICS_7_BYTES
    prefixed = await harness.stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=SO, metricName=f"s3-{METRIC_NAME}")
    )
    assert prefixed.metricValues[0].metricValue == 7


async def test_zero_replicas_is_a_zero_value(harness: Harness) -> None:
    response = await harness.stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=SO, metricName=METRIC_NAME)
    )
    (value,) = response.metricValues
    assert (value.metricValue, value.metricValueFloat) == (0, 0.0)


@pytest.mark.parametrize("reason", ["warming_up", "no_data"])
async def test_no_data_yet_is_unavailable_so_keda_keeps_the_scale(
    harness: Harness, reason: str
) -> None:
    """Before any data, GetMetrics and IsActive answer UNAVAILABLE, never a low count."""
    harness.state.register("llm", "llama", harness.running.service.settings_cache.get(META))
    harness.state.decisions[("llm", "llama")] = Decision(1.0, 0, reason, {}, data_stale=True)
    for call in (
        harness.stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=SO, metricName=METRIC_NAME)),
        harness.stub.IsActive(SO),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert reason in (caught.value.details() or "")


async def test_no_data_is_unavailable_even_with_a_fallback(harness: Harness) -> None:
    """Nothing ever read: UNAVAILABLE (KEDA keeps the count), also when
    ``fallbackReplicas`` is set; the policy's ``fallback`` answer, once
    ``fallbackAfterSeconds`` have passed, is what GetMetrics returns."""
    meta = dict(META, fallbackReplicas="4")
    so = ref("llama", "llm", meta)
    harness.state.register("llm", "llama", harness.running.service.settings_cache.get(meta))
    harness.state.decisions[("llm", "llama")] = Decision(1.0, 4, "no_data", {}, data_stale=True)
    request = pb.GetMetricsRequest(scaledObjectRef=so, metricName=METRIC_NAME)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await harness.stub.GetMetrics(request)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    harness.state.decisions[("llm", "llama")] = Decision(301.0, 4, "fallback", {}, data_stale=True)
    response = await harness.stub.GetMetrics(request)
    assert response.metricValues[0].metricValue == 4


async def test_keda_poll_and_hpa_land_on_the_answer(harness: Harness) -> None:
    """KEDA's poll (spec, metrics, active) through the HPA arithmetic gives our count."""
    await harness.client.get_metric_spec(SO)
    harness.state.decisions[("llm", "llama")] = Decision(1.0, 9, "forecast", {})
    harness.state.active[("llm", "llama")] = True
    result = await harness.client.poll(SO)
    assert (result.targets[0].hpa_metric_name, result.target_milli) == (f"s0-{METRIC_NAME}", 1000)
    assert (result.value_milli, result.active) == (9000, True)
    hpa = HpaModel(max_replicas=20)
    assert (
        hpa.sync(0.0, 3, result.value_milli, result.target_milli) == 7
    )  # scale-up rate: max(+4, +100 %)
    assert hpa.sync(15.0, 7, result.value_milli, result.target_milli) == 9


async def test_is_active(harness: Harness) -> None:
    assert (await harness.stub.IsActive(SO)).result is False
    harness.state.active[("llm", "llama")] = True
    assert (await harness.stub.IsActive(SO)).result is True


async def test_stream_is_active_pushes_true_on_burst(harness: Harness) -> None:
    call = harness.stub.StreamIsActive(SO)
    try:
        for _ in range(200):  # wait until the stream has subscribed
            if harness.state.subscribers[("llm", "llama")]:
                break
            await asyncio.sleep(0.01)
        harness.state.burst("llm", "llama")
        message = await asyncio.wait_for(call.read(), timeout=10)
        assert message.result is True
    finally:
        call.cancel()
    for _ in range(200):
        if not harness.state.subscribers[("llm", "llama")]:
            break
        await asyncio.sleep(0.01)
    assert harness.state.subscribers[("llm", "llama")] == []  # unsubscribed on cancel


async def test_stream_is_active_sends_current_state_when_active(harness: Harness) -> None:
    harness.state.register("llm", "llama", harness.running.service.settings_cache.get(META))
    harness.state.active[("llm", "llama")] = True
    call = harness.stub.StreamIsActive(SO)
    try:
        message = await asyncio.wait_for(call.read(), timeout=10)
        assert message.result is True
    finally:
        call.cancel()


async def test_stream_metric_spec_unimplemented(harness: Harness) -> None:
    call = harness.stub.StreamMetricSpec(SO)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


@pytest.mark.parametrize(
    ("request_ref", "needle"),
    [
        (ref("llama", "llm", {**META, "maxReplica": "3"}), "maxReplica"),
        (ref("llama", "llm", {**META, "selector": 'a="x"}or vector(1)'}), "selector"),
        (ref("llama", "llm", {"scalerAddress": "x:9090"}), "prometheusAddress"),
        (ref("", "llm", META), "name"),
        (ref("llama", "", META), "namespace"),
    ],
)
async def test_bad_requests_are_invalid_argument(
    harness: Harness, request_ref: pb.ScaledObjectRef, needle: str
) -> None:
    """Every RPC answers INVALID_ARGUMENT naming the key; never UNKNOWN."""
    calls = [
        harness.stub.GetMetricSpec(request_ref),
        harness.stub.IsActive(request_ref),
        harness.stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=request_ref, metricName=METRIC_NAME)
        ),
    ]
    for call in calls:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert needle in err.value.details()
    stream = harness.stub.StreamIsActive(request_ref)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stream.read()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_unknown_metric_name(harness: Harness) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await harness.stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=SO, metricName="s0-other")
        )
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "metricName" in err.value.details()


async def test_state_failure_is_internal_not_unknown(harness: Harness) -> None:
    def broken(namespace: str, name: str) -> Decision:
        raise RuntimeError("bug")

    harness.state.decision = broken  # type: ignore[method-assign]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await harness.stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=SO, metricName=METRIC_NAME)
        )
    assert err.value.code() == grpc.StatusCode.INTERNAL


async def test_metadata_parsed_once(harness: Harness) -> None:
    """The hot path reuses the cached settings object for identical metadata."""
    for _ in range(5):
        await harness.client.poll(SO)
    assert len(harness.running.service.settings_cache) == 1
    assert harness.state.register_calls == 15  # every RPC registers (idempotent)
    reordered = ref("llama", "llm", dict(reversed(list(META.items()))))
    await harness.stub.IsActive(reordered)
    assert len(harness.running.service.settings_cache) == 1


def test_settings_cache_is_bounded() -> None:
    cache = SettingsCache(capacity=3)
    for i in range(10):
        cache.get({"prometheusAddress": "http://p:9090", "maxReplicas": str(i + 1)})
    assert len(cache) == 3


async def test_handlers_answer_from_memory_fast(harness: Harness) -> None:
    """Server-side handler time stays in the low milliseconds (measured by telemetry)."""
    for _ in range(100):
        await harness.client.poll(SO)
    families = {
        f.name: f for f in text_string_to_metric_families(harness.telemetry.render().decode())
    }
    samples = families["prescaler_grpc_request_duration_seconds"].samples
    for method in ("GetMetricSpec", "GetMetrics", "IsActive"):
        count = next(
            s.value for s in samples if s.name.endswith("_count") and s.labels["method"] == method
        )
        total = next(
            s.value for s in samples if s.name.endswith("_sum") and s.labels["method"] == method
        )
        assert count == 100
        assert total / count < 0.005, f"{method} mean {total / count * 1e3:.2f} ms"


async def test_health_and_reflection(harness: Harness) -> None:
    channel = harness.client.channel
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", SERVICE_NAME):
        response = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert response.status == health_pb2.HealthCheckResponse.SERVING
    refl = reflection_pb2_grpc.ServerReflectionStub(channel)
    call = refl.ServerReflectionInfo()
    await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
    response = await call.read()
    await call.done_writing()
    names = {s.name for s in response.list_services_response.service}
    assert {"externalscaler.ExternalScaler", "grpc.health.v1.Health"} <= names
    await harness.running.health.enter_graceful_shutdown()
    response = await health.Check(health_pb2.HealthCheckRequest(service=""))
    assert response.status == health_pb2.HealthCheckResponse.NOT_SERVING


# ---------------------------------------------------------------------------
# `prescaler serve` as a process: SIGTERM drains and exits 0
# ---------------------------------------------------------------------------

_STUB_SERVE = """
import argparse, sys
from scaler.cli import register, serve_command
from tests.scaler.fake_state import FakeState
parser = argparse.ArgumentParser()
register(parser.add_subparsers())
args = parser.parse_args(sys.argv[1:])
sys.exit(serve_command(args, state_factory=FakeState))
"""


def _spawn(cmd: list[str]) -> tuple[subprocess.Popen[str], int, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"serving gRPC on [^:]+:(\d+)", line)
        if m:
            return proc, int(m.group(1)), lines
    proc.kill()
    raise AssertionError("server did not start:\n" + "".join(lines))


async def _sigterm_drains(cmd: list[str]) -> None:
    proc, port, _lines = _spawn(cmd)
    try:
        async with KedaClient(f"127.0.0.1:{port}") as client:
            # The real state has no Prometheus here: GetMetrics answers UNAVAILABLE
            # (no data yet) while the spec is served; either way the RPCs answer.
            targets = await client.get_metric_spec(SO, 10)
            assert targets[0].target_milli == 1000
            health = health_pb2_grpc.HealthStub(client.channel)
            status = (await health.Check(health_pb2.HealthCheckRequest(), timeout=10)).status
            assert status == health_pb2.HealthCheckResponse.SERVING
            stream = client.stub.StreamIsActive(SO)  # an open stream must not block the exit
            await asyncio.sleep(0.2)
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            rc = await asyncio.to_thread(proc.wait, 30)
            elapsed = time.monotonic() - started
            stream.cancel()
        assert rc == 0
        assert elapsed < 20, f"drain took {elapsed:.1f} s"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


async def test_sigterm_drains_and_exits_zero() -> None:
    await _sigterm_drains(
        [
            sys.executable,
            "-c",
            _STUB_SERVE,
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--metrics-port",
            "0",
            "--grace-seconds",
            "1",
        ]
    )


async def test_prescaler_serve_with_the_decider_process() -> None:
    """`prescaler serve` as shipped: the decider process behind Python gRPC."""
    await _sigterm_drains(
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
            "--grace-seconds",
            "1",
            "--decider-process",
        ],
    )


def test_the_front_flags_are_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """The compiled front is gone: its flags exit 2 saying what serves KEDA
    now; --forecast-worker stays the decider switch's old name."""
    from prescaler.cli import OneLineErrors
    from scaler.cli import REMOVED_FRONT, register

    parser = OneLineErrors(prog="prescaler")
    register(parser.add_subparsers())
    for argv in (
        ["serve", "--front", "on"],
        ["serve", "--front=off"],
        ["serve", "--front-binary", "/opt/prescaler-front"],
        ["serve", "--port", "0", "--front"],
    ):
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args(argv)
        assert exit_.value.code == 2, argv
        err = capsys.readouterr().err
        assert err == (
            f"prescaler serve: error: {REMOVED_FRONT} (see 'prescaler serve --help')\n"
        ), argv
        assert "Python gRPC serves KEDA directly" in err
    for argv, decider in (
        (["serve"], True),
        (["serve", "--no-decider-process"], False),
        (["serve", "--no-forecast-worker"], False),
        (["serve", "--forecast-worker"], True),
    ):
        assert parser.parse_args(argv).decider_process is decider, argv


def test_serve_flag_errors() -> None:
    import argparse

    from scaler.cli import register, serve_command

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    for argv in (
        ["serve", "--tls-cert", "x.pem"],
        ["serve", "--port", "70000"],
        ["serve", "--client-ca", "ca.pem"],
        ["serve", "--refresh-seconds", "0"],
        ["serve", "--refresh-seconds", "2", "--forecast-step-seconds", "3"],
        ["serve", "--forecast-step-seconds", "0"],
        ["serve", "--tls-cert", "/nonexistent.pem", "--tls-key", "/nonexistent.key"],
        ["serve", "--refresh-seconds", "nan"],
        ["serve", "--refit-seconds", "inf"],
        ["serve", "--fit-window-seconds", "nan"],
        ["serve", "--fit-window-seconds", "10"],
        ["serve", "--rate-window-seconds", "inf"],
        ["serve", "--grace-seconds", "nan"],
    ):
        assert serve_command(parser.parse_args(argv), state_factory=FakeState) == 2, argv


async def test_scaled_object_loop_follows_the_answer(harness: Harness) -> None:
    """KEDA activation then HPA syncs carry the fleet to the scaler's number and back."""
    from tests.scaler.keda_client import KedaActivation, ScaledObjectLoop

    loop = ScaledObjectLoop(
        harness.client, SO, hpa=HpaModel(max_replicas=20), keda=KedaActivation(cooldown_s=300)
    )
    assert await loop.step(0.0) == 0  # inactive, nothing to do
    key = ("llm", "llama")
    harness.state.active[key] = True
    harness.state.decisions[key] = Decision(15.0, 12, "forecast", {})
    assert await loop.step(15.0) == 1  # KEDA: 0 -> 1
    assert await loop.step(30.0) == 5  # HPA: max(1 + 4, 2)
    assert await loop.step(45.0) == 10
    assert await loop.step(60.0) == 12
    harness.state.decisions[key] = Decision(75.0, 2, "queue", {})
    assert await loop.step(75.0) == 12  # scale-down stabilization (300 s)
    harness.state.active[key] = False
    replicas = [await loop.step(t) for t in range(90, 700, 15)]
    by_time = dict(zip(range(90, 700, 15), replicas, strict=True))
    assert by_time[345] == 12  # the 12 recommended at t=60 holds 300 s
    assert by_time[360] == 2  # HPA: down to the answer (100 % per 15 s allowed)
    assert by_time[375] == 0  # KEDA: inactive for cooldownPeriod since t=75


async def test_rpc_answers_while_a_metrics_scrape_is_rendering() -> None:
    """/metrics renders off the event loop: a gRPC call completes while a
    (deliberately stuck) render is in progress. The order of events is what
    is checked, not timings: had the render run on the loop, or held the
    telemetry lock the handlers take, the RPC could only finish after it."""
    import threading

    import aiohttp

    started, release = threading.Event(), threading.Event()
    events: list[str] = []

    class StuckRender(ScalerTelemetry):
        def collect(self):  # type: ignore[no-untyped-def]
            families = super().collect()
            first = next(families)  # the stores have been read
            events.append("render-start")
            started.set()
            events.append("render-end" if release.wait(20) else "render-timed-out")
            yield first
            yield from families

    telemetry = StuckRender()
    running = await start_server(FakeState(), telemetry, host="127.0.0.1", port=0)
    metrics = await telemetry.serve("127.0.0.1", 0)
    client = KedaClient(f"127.0.0.1:{running.port}")
    try:
        async with aiohttp.ClientSession() as session:

            async def scrape() -> str:
                async with session.get(f"http://127.0.0.1:{metrics.port}/metrics") as resp:
                    assert resp.status == 200
                    return await resp.text()

            scraping = asyncio.create_task(scrape())
            assert await asyncio.to_thread(started.wait, 20)
            response = await client.stub.GetMetricSpec(SO, timeout=15)
            events.append("rpc-done")
            release.set()
            text = await scraping
        assert response.SerializeToString() == SPEC_BYTES
        assert events == ["render-start", "rpc-done", "render-end"]
        assert "prescaler_grpc_request_duration_seconds" in text
    finally:
        release.set()
        await client.close()
        await metrics.stop()
        await running.server.stop(0)


FOREIGN = [
    ({"selector": 'namespace=~"llm|other"'}, "scalerMetadata.selector"),
    ({"selector": 'namespace!="llm"'}, "scalerMetadata.selector"),
    ({"selector": 'namespace="other"'}, "scalerMetadata.selector"),
    (
        {"prometheusAddress": "", "podSelector": "app=vllm", "namespace": "other"},
        "scalerMetadata.namespace",
    ),
    (
        {"gatewayRateQuery": "sum(rate(gateway_requests_total[1m]))"},
        "scalerMetadata.gatewayRateQuery",
    ),
]


@pytest.mark.parametrize(("extra", "needle"), FOREIGN)
async def test_another_namespace_is_refused_unless_the_operator_allows_it(
    extra: dict[str, str], needle: str
) -> None:
    """A tenant's metadata cannot read another namespace's series by default."""
    meta = {k: v for k, v in {**META, **extra}.items() if v}
    foreign = ref("llama", "llm", meta)
    for allowed in (False, True):
        state, telemetry = FakeState(), ScalerTelemetry()
        running = await start_server(
            state, telemetry, host="127.0.0.1", port=0, allow_cross_namespace=allowed
        )
        client = KedaClient(f"127.0.0.1:{running.port}")
        try:
            if allowed:
                assert len(await client.get_metric_spec(foreign)) == 1
                assert ("llm", "llama") in state.registered
            else:
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await client.stub.GetMetricSpec(foreign)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert err.value.details().startswith(needle)
                assert "--allow-cross-namespace" in err.value.details()
                assert not state.registered
        finally:
            await client.close()
            await running.server.stop(0)


async def test_own_namespace_named_explicitly_is_fine(harness: Harness) -> None:
    own = ref("llama", "llm", {**META, "selector": 'namespace="llm",app="vllm"'})
    assert len(await harness.client.get_metric_spec(own)) == 1
    kube = {"scalerAddress": "x:9090", "podSelector": "app=vllm", "namespace": "llm"}
    assert len(await harness.client.get_metric_spec(ref("k", "llm", kube))) == 1


async def test_unavailable_says_what_failed_at_the_source() -> None:
    """A Prometheus nobody listens on (a closed local port), the real state
    behind the real service: KEDA's UNAVAILABLE names the object and says the
    connection was refused, not only ``no_data``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    telemetry = ScalerTelemetry()
    state = ScalerState(
        telemetry=telemetry,
        refresh_interval_s=0.2,
        forecast_step_s=0.2,
        query_delay_s=0.0,
        source_factory=lambda spec: PrometheusSource(spec.address, timeout_s=5.0, rate_window_s=5),
    )
    running = await start_server(state, telemetry, host="127.0.0.1", port=0)
    await state.start()
    so = ref("llama", "llm", dict(META, prometheusAddress=dead))
    details = ""
    try:
        async with KedaClient(f"127.0.0.1:{running.port}") as client:
            deadline = time.monotonic() + 60
            while "refused" not in details:
                assert time.monotonic() < deadline, details
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await client.get_metrics(so, METRIC_NAME, 10)
                assert err.value.code() == grpc.StatusCode.UNAVAILABLE
                details = err.value.details() or ""
                await asyncio.sleep(0.1)
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await client.is_active(so, 10)
    finally:
        await state.stop()
        await running.server.stop(0)
    assert re.fullmatch(
        rf"no data yet for llm/llama \((no_data|warming_up)\): Prometheus {re.escape(dead)} "
        r"unreachable: connection refused; KEDA keeps the current replica count",
        details,
    ), details
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "connection refused" in (err.value.details() or "")
