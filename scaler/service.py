"""The KEDA external scaler gRPC service (grpc.aio).

Every RPC answers from memory: it parses the trigger metadata (cached by the
map's content), registers the ScaledObject with the state (idempotent) and
reads the state's last decision; nothing here waits on Prometheus or
Kubernetes. ``GetMetricSpec`` names one metric, :data:`METRIC_NAME`, target 1
(so the HPA lands exactly on the value); ``GetMetrics`` answers the desired
replicas; ``IsActive``/``StreamIsActive`` traffic or a forecast within the
lead time (the stream pushes each burst); ``StreamMetricSpec`` is
UNIMPLEMENTED. Bad metadata is INVALID_ARGUMENT naming the key, an
unexpected error INTERNAL (logged). The wire contract: docs/contracts.md.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import grpc

from decision.policy import NO_ANSWER_REASONS, Decision
from decision.settings import ScalerSettings, SettingsError, parse_settings
from protos import externalscaler_pb2 as pb
from protos import externalscaler_pb2_grpc as pb_grpc
from scaler.sources import foreign_namespace_key
from scaler.telemetry import ScalerTelemetry

__all__ = [
    "METRIC_NAME",
    "SERVICE_NAME",
    "ExternalScalerService",
    "ScalerStateProtocol",
    "SettingsCache",
]

log = logging.getLogger(__name__)

METRIC_NAME = "prescaler-desired-replicas"
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ExternalScaler"].full_name
_MAX_DETAIL = 500
_MAX_NAME = 253
_PREFIXED = re.compile(r"s[0-9]+-" + re.escape(METRIC_NAME))


class ScalerStateProtocol(Protocol):
    """What the service needs from ``scaler.state.ScalerState``."""

    def register(self, namespace: str, name: str, settings: ScalerSettings) -> None: ...

    def decision(self, namespace: str, name: str) -> Decision: ...

    def is_active(self, namespace: str, name: str) -> bool: ...

    def source_problem(self, namespace: str, name: str) -> str | None: ...

    def subscribe_active(self, namespace: str, name: str) -> asyncio.Queue[bool]: ...

    def unsubscribe_active(self, namespace: str, name: str, queue: asyncio.Queue[bool]) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class _InvalidArgument(Exception):
    pass


class _Unavailable(Exception):
    """No answer can be given yet without risking a wrong scale-down.

    KEDA treats an error as "keep the current replica count" (and applies the
    ScaledObject's own ``fallback`` after ``failureThreshold`` errors), which is
    exactly right before the first data arrive: a freshly restarted scaler must
    not answer ``minReplicas`` to a fleet of ten.
    """


Explain = Callable[[], tuple[str, str | None]]
"""The object an UNAVAILABLE answer is about (``ns/name``) and what failed, if known."""


def _settled(
    decision: Decision, settings: ScalerSettings, explain: Explain | None = None
) -> Decision:
    """The decision, or UNAVAILABLE while nothing has been observed.

    Neither ``warming_up`` (seconds after a restart, before the backfill) nor
    ``no_data`` (nothing ever read) is an answer: ``minReplicas`` would tell
    the HPA to shrink a fleet the scaler cannot see. The policy turns
    ``no_data`` into ``fallback`` (answered) once ``fallbackAfterSeconds``
    have passed, when the user set ``fallbackReplicas``. ``explain()`` names
    the object and what failed, so whoever reads KEDA's error sees the cause
    (a source refused, unresolvable, answering an HTTP error, too slow).
    """
    if decision.reason in NO_ANSWER_REASONS:
        about, problem = explain() if explain is not None else ("", None)
        raise _Unavailable(
            "no data yet"
            + (f" for {about}" if about else "")
            + f" ({decision.reason})"
            + (f": {problem}" if problem else "")
            + "; KEDA keeps the current replica count"
        )
    return decision


def _metrics_response(
    decision: Decision, settings: ScalerSettings, explain: Explain | None = None
) -> pb.GetMetricsResponse:
    """GetMetrics' answer for a decision (raises :class:`_Unavailable`)."""
    replicas = _settled(decision, settings, explain).replicas
    value = float(replicas) if math.isfinite(replicas) and replicas > 0 else 0.0
    mv = pb.MetricValue(
        metricName=METRIC_NAME, metricValue=math.ceil(value), metricValueFloat=value
    )
    return pb.GetMetricsResponse(metricValues=[mv])


def metric_spec_response() -> pb.GetMetricSpecResponse:
    spec = pb.MetricSpec(metricName=METRIC_NAME, targetSize=1, targetSizeFloat=1.0)
    return pb.GetMetricSpecResponse(metricSpecs=[spec])


@dataclass(frozen=True)
class _Undecodable:
    """A request whose bytes are not a valid protobuf message.

    gRPC's own deserializer would turn a DecodeError into UNKNOWN before any
    handler runs; decoding here lets the handler answer INVALID_ARGUMENT.
    """

    message_type: str
    error: str


def _safe_parser(cls: Any) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except Exception as exc:
            return _Undecodable(cls.DESCRIPTOR.full_name, str(exc))

    return parse


class SettingsCache:
    """Parsed settings (or the error) by metadata content, LRU-bounded.

    KEDA sends the same map on every call, so after the first call the hot
    path costs one sort of a handful of keys and a dict lookup.
    """

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._cache: OrderedDict[tuple[tuple[str, str], ...], ScalerSettings | SettingsError] = (
            OrderedDict()
        )

    def get(self, metadata: Mapping[str, str]) -> ScalerSettings:
        key = tuple(sorted(metadata.items()))
        hit = self._cache.get(key)
        if hit is None:
            try:
                hit = parse_settings(dict(key))
            except SettingsError as exc:
                hit = exc
            self._cache[key] = hit
            if len(self._cache) > self.capacity:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        if isinstance(hit, SettingsError):
            raise hit
        return hit

    def __len__(self) -> int:
        return len(self._cache)


def _ascii(text: str) -> str:
    """gRPC status details travel in an HTTP/2 header: keep them ASCII."""
    clean = text.encode("ascii", "backslashreplace").decode("ascii")
    return clean if len(clean) <= _MAX_DETAIL else clean[: _MAX_DETAIL - 3] + "..."


_Resp = TypeVar("_Resp")
_Req = TypeVar("_Req")


def _decoded(request: _Req | _Undecodable) -> _Req:
    if isinstance(request, _Undecodable):
        raise _InvalidArgument(f"request: not a valid {request.message_type} ({request.error})")
    return request


class ExternalScalerService(pb_grpc.ExternalScalerServicer):
    """KEDA's ExternalScaler, answering from a :class:`ScalerStateProtocol`."""

    def __init__(
        self,
        state: ScalerStateProtocol,
        telemetry: ScalerTelemetry,
        *,
        settings_cache: SettingsCache | None = None,
        allow_cross_namespace: bool = False,
    ) -> None:
        self.state = state
        self.telemetry = telemetry
        self.settings_cache = settings_cache or SettingsCache()
        self.allow_cross_namespace = allow_cross_namespace

    # -- helpers -------------------------------------------------------------
    def _resolve(self, ref: pb.ScaledObjectRef) -> tuple[str, str, ScalerSettings]:
        _decoded(ref)
        name, namespace = ref.name, ref.namespace
        for key, value in (("name", name), ("namespace", namespace)):
            if not value or len(value) > _MAX_NAME:
                raise _InvalidArgument(
                    f"{key}: ScaledObjectRef.{key} must be 1-{_MAX_NAME} characters"
                )
        try:
            settings = self.settings_cache.get(ref.scalerMetadata)
        except SettingsError as exc:
            raise _InvalidArgument(f"scalerMetadata.{exc}") from None
        if not self.allow_cross_namespace:
            foreign = foreign_namespace_key(settings, namespace)
            if foreign is not None:
                raise _InvalidArgument(
                    f"scalerMetadata.{foreign}: reads series outside the ScaledObject's namespace "
                    f"{namespace!r}; the scaler must run with --allow-cross-namespace for that"
                )
        self.state.register(namespace, name, settings)
        return namespace, name, settings

    def _explainer(self, namespace: str, name: str) -> Explain:
        """What an UNAVAILABLE answer names: the object and, when its source
        failed, the source's last error in words."""

        def explain() -> tuple[str, str | None]:
            return f"{namespace}/{name}", self.state.source_problem(namespace, name)

        return explain

    async def _call(
        self, method: str, context: grpc.aio.ServicerContext, body: Callable[[], _Resp]
    ) -> _Resp:
        start = time.perf_counter()
        try:
            return body()
        except _InvalidArgument as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, _ascii(str(exc)))
        except _Unavailable as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, _ascii(str(exc)))
        except Exception:
            log.exception("%s failed", method)
            await context.abort(
                grpc.StatusCode.INTERNAL, f"{method}: internal error (see scaler logs)"
            )
        finally:
            self.telemetry.observe_rpc(method, time.perf_counter() - start)
        raise AssertionError("unreachable")  # context.abort raises

    # -- RPCs ----------------------------------------------------------------
    async def GetMetricSpec(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> pb.GetMetricSpecResponse:
        def body() -> pb.GetMetricSpecResponse:
            self._resolve(request)
            return metric_spec_response()

        return await self._call("GetMetricSpec", context, body)

    async def GetMetrics(
        self, request: pb.GetMetricsRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetMetricsResponse:
        def body() -> pb.GetMetricsResponse:
            namespace, name, settings = self._resolve(_decoded(request).scaledObjectRef)
            metric = request.metricName
            # KEDA strips its s{index}- prefix; accept it unstripped too.
            if metric and metric != METRIC_NAME and _PREFIXED.fullmatch(metric) is None:
                raise _InvalidArgument(
                    f"metricName: unknown metric {metric!r}; this scaler serves {METRIC_NAME!r}"
                )
            return _metrics_response(
                self.state.decision(namespace, name), settings, self._explainer(namespace, name)
            )

        return await self._call("GetMetrics", context, body)

    async def IsActive(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> pb.IsActiveResponse:
        def body() -> pb.IsActiveResponse:
            namespace, name, settings = self._resolve(request)
            _settled(
                self.state.decision(namespace, name), settings, self._explainer(namespace, name)
            )
            return pb.IsActiveResponse(result=bool(self.state.is_active(namespace, name)))

        return await self._call("IsActive", context, body)

    async def StreamIsActive(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.IsActiveResponse]:
        namespace, name = "", ""
        active = False

        def body() -> None:
            nonlocal namespace, name, active
            namespace, name, _ = self._resolve(request)
            active = bool(self.state.is_active(namespace, name))

        await self._call("StreamIsActive", context, body)
        queue = self.state.subscribe_active(namespace, name)
        try:
            if active:
                yield pb.IsActiveResponse(result=True)
            while True:
                value = await queue.get()
                if value:  # KEDA acts only on true; false is noise on the wire
                    yield pb.IsActiveResponse(result=True)
        finally:
            self.state.unsubscribe_active(namespace, name, queue)

    async def StreamMetricSpec(
        self, request: pb.ScaledObjectRef, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.GetMetricSpecResponse]:
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            "StreamMetricSpec is not implemented; the metric spec never changes",
        )
        yield pb.GetMetricSpecResponse()  # pragma: no cover - makes this an async generator


def add_service(service: ExternalScalerService, server: grpc.aio.Server) -> None:
    """Like the generated ``add_ExternalScalerServicer_to_server``, with
    request decoding that cannot fail (see :class:`_Undecodable`)."""
    unary, stream = grpc.unary_unary_rpc_method_handler, grpc.unary_stream_rpc_method_handler
    ref_parser = _safe_parser(pb.ScaledObjectRef)
    rpcs = (
        ("IsActive", unary, ref_parser, pb.IsActiveResponse),
        ("StreamIsActive", stream, ref_parser, pb.IsActiveResponse),
        ("GetMetricSpec", unary, ref_parser, pb.GetMetricSpecResponse),
        ("GetMetrics", unary, _safe_parser(pb.GetMetricsRequest), pb.GetMetricsResponse),
        ("StreamMetricSpec", stream, ref_parser, pb.GetMetricSpecResponse),
    )
    handlers = {
        name: kind(
            getattr(service, name),
            request_deserializer=parser,
            response_serializer=response.SerializeToString,
        )
        for name, kind, parser, response in rpcs
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)
