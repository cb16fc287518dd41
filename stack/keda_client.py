"""The scaler's gRPC client as KEDA runs it (kedacore/keda ``pkg/scalers/external_scaler.go``).

One long-lived channel with ``round_robin`` load balancing over every scaler
address given (KEDA dials ``scalerAddress`` the same way, so several scaler
replicas behind one DNS name are spread across). A poll is GetMetricSpec,
GetMetrics (the spec's metric name) then IsActive; a metric value is
``metricValueFloat`` if > 0 else ``metricValue``, NaN, Inf and negatives read
as 0, truncated to milli-units like ``resource.NewMilliQuantity``.

One deviation, deliberate: a call that fails with UNAVAILABLE (the replica
it went to just died) is retried once at once, so a dead replica costs one
retry, never a failed poll; ``retries`` counts them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from protos import externalscaler_pb2 as pb
from protos import externalscaler_pb2_grpc as pb_grpc

__all__ = ["KedaPoll", "KedaScalerClient", "milli_value"]


def milli_value(value_float: float, value_int: int) -> float:
    """KEDA's reading of one MetricValue, at milli precision."""
    value = value_float if value_float > 0 else float(value_int)
    if not math.isfinite(value) or value < 0:
        return 0.0
    return int(value * 1000) / 1000.0


@dataclass(frozen=True)
class KedaPoll:
    """One successful poll."""

    value: float
    target: float
    active: bool


class KedaScalerClient:
    """KEDA's calls to one ScaledObject's external scaler."""

    def __init__(
        self,
        addresses: Sequence[str],
        *,
        name: str,
        namespace: str,
        metadata: Mapping[str, str],
        timeout_s: float = 5.0,
    ) -> None:
        if not addresses:
            raise ValueError("at least one scaler address is needed")
        target = "ipv4:" + ",".join(addresses)
        options: list[tuple[str, Any]] = [
            ("grpc.service_config", json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})),
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
        ]
        self.channel = grpc.aio.insecure_channel(target, options=options)
        self.stub = pb_grpc.ExternalScalerStub(self.channel)
        self.ref = pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=dict(metadata))
        self.timeout_s = timeout_s
        self.calls = 0
        self.retries = 0
        self._metric_name: str | None = None

    async def close(self) -> None:
        await self.channel.close()

    async def _call(self, method: Any, request: Any) -> Any:
        self.calls += 1
        try:
            return await method(request, timeout=self.timeout_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                raise
            self.retries += 1
            return await method(request, timeout=self.timeout_s)

    async def metric_spec(self) -> tuple[str, float]:
        response = await self._call(self.stub.GetMetricSpec, self.ref)
        spec = response.metricSpecs[0]
        target = spec.targetSizeFloat if spec.targetSizeFloat > 0 else float(spec.targetSize)
        self._metric_name = spec.metricName
        return spec.metricName, int(target * 1000) / 1000.0

    async def metrics(self) -> float:
        """GetMetrics (the HPA's read through KEDA's metrics server); raises on failure."""
        if self._metric_name is None:
            await self.metric_spec()
        assert self._metric_name is not None
        request = pb.GetMetricsRequest(scaledObjectRef=self.ref, metricName=self._metric_name)
        response = await self._call(self.stub.GetMetrics, request)
        return sum(milli_value(v.metricValueFloat, v.metricValue) for v in response.metricValues)

    async def poll(self) -> KedaPoll:
        """GetMetricSpec, GetMetrics, IsActive (KEDA's polling loop); raises on failure."""
        _, target = await self.metric_spec()
        value = await self.metrics()
        active = await self._call(self.stub.IsActive, self.ref)
        return KedaPoll(value, target, bool(active.result))
