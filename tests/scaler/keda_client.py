"""A KEDA-faithful external-scaler client, plus the HPA arithmetic, for tests.

Follows KEDA's external scaler and the HPA's rules (docs/control-plane.md;
KEDA v2.20 ``pkg/scalers/external_scaler.go`` and the HPA controller's
``replica_calculator.go`` / ``horizontal.go``):

* one long-lived channel to a ``dns:///host:port`` target with round_robin
  load balancing, plaintext h2c or TLS (``caCert``, ``tlsClientCert``,
  ``tlsClientKey``);
* each poll calls GetMetricSpec, GetMetrics (metric name with KEDA's
  ``s{index}-`` prefix stripped), then IsActive;
* KEDA's value rules: target = ``targetSizeFloat`` if > 0 else
  ``targetSize``; value = ``metricValueFloat`` if > 0 else ``metricValue``;
  NaN, Inf and negatives become 0; every quantity is truncated to milli
  precision (``resource.NewMilliQuantity(int64(v*1000))``);
* :class:`HpaModel` -- the HPA's sync: AverageValue / Value arithmetic,
  tolerance 0.1, stabilization windows and behavior policies;
* :class:`KedaActivation` -- KEDA's own 0 <-> 1 (IsActive, cooldownPeriod).

scaler-data's end-to-end tests use this module too: keep it dependency-free
beyond grpc and the generated protos.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field

import grpc

from protos import externalscaler_pb2 as pb
from protos import externalscaler_pb2_grpc as pb_grpc

__all__ = [
    "DEFAULT_BEHAVIOR",
    "SEED_BEHAVIOR",
    "HpaBehavior",
    "HpaModel",
    "KedaActivation",
    "KedaClient",
    "MetricTarget",
    "PollResult",
    "ScaledObjectLoop",
    "ScalingPolicy",
    "ScalingRules",
    "TlsConfig",
    "keda_value",
    "milli",
    "ref",
]


def milli(value: float) -> int:
    """A float as KEDA's milli-quantity: NaN/Inf/negative -> 0, truncated."""
    if not math.isfinite(value) or value < 0:
        return 0
    return int(value * 1000)


def keda_value(metric_value_float: float, metric_value: int) -> float:
    """KEDA's choice between the float and the (deprecated) int field."""
    value = metric_value_float if metric_value_float > 0 else float(metric_value)
    if not math.isfinite(value) or value < 0:
        return 0.0
    return value


def ref(name: str, namespace: str, metadata: Mapping[str, str]) -> pb.ScaledObjectRef:
    """A ScaledObjectRef as KEDA builds it (metadata includes scalerAddress)."""
    return pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=dict(metadata))


@dataclass(frozen=True)
class TlsConfig:
    """KEDA's TriggerAuthentication TLS material (PEM bytes)."""

    ca_cert: bytes | None = None
    client_cert: bytes | None = None
    client_key: bytes | None = None
    server_name_override: str | None = None


@dataclass(frozen=True)
class MetricTarget:
    hpa_metric_name: str  # as the HPA sees it: s{index}-{name}
    metric_name: str  # as the scaler named it
    target_milli: int

    @property
    def target(self) -> float:
        return self.target_milli / 1000


@dataclass(frozen=True)
class PollResult:
    """One KEDA poll: the spec, the summed metric value, IsActive."""

    targets: tuple[MetricTarget, ...]
    value_milli: int  # sum over returned values, each at milli precision
    active: bool
    latency_s: Mapping[str, float] = field(default_factory=dict)

    @property
    def value(self) -> float:
        return self.value_milli / 1000

    @property
    def target_milli(self) -> int:
        return self.targets[0].target_milli


