"""What ``prescaler doctor`` is given, read into plain data: the ScaledObject
and, optionally, the HPA's status as ``kubectl get hpa -o json`` prints it.

Pure (text in, data out): the checks (``prescaler.doctor.checks``) and the
fetching (``prescaler.doctor.fetch``) both work on these shapes, and a file
that is not what it should be fails here with one line naming what is wrong.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from engine.validate import int_at_least

__all__ = [
    "KEDA_DEFAULT_MAX",
    "KEDA_DEFAULT_MIN",
    "PRESCALER_TYPES",
    "HpaMetric",
    "HpaView",
    "InputError",
    "ObjectView",
    "TriggerView",
    "parse_hpa",
    "parse_quantity",
    "parse_scaledobject",
]

KEDA_DEFAULT_MIN = 0
KEDA_DEFAULT_MAX = 100
"""KEDA's ``minReplicaCount`` and ``maxReplicaCount`` when a ScaledObject omits them."""
PRESCALER_TYPES = ("external", "external-push")


class InputError(ValueError):
    """A doctor input that is not what it should be; the message names the file and why."""


@dataclass(frozen=True)
class TriggerView:
    """One trigger of the ScaledObject, as KEDA indexes it (``s{index}-`` metric names)."""

    index: int
    type: str
    name: str
    metadata: Mapping[str, str]
    metric_type: str = "AverageValue"

    @property
    def label(self) -> str:
        """How a finding names the trigger: its name, else its type and index."""
        return self.name or f"{self.type}#{self.index}"

    @property
    def is_prescaler(self) -> bool:
        """An external trigger that points at prescaler (its address or its name says so,
        or it names one of prescaler's data sources)."""
        if self.type not in PRESCALER_TYPES:
            return False
        address = self.metadata.get("scalerAddress", "")
        sources = ("prometheusAddress", "metricsUrls", "podSelector")
        return (
            "prescaler" in address
            or self.name == "prescaler"
            or any(k in self.metadata for k in sources)
        )


@dataclass(frozen=True)
class ObjectView:
    """The parts of a ScaledObject the doctor reads."""

    name: str
    namespace: str
    min_replicas: int
    max_replicas: int
    triggers: tuple[TriggerView, ...]
    hpa_name: str
    min_given: bool = True
    max_given: bool = True


@dataclass(frozen=True)
class HpaMetric:
    """One external metric as the HPA's status reports it (``currentMetrics``)."""

    name: str
    value: float | None = None
    average_value: float | None = None


@dataclass(frozen=True)
class HpaView:
    """The HPA's status: replicas, bounds, the metrics it read, its conditions."""

    name: str
    current_replicas: int
    desired_replicas: int
    min_replicas: int | None
    max_replicas: int
    metrics: tuple[HpaMetric, ...] = ()
    conditions: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)
    """Condition type -> (status, reason, message)."""

    def metric(self, name: str) -> HpaMetric | None:
        return next((m for m in self.metrics if m.name == name), None)


