"""Fuzzed metadata and requests: only OK or INVALID_ARGUMENT, never a crash or UNKNOWN."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from decision.settings import METADATA_KEYS, SettingsError, parse_settings
from protos import externalscaler_pb2 as pb
from protos import externalscaler_pb2_grpc as pb_grpc
from scaler.server import start_server
from scaler.service import METRIC_NAME
from scaler.telemetry import ScalerTelemetry
from tests.scaler.fake_state import FakeState

# protobuf strings must be valid UTF-8: no lone surrogates
text = st.text(st.characters(exclude_categories=["Cs"]), max_size=30)
numberish = st.one_of(
    st.integers(-10, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["", " ", "auto", "off", "true", "1e999", "0x10", "3.0", "-0", "NaN", "１"]),
)
known_values = st.one_of(
    numberish,
    text,
    st.sampled_from([
        "http://prometheus:9090", "https://p.example/prom", "prometheus:9090", "http://[::1]:9090",
        'app="vllm"', 'a="x"}or vector(1)', "app=vllm", "app in (a,b)", "llama-3-8b@g5.xlarge",
        "holt_winters", "prescaler-balloon", "http://10.0.0.1:8000/metrics,http://10.0.0.2:8000/metrics",
    ]),
)  # fmt: skip
keys = st.one_of(
    st.sampled_from(sorted(METADATA_KEYS)),
    st.sampled_from(
        [
            "scalerAddress",
            "enableTLS",
            "metricType",
            "prometheusAddressFromEnv",
            "fooFromEnv",
            "unknownKey",
        ]
    ),
    text,
)
SOURCE = st.sampled_from([
    {"prometheusAddress": "http://prometheus:9090"},
    {"metricsUrls": "http://10.0.0.1:8000/metrics"},
    {"podSelector": "app=vllm"},
    {},
])  # fmt: skip
metadata = st.builds(
    lambda base, extra: {**base, **extra}, SOURCE, st.dictionaries(keys, known_values, max_size=6)
)


@settings(max_examples=1000, deadline=None)
@given(metadata)
def test_parse_settings_raises_only_settings_error(meta: dict[str, str]) -> None:
    try:
        s = parse_settings(meta)
    except SettingsError as exc:
        assert exc.key in meta or exc.key in METADATA_KEYS
        return
    assert s.min_replicas <= s.max_replicas


# Regex fragments, Python-only constructs among them: "(?" + "!" is a lookahead.
REGEX_TOKENS = st.sampled_from([
    "a", "b", "-", ".", "*", "+", "?", "|", "^", "$", "(", ")", "(?", "[", "]", "{", "}", ",",
    "0", "1", "2", ":", "=", "!", "<", ">", "P", "i", "x", "&", "~", "#", "\\", "\\d", "\\1",
    "\\Z", "\\b",
])  # fmt: skip
PYTHON_ONLY = ("(?=", "(?!", "(?<=", "(?<!", "(?>", "(?(", "(?P=", "(?#", "*+", "++", "?+")
POSSESSIVE_REPEAT = re.compile(r"\{[0-9]+(,[0-9]*)?\}\+")


@settings(max_examples=400, deadline=None)
@given(st.lists(REGEX_TOKENS, max_size=12).map("".join), st.sampled_from(["=~", "!~"]))
def test_selector_regex_is_refused_or_common_to_python_and_re2(regex: str, op: str) -> None:
    """A selector regex either fails with a SettingsError naming ``selector`` or
    is one that Python compiles without a warning (warnings are errors here)
    and that holds none of the Python-only constructs."""
    quoted = regex.replace("\\", "\\\\").replace('"', '\\"')
    try:
        s = parse_settings({"prometheusAddress": "http://p:9090", "selector": f'x{op}"{quoted}"'})
    except SettingsError as exc:
        assert exc.key == "selector"
        return
    (matcher,) = s.selector
    assert matcher.value == regex
    re.compile(regex)
    if "\\" not in regex and "[" not in regex:  # no escapes or classes: plain substrings
        assert not any(bad in regex for bad in PYTHON_ONLY), regex
        assert not POSSESSIVE_REPEAT.search(regex), regex
    matcher.matches({"x": "ab"})


class ServerThread:
    """The aio server on its own loop in a thread, so hypothesis drives it synchronously."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._start())
        self.ready.set()
        self.loop.run_forever()

    async def _start(self) -> None:
        self.running = await start_server(FakeState(), ScalerTelemetry(), host="127.0.0.1", port=0)
        self.port = self.running.port

    def start(self) -> ServerThread:
        self.thread.start()
        assert self.ready.wait(30)
        return self

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.running.close(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()


@pytest.fixture(scope="module")
def channel() -> Iterator[grpc.Channel]:
    """KEDA's port, served by the scaler's grpc.aio server."""
    server = ServerThread().start()
    chan = grpc.insecure_channel(f"127.0.0.1:{server.port}")
    try:
        yield chan
    finally:
        chan.close()
        server.stop()


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> pb_grpc.ExternalScalerStub:
    return pb_grpc.ExternalScalerStub(channel)


ALLOWED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT}
names = st.one_of(st.sampled_from(["llama", "vllm-llama3"]), text)
metric_names = st.one_of(st.sampled_from(["", METRIC_NAME, f"s0-{METRIC_NAME}", "s12-x"]), text)


