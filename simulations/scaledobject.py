"""A KEDA ScaledObject manifest -> the autoscaling policy the simulator runs.

The simulator replays what KEDA and the HPA would do for a user's own
ScaledObject, so the manifest is read with KEDA's defaults and rules
(keda.sh docs, "ScaledObject specification"; kedacore/keda
``apis/keda/v1alpha1/scaledobject_types.go`` and ``controllers/keda/hpa.go``):
``pollingInterval`` 30 s, ``cooldownPeriod`` 300 s, ``minReplicaCount`` 0,
``maxReplicaCount`` 100; the HPA KEDA creates has ``minReplicas =
minReplicaCount`` if that is > 0, else 1, and copies
``advanced.horizontalPodAutoscalerConfig.behavior`` as given (absent: the
HPA's legacy defaults). A trigger's ``metricType`` defaults to AverageValue.

Exactly one trigger is supported, of one of two kinds:

- ``external`` / ``external-push``: the prescaler itself. Its metadata is
  parsed by :func:`decision.settings.parse_settings`, the function the live
  scaler uses, so bad metadata fails here with the same error. The metric is
  the desired replica count with an AverageValue target of 1.
- ``prometheus`` over a vLLM metric: ``query`` must be ``sum|avg|max(M{...})``
  for a gauge ``M``, or ``sum(rate(M{...}[w]))`` for a counter; the HPA
  target is ``threshold``. Anything richer is refused rather than guessed.

Anything else is a ``ValueError`` naming what is not supported.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from decision.settings import ScalerSettings, parse_settings
from simulations.hpa import HpaBehavior, HpaConfig
from simulations.keda import FallbackBehavior, KedaConfig

__all__ = [
    "COUNTER_METRICS",
    "GAUGE_METRICS",
    "PromQuery",
    "ScaledObjectSpec",
    "TriggerSpec",
    "load_scaledobject",
    "parse_query",
    "parse_scaledobject",
    "prescaler_scaledobject",
    "seeds_reactive",
]

GAUGE_METRICS: frozenset[str] = frozenset(
    {
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:gpu_cache_usage_perc",
        "vllm:kv_cache_usage_perc",
    }
)
"""vLLM gauges a prometheus trigger may aggregate directly (the simulator emulates these)."""

COUNTER_METRICS: frozenset[str] = frozenset(
    {
        "vllm:request_success_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_preemptions_total",
    }
)
"""vLLM counters a prometheus trigger may take ``sum(rate(...))`` of."""

SUPPORTED_TRIGGERS = ("external", "external-push", "prometheus")


@dataclass(frozen=True)
class PromQuery:
    """A supported prometheus trigger query: ``aggregation(metric{labels})`` or
    ``sum(rate(metric{labels}[window]))``. Labels are kept as text: the
    simulator runs one Deployment, so they select nothing."""

    aggregation: Literal["sum", "avg", "max"]
    metric: str
    rate_window_s: float | None = None
    labels: str = ""


@dataclass(frozen=True)
class TriggerSpec:
    """The one trigger of a ScaledObject, parsed."""

    kind: Literal["prescaler", "prometheus"]
    metadata: Mapping[str, str]
    settings: ScalerSettings | None
    query: PromQuery | None
    threshold: float | None
    metric_type: Literal["AverageValue", "Value"] = "AverageValue"
    activation_threshold: float = 0.0
    """prometheus: KEDA calls the trigger active when the value is > this."""


@dataclass(frozen=True)
class ScaledObjectSpec:
    """Everything the simulator needs from one ScaledObject."""

    name: str
    keda: KedaConfig
    hpa: HpaConfig
    trigger: TriggerSpec
    push: bool
    behavior_spec: Mapping[str, Any] | None = field(default=None, compare=False)
    """``advanced.horizontalPodAutoscalerConfig.behavior`` as written (None if absent)."""


# --------------------------------------------------------------------------
# The reactive baseline of the public EKS + vLLM + KEDA + Karpenter write-ups
# --------------------------------------------------------------------------

_REACTIVE_YAML = """\
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: vllm-reactive
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: vllm
  minReplicaCount: 1
  maxReplicaCount: {max_replicas}
  cooldownPeriod: 300
  pollingInterval: 15
  advanced:
    horizontalPodAutoscalerConfig:
      behavior:
        scaleUp:
          stabilizationWindowSeconds: 0
          policies:
            - type: Percent
              value: 100
              periodSeconds: 15
        scaleDown:
          stabilizationWindowSeconds: 300
          policies:
            - type: Percent
              value: 10
              periodSeconds: 60
  triggers:
    - type: prometheus
      metadata:
        serverAddress: http://prometheus:9090
        query: sum(vllm:num_requests_waiting)
        threshold: '3'