class KedaClient:
    """gRPC client that calls the scaler exactly as KEDA does."""

    def __init__(
        self, address: str, *, tls: TlsConfig | None = None, trigger_index: int = 0
    ) -> None:
        target = address if "://" in address or address.startswith("dns:") else f"dns:///{address}"
        options: list[tuple[str, object]] = [
            ("grpc.service_config", json.dumps({"loadBalancingConfig": [{"round_robin": {}}]})),
        ]
        if tls is None:
            self.channel = grpc.aio.insecure_channel(target, options=options)
        else:
            if tls.server_name_override:
                options.append(("grpc.ssl_target_name_override", tls.server_name_override))
            creds = grpc.ssl_channel_credentials(
                root_certificates=tls.ca_cert,
                private_key=tls.client_key,
                certificate_chain=tls.client_cert,
            )
            self.channel = grpc.aio.secure_channel(target, creds, options=options)
        self.stub = pb_grpc.ExternalScalerStub(self.channel)
        self.trigger_index = trigger_index

    async def close(self) -> None:
        await self.channel.close()

    async def __aenter__(self) -> KedaClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def get_metric_spec(
        self, so: pb.ScaledObjectRef, timeout: float | None = None
    ) -> tuple[MetricTarget, ...]:
        response = await self.stub.GetMetricSpec(so, timeout=timeout)
        targets = []
        for spec in response.metricSpecs:
            target = (
                milli(spec.targetSizeFloat) if spec.targetSizeFloat > 0 else spec.targetSize * 1000
            )
            targets.append(
                MetricTarget(f"s{self.trigger_index}-{spec.metricName}", spec.metricName, target)
            )
        return tuple(targets)

    async def get_metrics(
        self, so: pb.ScaledObjectRef, hpa_metric_name: str, timeout: float | None = None
    ) -> list[int]:
        prefix = f"s{self.trigger_index}-"
        name = (
            hpa_metric_name[len(prefix) :]
            if hpa_metric_name.startswith(prefix)
            else hpa_metric_name
        )
        response = await self.stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=so, metricName=name), timeout=timeout
        )
        return [milli(keda_value(v.metricValueFloat, v.metricValue)) for v in response.metricValues]

    async def is_active(self, so: pb.ScaledObjectRef, timeout: float | None = None) -> bool:
        response = await self.stub.IsActive(so, timeout=timeout)
        return bool(response.result)

    async def stream_is_active(self, so: pb.ScaledObjectRef) -> AsyncIterator[bool]:
        call = self.stub.StreamIsActive(so)
        try:
            async for message in call:
                yield bool(message.result)
        finally:
            call.cancel()

    async def poll(self, so: pb.ScaledObjectRef, timeout: float | None = None) -> PollResult:
        """GetMetricSpec, GetMetrics for each spec, then IsActive (KEDA's order)."""
        latency: dict[str, float] = {}
        t0 = time.perf_counter()
        targets = await self.get_metric_spec(so, timeout)
        t1 = time.perf_counter()
        latency["GetMetricSpec"] = t1 - t0
        total = 0
        for target in targets:
            total += sum(await self.get_metrics(so, target.hpa_metric_name, timeout))
        t2 = time.perf_counter()
        latency["GetMetrics"] = t2 - t1
        active = await self.is_active(so, timeout)
        latency["IsActive"] = time.perf_counter() - t2
        return PollResult(targets, total, active, latency)


# --------------------------------------------------------------------------
# HPA arithmetic (docs/control-plane.md, section 1)
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ScalingPolicy:
    type: str  # "Pods" or "Percent"
    value: int
    period_s: float

    def __post_init__(self) -> None:
        if self.type not in ("Pods", "Percent") or self.value <= 0 or self.period_s <= 0:
            raise ValueError(f"invalid scaling policy {self}")


@dataclass(frozen=True)
class ScalingRules:
    stabilization_window_s: float
    policies: tuple[ScalingPolicy, ...]
    select_policy: str = "Max"  # "Max", "Min" or "Disabled"


@dataclass(frozen=True)
class HpaBehavior:
    scale_up: ScalingRules
    scale_down: ScalingRules


DEFAULT_BEHAVIOR = HpaBehavior(
    scale_up=ScalingRules(0, (ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15))),
    scale_down=ScalingRules(300, (ScalingPolicy("Percent", 100, 15),)),
)
# The seeds' ScaledObjects: scaleUp 100 %/15 s; scaleDown window 300 s, 10 %/60 s.
SEED_BEHAVIOR = HpaBehavior(
    scale_up=ScalingRules(0, (ScalingPolicy("Percent", 100, 15),)),
    scale_down=ScalingRules(300, (ScalingPolicy("Percent", 10, 60),)),
)


