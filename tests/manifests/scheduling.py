"""Pod templates and where they may run: selectors, tolerations, NodePools, accelerators.

Why: an accelerator pod that no NodePool can host (its node affinity or
taints rule every pool out), or one that tolerates a GPU pool without
requesting a GPU, is valid YAML and fails only in a cluster: pending forever,
or holding an expensive node it cannot use. These functions answer the
scheduling questions the cross-object checks ask, from the manifests alone.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.manifests.karpenter_rules import WELL_KNOWN_LABELS
from tests.manifests.problems import Obj, Problem, namespace_of, ref

__all__ = [
    "ACCELERATOR_RESOURCES",
    "WORKLOADS",
    "PodTemplate",
    "check_accelerator_pod",
    "pod_templates",
    "pool_can_host",
    "selected_pods",
    "selector_matches",
    "tolerates",
]

ACCELERATOR_RESOURCES = ("nvidia.com/gpu", "aws.amazon.com/neuron", "aws.amazon.com/neuroncore")


@dataclass(frozen=True)
class PodTemplate:
    """The pod template of one workload, with the namespace its pods run in."""

    owner: Obj
    namespace: str
    labels: Mapping[str, str]
    spec: Mapping[str, Any]

    @property
    def name(self) -> str:
        return ref(self.owner)

    def requests(self) -> dict[str, str]:
        """Every resource any container limits or requests (a limit implies a request)."""
        out: dict[str, str] = {}
        for c in self.spec.get("containers") or []:
            res = c.get("resources") or {}
            out.update({k: str(v) for k, v in (res.get("limits") or {}).items()})
            out.update({k: str(v) for k, v in (res.get("requests") or {}).items()})
        return out

    def container_ports(self) -> dict[str, int]:
        """Named container ports: what a Service targetPort or a monitor endpoint names."""
        return {
            p["name"]: int(p["containerPort"])
            for c in self.spec.get("containers") or []
            for p in c.get("ports") or []
            if "name" in p
        }


# The kinds that carry a pod template at spec.template.
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


def pod_templates(objs: Iterable[Obj]) -> list[PodTemplate]:
    """The pod template of every workload among the objects."""
    out = []
    for obj in objs:
        if obj.get("kind") in WORKLOADS:
            tpl = (obj.get("spec") or {}).get("template") or {}
            out.append(
                PodTemplate(
                    owner=obj,
                    namespace=namespace_of(obj),
                    labels=(tpl.get("metadata") or {}).get("labels") or {},
                    spec=tpl.get("spec") or {},
                )
            )
    return out


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A LabelSelector (matchLabels + matchExpressions) or a plain map."""
    if not selector:
        return True
    if "matchLabels" in selector or "matchExpressions" in selector:
        match = selector.get("matchLabels") or {}
        exprs = selector.get("matchExpressions") or []
    else:
        match, exprs = selector, []
    if any(labels.get(k) != v for k, v in match.items()):
        return False
    for e in exprs:
        key, op, vals = e["key"], e["operator"], set(e.get("values") or [])
        if op == "In" and labels.get(key) not in vals:
            return False
        if op == "NotIn" and labels.get(key) in vals:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def selected_pods(
    pods: Iterable[PodTemplate], namespaces: Collection[str], selector: Mapping[str, Any] | None
) -> list[PodTemplate]:
    """The pod templates in those namespaces whose labels the selector matches."""
    return [p for p in pods if p.namespace in namespaces and selector_matches(selector, p.labels)]


def tolerates(tolerations: Sequence[Obj], taint: Obj) -> bool:
    """Whether one of the tolerations tolerates the taint."""
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        op = t.get("operator", "Equal")
        if op == "Exists" and (not t.get("key") or t.get("key") == taint.get("key")):
            return True
        if (
            op == "Equal"
            and t.get("key") == taint.get("key")
            and t.get("value") == taint.get("value")
        ):
            return True
    return False


def _pool_offers(pool: Obj, key: str, values: set[str], op: str) -> bool:
    """Whether a NodePool can produce a node satisfying one pod requirement."""
    tspec = (pool.get("spec") or {}).get("template") or {}
    labels = (tspec.get("metadata") or {}).get("labels") or {}
    reqs = (tspec.get("spec") or {}).get("requirements") or []
    if key in labels:
        has = labels[key] in values
        return has if op == "In" else (not has if op == "NotIn" else op == "Exists")
    for req in reqs:
        if req.get("key") == key and req.get("operator") == "In":
            offered = set(map(str, req.get("values") or []))
            if op == "In":
                return bool(offered & values)
            if op == "NotIn":
                return bool(offered - values)
            return op == "Exists"
    # Unconstrained: a well-known key takes whatever the chosen instance has;
    # a custom key is simply absent from the node.
    domain, _, name = key.rpartition("/")
    well_known = WELL_KNOWN_LABELS.get(name) == domain
    return well_known if op in ("In", "Exists") else True


def pool_can_host(pool: Obj, pod: PodTemplate) -> bool:
    """Scheduling compatibility of a pod's node selection with a NodePool
    (taints aside): nodeSelector and required node affinity."""
    for key, value in (pod.spec.get("nodeSelector") or {}).items():
        if not _pool_offers(pool, key, {str(value)}, "In"):
            return False
    affinity = ((pod.spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not affinity:
        return True
    for term in affinity.get("nodeSelectorTerms") or []:
        if all(
            _pool_offers(pool, e["key"], set(map(str, e.get("values") or [])), e["operator"])
            for e in term.get("matchExpressions") or []
        ):
            return True
    return False


def check_accelerator_pod(pod: PodTemplate, pools: Sequence[Obj]) -> list[Problem]:
    """Every accelerator pod lands on some pool; on each pool it can land on,
    it tolerates the taints and requests the resource the pool limits."""
    out: list[Problem] = []
    wants = {r for r in pod.requests() if r in ACCELERATOR_RESOURCES}
    tolerations = pod.spec.get("tolerations") or []
    hosts = [p for p in pools if pool_can_host(p, pod)]
    if (
        wants
        and pools
        and not any(
            all(
                tolerates(tolerations, t)
                for t in (((p.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
                    "taints"
                )
                or []
            )
            for p in hosts
        )
    ):
        out.append(
            Problem(
                pod.name,
                "spec.template.spec",
                "accelerator-placement",
                f"requests {sorted(wants)} but no NodePool can host it (node affinity and taints)",
            )
        )
    for pool in hosts:
        tspec = ((pool.get("spec") or {}).get("template") or {}).get("spec") or {}
        taints = tspec.get("taints") or []
        accel = [
            r for r in ((pool.get("spec") or {}).get("limits") or {}) if r in ACCELERATOR_RESOURCES
        ]
        if not accel or not all(tolerates(tolerations, t) for t in taints):
            continue  # the pod cannot (or need not) use this pool's accelerator
        if not any(r in wants for r in accel):
            out.append(
                Problem(
                    pod.name,
                    "spec.template.spec",
                    "accelerator-placement",
                    f"tolerates {ref(pool)} but requests none of {accel}",
                )
            )
    if wants:
        for t in tolerations:
            if t.get("operator") == "Exists" and not t.get("key"):
                out.append(
                    Problem(
                        pod.name,
                        "spec.template.spec.tolerations",
                        "accelerator-placement",
                        "a toleration without key tolerates every taint",
                    )
                )
    return out