"""


def seeds_reactive(*, max_replicas: int = 10) -> ScaledObjectSpec:
    """The queue-length ScaledObject published in public EKS + vLLM + KEDA +
    Karpenter recipes: ``sum(vllm:num_requests_waiting)`` with threshold 3,
    polled every 15 s, scale-up 100 % per 15 s, scale-down 10 % per 60 s after
    a 300 s window, 1 to ``max_replicas`` replicas. Parsed through
    :func:`parse_scaledobject`, like a user's file."""
    if isinstance(max_replicas, bool) or not isinstance(max_replicas, int) or max_replicas < 1:
        raise ValueError(f"max_replicas must be an integer >= 1, got {max_replicas!r}")
    return parse_scaledobject(_REACTIVE_YAML.format(max_replicas=max_replicas), "seeds_reactive")


def prescaler_scaledobject(
    settings_metadata: Mapping[str, str],
    *,
    name: str = "prescaler",
    push: bool = False,
    min_replica_count: int | None = None,
    max_replica_count: int | None = None,
    polling_interval: float = 15,
    cooldown_period: float = 300,
    behavior: Mapping[str, Any] | None = None,
    fallback: Mapping[str, Any] | None = None,
) -> ScaledObjectSpec:
    """A ScaledObject with the prescaler as its one trigger, built from its metadata.

    ``minReplicaCount``/``maxReplicaCount`` default to the metadata's
    ``minReplicas``/``maxReplicas`` (else KEDA's 0 and 100), so the two agree
    as the shipped manifests have them.
    """
    meta = dict(settings_metadata)
    settings = parse_settings(meta)  # fail early, with the live scaler's error
    spec: dict[str, Any] = {
        "scaleTargetRef": {"name": "vllm"},
        "pollingInterval": polling_interval,
        "cooldownPeriod": cooldown_period,
        "minReplicaCount": (
            settings.min_replicas if min_replica_count is None else min_replica_count
        ),
        "maxReplicaCount": (
            settings.max_replicas if max_replica_count is None else max_replica_count
        ),
        "triggers": [
            {
                "type": "external-push" if push else "external",
                "metricType": "AverageValue",
                "metadata": meta,
            }
        ],
    }
    if behavior is not None:
        spec["advanced"] = {"horizontalPodAutoscalerConfig": {"behavior": dict(behavior)}}
    if fallback is not None:
        spec["fallback"] = dict(fallback)
    doc = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name},
        "spec": spec,
    }
    return _from_document(doc, name)


# --------------------------------------------------------------------------
# Parsing
# --------------------------------------------------------------------------


def load_scaledobject(path: str | Path) -> ScaledObjectSpec:
    """The one ScaledObject in a YAML file (other documents, e.g. the
    Deployment, are skipped); a clear ``ValueError`` otherwise."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{p}: cannot read ({exc.strerror})") from exc
    return parse_scaledobject(text, str(p))


def parse_scaledobject(text: str, source: str = "<text>") -> ScaledObjectSpec:
    """Like :func:`load_scaledobject`, from YAML text."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise ValueError(f"{source}: not valid YAML ({exc})") from exc
    found = [d for d in docs if isinstance(d, dict) and d.get("kind") == "ScaledObject"]
    if len(found) != 1:
        raise ValueError(f"{source}: expected exactly one ScaledObject, found {len(found)}")
    return _from_document(found[0], source)


_SPEC_KEYS = frozenset(
    {
        "scaleTargetRef",
        "pollingInterval",
        "cooldownPeriod",
        "initialCooldownPeriod",
        "idleReplicaCount",
        "minReplicaCount",
        "maxReplicaCount",
        "fallback",
        "advanced",
        "triggers",
    }
)
_FALLBACK_BEHAVIORS = (
    "static",
    "currentReplicas",
    "currentReplicasIfHigher",
    "currentReplicasIfLower",
)