def _code(fn: object, request: object) -> grpc.StatusCode:
    try:
        fn(request, timeout=10)  # type: ignore[operator]
    except grpc.RpcError as exc:
        return exc.code()  # type: ignore[attr-defined, no-any-return]
    return grpc.StatusCode.OK


FUZZ = settings(
    max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@FUZZ
@given(names, names, metadata, metric_names)
def test_rpcs_answer_ok_or_invalid_argument(
    stub: pb_grpc.ExternalScalerStub, name: str, namespace: str, meta: dict[str, str], metric: str
) -> None:
    so = pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=meta)
    codes = {
        _code(stub.GetMetricSpec, so),
        _code(stub.IsActive, so),
        _code(stub.GetMetrics, pb.GetMetricsRequest(scaledObjectRef=so, metricName=metric)),
    }
    assert codes <= ALLOWED, codes


@FUZZ
@given(st.binary(max_size=200))
def test_garbage_bytes_never_crash(channel: grpc.Channel, payload: bytes) -> None:
    """Raw bytes as a request: a decode error (INTERNAL from gRPC's own deserializer) or
    a parsed request answered OK / INVALID_ARGUMENT; never UNKNOWN."""
    call = channel.unary_unary(
        "/externalscaler.ExternalScaler/GetMetrics",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    code = _code(call, payload)
    assert code in ALLOWED | {grpc.StatusCode.INTERNAL}, code
    assert code != grpc.StatusCode.UNKNOWN


POLLED = ("GetMetrics", "IsActive", "GetMetricSpec")


@FUZZ
@given(names, names, metadata, metric_names, st.data())
def test_mangled_requests_never_crash(
    channel: grpc.Channel,
    name: str,
    namespace: str,
    meta: dict[str, str],
    metric: str,
    data: st.DataObject,
) -> None:
    """A valid KEDA request cut short, with a byte flipped, bytes spliced in, or a
    part repeated, reaches the parsers' nested paths (the ref inside
    GetMetricsRequest, map entries) that random bytes rarely do: still only a
    decode error (INTERNAL) or OK / INVALID_ARGUMENT, never UNKNOWN or a crash."""
    so = pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=meta)
    method = data.draw(st.sampled_from(POLLED))
    request = pb.GetMetricsRequest(scaledObjectRef=so, metricName=metric)
    valid = (request if method == "GetMetrics" else so).SerializeToString()
    at = data.draw(st.integers(0, len(valid)))
    end = data.draw(st.integers(at, len(valid)))
    how = data.draw(st.sampled_from(["cut", "flip", "splice", "repeat"]))
    if how == "cut":
        payload = valid[:at]
    elif how == "flip" and at < len(valid):
        payload = valid[:at] + bytes([valid[at] ^ data.draw(st.integers(1, 255))]) + valid[at + 1 :]
    elif how == "splice":
        payload = valid[:at] + data.draw(st.binary(max_size=12)) + valid[end:]
    else:
        payload = valid[:end] + valid[at:]
    call = channel.unary_unary(
        f"/externalscaler.ExternalScaler/{method}",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    code = _code(call, payload)
    assert code in ALLOWED | {grpc.StatusCode.INTERNAL}, code