class HpaModel:
    """One HPA's sync loop for a single external metric.

    ``sync(now, current_replicas, value_milli, target_milli)`` returns the
    new scale (== current when nothing changes) and records events exactly
    as the controller does (``stabilizeRecommendationWithBehaviors`` then
    ``convertDesiredReplicasWithBehaviorRate``).
    """

    def __init__(
        self,
        *,
        min_replicas: int = 1,
        max_replicas: int = 100,
        behavior: HpaBehavior = DEFAULT_BEHAVIOR,
        tolerance: float = 0.1,
        metric_type: str = "AverageValue",
    ) -> None:
        if metric_type not in ("AverageValue", "Value"):
            raise ValueError(f"metric_type must be AverageValue or Value, got {metric_type!r}")
        if min_replicas < 1 or max_replicas < min_replicas:
            raise ValueError("need 1 <= min_replicas <= max_replicas (0 <-> 1 is KEDA's)")
        self.min_replicas = min_replicas
        self.max_replicas = max_replicas
        self.behavior = behavior
        self.tolerance = tolerance
        self.metric_type = metric_type
        self._recommendations: list[tuple[float, int]] = []
        self._up_events: list[tuple[float, int]] = []
        self._down_events: list[tuple[float, int]] = []

    def proposal(
        self,
        current_replicas: int,
        value_milli: int,
        target_milli: int,
        ready_pods: int | None = None,
    ) -> int:
        """The metric's replica proposal before behaviors (replica_calculator.go)."""
        if target_milli <= 0:
            raise ValueError("the HPA rejects a target of 0")
        if self.metric_type == "AverageValue":
            ratio = value_milli / (target_milli * current_replicas)
            if abs(1.0 - ratio) <= self.tolerance:
                return current_replicas
            return math.ceil(value_milli / target_milli)
        ratio = value_milli / target_milli
        if abs(1.0 - ratio) <= self.tolerance:
            return current_replicas
        ready = current_replicas if ready_pods is None else ready_pods
        return math.ceil(ratio * ready)

    def sync(
        self,
        now: float,
        current_replicas: int,
        value_milli: int,
        target_milli: int,
        ready_pods: int | None = None,
    ) -> int:
        if current_replicas == 0:
            return 0  # scaling disabled at zero: KEDA owns 0 <-> 1
        if current_replicas > self.max_replicas:
            desired = self.max_replicas
        elif current_replicas < self.min_replicas:
            desired = self.min_replicas
        else:
            proposal = self.proposal(current_replicas, value_milli, target_milli, ready_pods)
            desired = self._normalize(now, current_replicas, proposal)
        if desired != current_replicas:
            events = self._up_events if desired > current_replicas else self._down_events
            events.append((now, abs(desired - current_replicas)))
        return desired

    def _normalize(self, now: float, current: int, proposal: int) -> int:
        up, down = self.behavior.scale_up, self.behavior.scale_down
        if not self._recommendations and down.stabilization_window_s > 0:
            self._recommendations.append((now, current))  # maybeInitScaleDownStabilizationWindow
        up_cutoff = now - up.stabilization_window_s
        down_cutoff = now - down.stabilization_window_s
        up_rec = down_rec = proposal
        old_index = -1
        for i, (ts, rec) in enumerate(self._recommendations):
            if ts > up_cutoff:
                up_rec = min(up_rec, rec)
            if ts > down_cutoff:
                down_rec = max(down_rec, rec)
            if ts < up_cutoff and ts < down_cutoff:
                old_index = i
        stabilized = current
        stabilized = max(stabilized, up_rec)
        stabilized = min(stabilized, down_rec)
        if old_index >= 0:
            self._recommendations[old_index] = (now, proposal)
        else:
            self._recommendations.append((now, proposal))
        return self._rate_limit(now, current, stabilized)

    def _change(self, events: Sequence[tuple[float, int]], now: float, period: float) -> int:
        return sum(change for ts, change in events if ts > now - period)

    def _rate_limit(self, now: float, current: int, desired: int) -> int:
        if desired > current:
            limit = self._limit(now, current, self.behavior.scale_up, up=True)
            limit = max(limit, current)
            return min(desired, min(self.max_replicas, limit))
        if desired < current:
            limit = self._limit(now, current, self.behavior.scale_down, up=False)
            limit = min(limit, current)
            return max(desired, max(self.min_replicas, limit))
        return desired

    def _limit(self, now: float, current: int, rules: ScalingRules, *, up: bool) -> int:
        if rules.select_policy == "Disabled":
            return current
        pick_max = (rules.select_policy == "Max") == up
        result: int | None = None
        for policy in rules.policies:
            added = self._change(self._up_events, now, policy.period_s)
            deleted = self._change(self._down_events, now, policy.period_s)
            start = current - added + deleted
            if up:
                proposed = (
                    start + policy.value
                    if policy.type == "Pods"
                    else math.ceil(start * (1 + policy.value / 100))
                )
            else:
                proposed = (
                    start - policy.value
                    if policy.type == "Pods"
                    else int(start * (1 - policy.value / 100))
                )
            if result is None:
                result = proposed
            else:
                result = max(result, proposed) if pick_max else min(result, proposed)
        return current if result is None else result