def _from_document(doc: Mapping[str, Any], source: str) -> ScaledObjectSpec:
    api = doc.get("apiVersion")
    if not (isinstance(api, str) and api.startswith("keda.sh/")):
        raise ValueError(f"{source}: apiVersion must be keda.sh/v1alpha1, got {api!r}")
    meta = doc.get("metadata") or {}
    name = meta.get("name") if isinstance(meta, Mapping) else None
    if not isinstance(name, str) or not name:
        raise ValueError(f"{source}: metadata.name is required")
    spec = doc.get("spec")
    if not isinstance(spec, Mapping):
        raise ValueError(f"{source}: spec is required")
    unknown = sorted(set(spec) - _SPEC_KEYS)
    if unknown:
        raise ValueError(f"{source}: spec.{unknown[0]} is not supported")

    min_count = _count(source, spec, "minReplicaCount", 0)
    max_count = _count(source, spec, "maxReplicaCount", 100, lo=1)
    if max_count < min_count:
        raise ValueError(f"{source}: maxReplicaCount ({max_count}) < minReplicaCount ({min_count})")
    idle = _count(source, spec, "idleReplicaCount", None)
    if idle is not None and idle >= min_count:
        raise ValueError(
            f"{source}: idleReplicaCount ({idle}) must be < minReplicaCount ({min_count})"
        )
    polling = _seconds(source, spec, "pollingInterval", 30.0, positive=True)
    cooldown = _seconds(source, spec, "cooldownPeriod", 300.0)
    initial = _seconds(source, spec, "initialCooldownPeriod", 0.0)

    fb_threshold: int | None = None
    fb_replicas: int | None = None
    fb_behavior: FallbackBehavior = "static"
    fallback = spec.get("fallback")
    if fallback is not None:
        if not isinstance(fallback, Mapping):
            raise ValueError(f"{source}: spec.fallback must be a mapping")
        for key in ("failureThreshold", "replicas"):
            if key not in fallback:
                raise ValueError(f"{source}: spec.fallback.{key} is required")
        fb_threshold = _count(source, fallback, "failureThreshold", None, where="spec.fallback.")
        fb_replicas = _count(source, fallback, "replicas", None, where="spec.fallback.")
        raw_behavior = fallback.get("behavior", "static")
        if raw_behavior not in _FALLBACK_BEHAVIORS:
            raise ValueError(
                f"{source}: spec.fallback.behavior {raw_behavior!r} is not supported; "
                f"supported: {', '.join(_FALLBACK_BEHAVIORS)}"
            )
        fb_behavior = raw_behavior

    behavior_spec = _behavior(source, spec.get("advanced"))
    trigger, push = _trigger(source, spec.get("triggers"))

    keda = KedaConfig(
        polling_interval_s=polling,
        cooldown_period_s=cooldown,
        initial_cooldown_period_s=initial,
        min_replica_count=min_count,
        max_replica_count=max_count,
        idle_replica_count=idle,
        fallback_failure_threshold=fb_threshold,
        fallback_replicas=fb_replicas,
        fallback_behavior=fb_behavior,
    )
    hpa = HpaConfig(
        min_replicas=min_count if min_count > 0 else 1,
        max_replicas=max_count,
        behavior=None if behavior_spec is None else HpaBehavior.from_spec(behavior_spec),
        target_type=trigger.metric_type,
        target=trigger.threshold if trigger.kind == "prometheus" else 1.0,  # type: ignore[arg-type]
    )
    return ScaledObjectSpec(name, keda, hpa, trigger, push, behavior_spec)


def _count(
    source: str,
    spec: Mapping[str, Any],
    key: str,
    default: int | None,
    *,
    lo: int = 0,
    where: str = "spec.",
) -> Any:
    value = spec.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"{source}: {where}{key} must be an integer >= {lo}, got {value!r}")
    return value