_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)([a-zA-Z]*)\Z")
_SUFFIX = {
    "": 1.0,
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


def parse_quantity(text: str | int | float) -> float:
    """A Kubernetes quantity (``2500m``, ``3``, ``1.5k``) as a float."""
    if isinstance(text, bool):
        raise ValueError(f"not a quantity: {text!r}")
    if isinstance(text, int | float):
        return float(text)
    found = _QUANTITY.match(text.strip())
    if found is None or found.group(2) not in _SUFFIX:
        raise ValueError(f"not a quantity: {text!r}")
    value = float(found.group(1)) * _SUFFIX[found.group(2)]
    if not math.isfinite(value):
        raise ValueError(f"not a quantity: {text!r}")
    return value


def _count(spec: Mapping[str, Any], key: str, default: int, where: str) -> tuple[int, bool]:
    raw = spec.get(key)
    if raw is None:
        return default, False
    if not int_at_least(raw, 0):
        raise InputError(f"{where}: spec.{key} must be a non-negative integer, got {raw!r}")
    return raw, True


def parse_scaledobject(text: str, where: str, name: str | None = None) -> ObjectView:
    """The ScaledObject in ``text`` (YAML or JSON; a multi-document file or a
    ``kind: List`` holds several: ``name`` picks one)."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise InputError(f"{where}: not YAML: {exc}") from exc
    items: list[Any] = []
    for doc in docs:
        if isinstance(doc, Mapping) and doc.get("kind") == "List":
            items.extend(doc.get("items") or [])
        else:
            items.append(doc)
    found = [
        d
        for d in items
        if isinstance(d, Mapping)
        and d.get("kind") == "ScaledObject"
        and (name is None or (d.get("metadata") or {}).get("name") == name)
    ]
    if not found:
        what = f"ScaledObject {name!r}" if name else "ScaledObject"
        raise InputError(f"{where}: no {what} in the file")
    if len(found) > 1:
        names = ", ".join(str((d.get("metadata") or {}).get("name")) for d in found)
        raise InputError(f"{where}: several ScaledObjects ({names}): pick one with --name")
    (doc,) = found
    meta = doc.get("metadata") or {}
    spec = doc.get("spec") or {}
    so_name = meta.get("name")
    if not isinstance(so_name, str) or not so_name:
        raise InputError(f"{where}: the ScaledObject has no metadata.name")
    namespace = meta.get("namespace") or "default"
    min_count, min_given = _count(spec, "minReplicaCount", KEDA_DEFAULT_MIN, where)
    max_count, max_given = _count(spec, "maxReplicaCount", KEDA_DEFAULT_MAX, where)
    raw_triggers = spec.get("triggers")
    if not isinstance(raw_triggers, list) or not raw_triggers:
        raise InputError(f"{where}: spec.triggers is missing or empty")
    triggers = []
    for i, raw in enumerate(raw_triggers):
        if not isinstance(raw, Mapping) or not isinstance(raw.get("type"), str):
            raise InputError(f"{where}: spec.triggers[{i}] has no type")
        metadata = raw.get("metadata") or {}
        if not isinstance(metadata, Mapping):
            raise InputError(f"{where}: spec.triggers[{i}].metadata is not a map")
        triggers.append(
            TriggerView(
                index=i,
                type=raw["type"],
                name=str(raw.get("name") or ""),
                metadata={str(k): str(v) for k, v in metadata.items()},
                metric_type=str(raw.get("metricType") or "AverageValue"),
            )
        )
    hpa_config = ((spec.get("advanced") or {}).get("horizontalPodAutoscalerConfig")) or {}
    hpa_name = hpa_config.get("name") or f"keda-hpa-{so_name}"
    return ObjectView(
        name=so_name,
        namespace=str(namespace),
        min_replicas=min_count,
        max_replicas=max_count,
        triggers=tuple(triggers),
        hpa_name=str(hpa_name),
        min_given=min_given,
        max_given=max_given,
    )


def parse_hpa(text: str, where: str, name: str) -> HpaView:
    """The HPA ``name`` from ``kubectl get hpa -o json`` (one object or a List)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not JSON (kubectl get hpa -o json): {exc}") from exc
    if not isinstance(doc, Mapping):
        raise InputError(f"{where}: not a Kubernetes object")
    items = doc.get("items") if doc.get("kind") == "List" else [doc]
    hpas = [
        d
        for d in items or []
        if isinstance(d, Mapping) and d.get("kind") == "HorizontalPodAutoscaler"
    ]
    chosen = [d for d in hpas if (d.get("metadata") or {}).get("name") == name]
    if not chosen:
        seen = ", ".join(str((d.get("metadata") or {}).get("name")) for d in hpas) or "none"
        raise InputError(f"{where}: no HorizontalPodAutoscaler {name!r} (found: {seen})")
    hpa = chosen[0]
    spec = hpa.get("spec") or {}
    status = hpa.get("status") or {}
    metrics = []
    for raw in status.get("currentMetrics") or []:
        if not isinstance(raw, Mapping) or raw.get("type") != "External":
            continue
        external = raw.get("external") or {}
        metric_name = (external.get("metric") or {}).get("name")
        current = external.get("current") or {}
        try:
            value = parse_quantity(current["value"]) if "value" in current else None
            average = parse_quantity(current["averageValue"]) if "averageValue" in current else None
        except ValueError as exc:
            raise InputError(f"{where}: metric {metric_name!r}: {exc}") from exc
        if isinstance(metric_name, str):
            metrics.append(HpaMetric(metric_name, value, average))
    conditions = {
        str(c.get("type")): (
            str(c.get("status", "")),
            str(c.get("reason", "")),
            str(c.get("message", "")),
        )
        for c in status.get("conditions") or []
        if isinstance(c, Mapping)
    }
    max_replicas = spec.get("maxReplicas")
    if not isinstance(max_replicas, int):
        raise InputError(f"{where}: the HPA has no spec.maxReplicas")
    return HpaView(
        name=name,
        current_replicas=int(status.get("currentReplicas") or 0),
        desired_replicas=int(status.get("desiredReplicas") or 0),
        min_replicas=spec.get("minReplicas"),
        max_replicas=max_replicas,
        metrics=tuple(metrics),
        conditions=conditions,
    )