class KedaActivation:
    """KEDA's 0 <-> 1: active -> at least max(minReplicaCount, 1); inactive
    for ``cooldown_s`` -> 0 (only when minReplicaCount is 0)."""

    def __init__(self, *, min_replica_count: int = 0, cooldown_s: float = 300.0) -> None:
        self.min_replica_count = min_replica_count
        self.cooldown_s = cooldown_s
        self.last_active_s: float | None = None

    def step(self, now: float, active: bool, current_replicas: int) -> int:
        """The scale KEDA sets after a poll (``current_replicas`` if none)."""
        if active:
            self.last_active_s = now
            if current_replicas == 0:
                return max(self.min_replica_count, 1)
            return current_replicas
        if (
            current_replicas > 0
            and self.min_replica_count == 0
            and (self.last_active_s is None or now - self.last_active_s >= self.cooldown_s)
        ):
            return 0
        return current_replicas


class ScaledObjectLoop:
    """KEDA + HPA for one ScaledObject, driven on the caller's clock.

    ``await step(now)`` does one KEDA poll through ``client`` (GetMetricSpec,
    GetMetrics, IsActive), applies KEDA's 0 <-> 1 activation, then (when
    ``now`` is at least ``hpa_sync_s`` after the last sync and the target is
    not at zero) one HPA sync on the polled value; it returns the new replica
    count, which the caller's "cluster" then runs. ``history`` keeps
    ``(now, value, active, replicas)`` for assertions. A poll that fails
    (the scaler answers UNAVAILABLE before its first data) changes nothing,
    as in KEDA: the replica count is kept, and ``errors`` counts it.
    """

    def __init__(
        self,
        client: KedaClient,
        so: pb.ScaledObjectRef,
        *,
        hpa: HpaModel | None = None,
        keda: KedaActivation | None = None,
        replicas: int = 0,
        hpa_sync_s: float = 15.0,
    ) -> None:
        self.client = client
        self.so = so
        self.hpa = hpa or HpaModel()
        self.keda = keda or KedaActivation()
        self.replicas = replicas
        self.hpa_sync_s = hpa_sync_s
        self._last_sync: float | None = None
        self.history: list[tuple[float, float, bool, int]] = []
        self.errors: list[tuple[float, grpc.StatusCode]] = []

    async def step(self, now: float, timeout: float | None = 10.0) -> int:
        try:
            result = await self.client.poll(self.so, timeout)
        except grpc.aio.AioRpcError as exc:
            self.errors.append((now, exc.code()))
            return self.replicas
        replicas = self.keda.step(now, result.active, self.replicas)
        due = self._last_sync is None or now - self._last_sync >= self.hpa_sync_s
        if replicas > 0 and replicas == self.replicas and due:
            replicas = self.hpa.sync(now, replicas, result.value_milli, result.target_milli)
            self._last_sync = now
        self.replicas = replicas
        self.history.append((now, result.value, result.active, replicas))
        return replicas