def _seconds(
    source: str, spec: Mapping[str, Any], key: str, default: float, *, positive: bool = False
) -> float:
    value = spec.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < (1 if positive else 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{source}: spec.{key} must be whole seconds {bound}, got {value!r}")
    return float(value)


def _behavior(source: str, advanced: Any) -> Mapping[str, Any] | None:
    if advanced is None:
        return None
    if not isinstance(advanced, Mapping):
        raise ValueError(f"{source}: spec.advanced must be a mapping")
    if "scalingModifiers" in advanced:
        raise ValueError(f"{source}: spec.advanced.scalingModifiers is not supported")
    unknown = sorted(
        set(advanced) - {"horizontalPodAutoscalerConfig", "restoreToOriginalReplicaCount"}
    )
    if unknown:
        raise ValueError(f"{source}: spec.advanced.{unknown[0]} is not supported")
    hpa = advanced.get("horizontalPodAutoscalerConfig")
    if hpa is None:
        return None
    if not isinstance(hpa, Mapping):
        raise ValueError(f"{source}: spec.advanced.horizontalPodAutoscalerConfig must be a mapping")
    behavior = hpa.get("behavior")
    if behavior is None:
        return None
    if not isinstance(behavior, Mapping):
        raise ValueError(f"{source}: horizontalPodAutoscalerConfig.behavior must be a mapping")
    return dict(behavior)


def _trigger(source: str, triggers: Any) -> tuple[TriggerSpec, bool]:
    if not isinstance(triggers, list) or len(triggers) != 1:
        n = len(triggers) if isinstance(triggers, list) else 0
        raise ValueError(f"{source}: exactly one trigger is supported, got {n}")
    trig = triggers[0]
    if not isinstance(trig, Mapping):
        raise ValueError(f"{source}: a trigger must be a mapping")
    kind = trig.get("type")
    if kind not in SUPPORTED_TRIGGERS:
        raise ValueError(
            f"{source}: trigger type {kind!r} is not supported; "
            f"supported: {', '.join(SUPPORTED_TRIGGERS)}"
        )
    metric_type = trig.get("metricType", "AverageValue")
    if metric_type not in ("AverageValue", "Value"):
        raise ValueError(
            f"{source}: metricType {metric_type!r} is not supported; supported: AverageValue, Value"
        )
    metadata = trig.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise ValueError(f"{source}: trigger metadata must be a mapping")
    if kind in ("external", "external-push"):
        if metric_type != "AverageValue":
            raise ValueError(
                f"{source}: the prescaler trigger answers a replica count with target 1; "
                f"metricType must be AverageValue, got {metric_type!r}"
            )
        settings = parse_settings(metadata)  # the live scaler's parser: same errors
        spec = TriggerSpec("prescaler", dict(metadata), settings, None, None, "AverageValue")
        return spec, kind == "external-push"
    return _prometheus(source, metadata, metric_type), False


def _prometheus(source: str, metadata: Mapping[str, Any], metric_type: str) -> TriggerSpec:
    for key, value in metadata.items():
        if not isinstance(value, str):
            raise ValueError(
                f"{source}: trigger metadata {key!r} must be a string (quote it), got {value!r}"
            )
    if "query" not in metadata:
        raise ValueError(f"{source}: the prometheus trigger needs metadata.query")
    if "threshold" not in metadata:
        raise ValueError(f"{source}: the prometheus trigger needs metadata.threshold")
    threshold = _float(source, "threshold", metadata["threshold"], positive=True)
    activation = 0.0
    if "activationThreshold" in metadata:
        activation = _float(source, "activationThreshold", metadata["activationThreshold"])
    query = parse_query(metadata["query"], source)
    return TriggerSpec(
        "prometheus",
        dict(metadata),
        None,
        query,
        threshold,
        "Value" if metric_type == "Value" else "AverageValue",
        activation,
    )


def _float(source: str, key: str, raw: str, *, positive: bool = False) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError(f"{source}: metadata.{key} is not a number: {raw!r}") from None
    if not math.isfinite(value) or (positive and value <= 0):
        bound = "finite and > 0" if positive else "finite"
        raise ValueError(f"{source}: metadata.{key} must be {bound}, got {raw!r}")
    return value


_METRIC = r"(?P<metric>[a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{(?P<labels>[^{}]*)\})?"
_PLAIN = re.compile(rf"^(?P<agg>sum|avg|max)\s*\(\s*{_METRIC}\s*\)$")
_RATE = re.compile(
    rf"^(?P<agg>sum)\s*\(\s*rate\s*\(\s*{_METRIC}\s*\[\s*(?P<window>[0-9a-z]+)\s*\]\s*\)\s*\)$"
)
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_S = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
    "y": 31536000.0,
}


def parse_query(text: str, source: str = "<query>") -> PromQuery:
    """``sum|avg|max(M{...})`` over a vLLM gauge, or ``sum(rate(M{...}[w]))``
    over a vLLM counter; a ``ValueError`` saying what is supported otherwise."""
    q = " ".join(text.split())
    supported = (
        "supported: sum|avg|max(<vLLM gauge>{...}) or sum(rate(<vLLM counter>{...}[window]))"
    )
    m = _PLAIN.match(q)
    if m is not None:
        metric = m.group("metric")
        if metric not in GAUGE_METRICS:
            raise ValueError(
                f"{source}: query {q!r}: metric {metric!r} is not a vLLM gauge the simulator "
                f"emulates ({', '.join(sorted(GAUGE_METRICS))}); {supported}"
            )
        agg: Any = m.group("agg")
        return PromQuery(agg, metric, None, (m.group("labels") or "").strip())
    m = _RATE.match(q)
    if m is not None:
        metric = m.group("metric")
        if metric not in COUNTER_METRICS:
            raise ValueError(
                f"{source}: query {q!r}: metric {metric!r} is not a vLLM counter the simulator "
                f"emulates ({', '.join(sorted(COUNTER_METRICS))}); {supported}"
            )
        window = m.group("window")
        parts = _DURATION.findall(window)
        if not parts or "".join(n + u for n, u in parts) != window:
            raise ValueError(f"{source}: query {q!r}: bad range {window!r}")
        seconds = sum(int(n) * _UNIT_S[u] for n, u in parts)
        if seconds <= 0:
            raise ValueError(f"{source}: query {q!r}: the rate range must be > 0")
        return PromQuery("sum", metric, seconds, (m.group("labels") or "").strip())
    raise ValueError(f"{source}: query {q!r} is not supported; {supported}")
