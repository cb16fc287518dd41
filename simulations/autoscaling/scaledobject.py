"""A KEDA ScaledObject manifest -> the autoscaling policy the simulator runs.

The simulator replays what KEDA and the HPA would do for a user's own
ScaledObject, so the manifest is read with KEDA's defaults and rules
(``scaledobject_types.go``, ``controllers/keda/hpa.go``): one External
metric per trigger (:mod:`simulations.autoscaling.triggers`) or one
composite under ``scalingModifiers`` (:mod:`simulations.autoscaling.formula`).
Cron triggers take t = 0 from the annotation ``simulation.prescaler.io/start``
(else :data:`simulations.autoscaling.cron.DEFAULT_EPOCH`). Anything else is a
``ValueError`` naming what is not supported.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from decision.settings import parse_settings
from engine.validate import int_at_least
from simulations.autoscaling.cron import DEFAULT_EPOCH
from simulations.autoscaling.formula import ScalingModifiers, parse_formula
from simulations.autoscaling.hpa_config import HpaBehavior, HpaConfig, HpaMetric
from simulations.autoscaling.keda import FallbackBehavior, KedaConfig
from simulations.autoscaling.triggers import (
    COUNTER_METRICS,
    GAUGE_METRICS,
    PromQuery,
    TriggerSpec,
    parse_query,
    parse_triggers,
)

__all__ = [
    "COUNTER_METRICS",
    "GAUGE_METRICS",
    "START_ANNOTATION",
    "PromQuery",
    "ScaledObjectSpec",
    "TriggerSpec",
    "load_scaledobject",
    "parse_query",
    "parse_scaledobject",
    "prescaler_scaledobject",
    "seeds_reactive",
]

START_ANNOTATION = "simulation.prescaler.io/start"
"""The wall-clock time of simulated t = 0 (for cron triggers); simulator only."""


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
    extra_triggers: tuple[TriggerSpec, ...] = ()
    """Triggers after the first, in manifest order (:attr:`triggers` lists them all)."""
    modifiers: ScalingModifiers | None = None
    """``advanced.scalingModifiers``: one composite metric instead of one per trigger."""

    @property
    def triggers(self) -> tuple[TriggerSpec, ...]:
        """Every trigger, ``trigger`` first."""
        return (self.trigger, *self.extra_triggers)

    @property
    def prescaler_trigger(self) -> TriggerSpec | None:
        """The prescaler (external) trigger wherever it stands among the
        triggers (at most one is allowed), or None."""
        return next((t for t in self.triggers if t.kind == "prescaler"), None)


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
    if not int_at_least(max_replicas, 1):
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
    triggers, push = parse_triggers(source, spec.get("triggers"), epoch_s=_epoch(source, meta))
    modifiers = _modifiers(source, spec.get("advanced"), triggers)

    metrics = (
        (HpaMetric(modifiers.metric_type, modifiers.target),)
        if modifiers is not None
        else tuple(HpaMetric(t.metric_type, t.target) for t in triggers)
    )
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
        target_type=metrics[0].target_type,
        target=metrics[0].target,
        extra_metrics=metrics[1:],
    )
    return ScaledObjectSpec(
        name, keda, hpa, triggers[0], push, behavior_spec, triggers[1:], modifiers
    )


def _epoch(source: str, meta: Mapping[str, Any]) -> float:
    """Unix time of simulated t = 0: the start annotation, else DEFAULT_EPOCH."""
    annotations = meta.get("annotations") or {}
    raw = annotations.get(START_ANNOTATION) if isinstance(annotations, Mapping) else None
    if raw is None:
        return DEFAULT_EPOCH.timestamp()
    text = str(raw).strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"{source}: annotation {START_ANNOTATION} {text!r} is neither ISO 8601 nor Unix seconds"
        ) from None
    if when.tzinfo is None:
        raise ValueError(f"{source}: annotation {START_ANNOTATION} {text!r} needs a zone (Z)")
    return when.timestamp()


def _modifiers(
    source: str, advanced: Any, triggers: tuple[TriggerSpec, ...]
) -> ScalingModifiers | None:
    raw = advanced.get("scalingModifiers") if isinstance(advanced, Mapping) else None
    if raw is None:
        return None
    where = f"{source}: spec.advanced.scalingModifiers"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a mapping")
    unknown = sorted(set(raw) - {"formula", "target", "activationTarget", "metricType"})
    if unknown:
        raise ValueError(f"{where}.{unknown[0]} is not supported")
    if "formula" not in raw or "target" not in raw:
        raise ValueError(f"{where} needs formula and target")
    names = frozenset(t.name for t in triggers if t.name is not None)
    formula = parse_formula(raw["formula"], names, f"{where}.formula")
    target = _quantity(where, "target", raw["target"], positive=True)
    activation = _quantity(where, "activationTarget", raw.get("activationTarget", "0"))
    metric_type = raw.get("metricType", "AverageValue")
    if metric_type not in ("AverageValue", "Value"):
        raise ValueError(f"{where}.metricType must be AverageValue or Value, got {metric_type!r}")
    return ScalingModifiers(formula, target, activation, metric_type)


def _quantity(where: str, key: str, raw: Any, *, positive: bool = False) -> float:
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise ValueError(f"{where}.{key} is not a number: {raw!r}") from None
    if not math.isfinite(value) or (positive and value <= 0) or value < 0:
        raise ValueError(f"{where}.{key} must be finite and {'> 0' if positive else '>= 0'}")
    return value


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
    if not int_at_least(value, lo):
        raise ValueError(f"{source}: {where}{key} must be an integer >= {lo}, got {value!r}")
    return value


def _seconds(
    source: str, spec: Mapping[str, Any], key: str, default: float, *, positive: bool = False
) -> float:
    value = spec.get(key)
    if value is None:
        return default
    if not int_at_least(value, 1 if positive else 0):
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{source}: spec.{key} must be whole seconds {bound}, got {value!r}")
    return float(value)


def _behavior(source: str, advanced: Any) -> Mapping[str, Any] | None:
    if advanced is None:
        return None
    if not isinstance(advanced, Mapping):
        raise ValueError(f"{source}: spec.advanced must be a mapping")
    unknown = sorted(
        set(advanced)
        - {"horizontalPodAutoscalerConfig", "restoreToOriginalReplicaCount", "scalingModifiers"}
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
