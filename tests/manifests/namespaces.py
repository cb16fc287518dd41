"""Which namespaces a rendered overlay creates, and which it relies on.

Why: `kubectl apply -k` fails on an object whose namespace does not exist,
and a NetworkPolicy or a trigger address naming a namespace nobody created
silently matches nothing. Every namespace an overlay uses must therefore be
either created by the overlay (a Namespace object) or listed as a
prerequisite in docs/adopt.md. Pure functions over parsed objects.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CLUSTER_SCOPED_KINDS",
    "NamespaceUse",
    "created_namespaces",
    "namespace_uses",
    "unplaced_objects",
]

Obj = Mapping[str, Any]

# The cluster-scoped kinds these manifests use (or may plausibly grow); every
# other kind is namespaced and must say where it goes.
CLUSTER_SCOPED_KINDS = frozenset(
    {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "PriorityClass",
        "StorageClass",
        "CustomResourceDefinition",
        "NodePool",
        "EC2NodeClass",
        "ClusterTriggerAuthentication",
        "ClusterIssuer",
    }
)

# `<service>.<namespace>.svc` inside an address such as
# dns:///prescaler.prescaler.svc.cluster.local:9090 or
# http://prometheus-k8s.monitoring.svc.cluster.local:9090.
_SERVICE_HOST = re.compile(r"(?:^|/)[a-z0-9]([-a-z0-9]*[a-z0-9])?\.(?P<ns>[a-z0-9-]+)\.svc\b")
_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True, order=True)
class NamespaceUse:
    """One namespace named by one object, and where in it."""

    namespace: str
    obj: str
    path: str


def _ref(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    name = meta.get("name", "?")
    return f"{obj.get('kind')}/{ns}/{name}" if ns else f"{obj.get('kind')}/{name}"


def _peer_namespaces(rules: Iterable[Obj], direction: str) -> Iterator[tuple[str, str]]:
    for i, rule in enumerate(rules):
        for j, peer in enumerate(rule.get(direction) or []):
            labels = (peer.get("namespaceSelector") or {}).get("matchLabels") or {}
            if _NAME_LABEL in labels:
                yield labels[_NAME_LABEL], f"{i}.{direction}[{j}].namespaceSelector"


def _uses_in(obj: Obj) -> Iterator[tuple[str, str]]:
    kind = obj.get("kind")
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    if kind not in CLUSTER_SCOPED_KINDS and meta.get("namespace"):
        yield str(meta["namespace"]), "metadata.namespace"
    if kind == "NetworkPolicy":
        for ns, where in _peer_namespaces(spec.get("ingress") or [], "from"):
            yield ns, f"spec.ingress[{where}"
        for ns, where in _peer_namespaces(spec.get("egress") or [], "to"):
            yield ns, f"spec.egress[{where}"
    elif kind in ("ServiceMonitor", "PodMonitor"):
        for ns in (spec.get("namespaceSelector") or {}).get("matchNames") or []:
            yield str(ns), "spec.namespaceSelector.matchNames"
    elif kind in ("RoleBinding", "ClusterRoleBinding"):
        for i, subject in enumerate(obj.get("subjects") or []):
            if subject.get("namespace"):
                yield str(subject["namespace"]), f"subjects[{i}].namespace"
    elif kind == "ScaledObject":
        for i, trigger in enumerate(spec.get("triggers") or []):
            for key, value in (trigger.get("metadata") or {}).items():
                match = _SERVICE_HOST.search(str(value))
                if match:
                    yield match.group("ns"), f"spec.triggers[{i}].metadata.{key}"


def namespace_uses(objs: Iterable[Obj]) -> list[NamespaceUse]:
    """Every namespace the objects place themselves in, select, bind or address."""
    return sorted(NamespaceUse(ns, _ref(obj), path) for obj in objs for ns, path in _uses_in(obj))


def created_namespaces(objs: Iterable[Obj]) -> set[str]:
    return {
        str((o.get("metadata") or {}).get("name")) for o in objs if o.get("kind") == "Namespace"
    }


def unplaced_objects(objs: Iterable[Obj]) -> list[str]:
    """Namespaced objects without a namespace: they would land wherever kubectl points."""
    return [
        _ref(o)
        for o in objs
        if o.get("kind") not in CLUSTER_SCOPED_KINDS
        and not (o.get("metadata") or {}).get("namespace")
    ]
