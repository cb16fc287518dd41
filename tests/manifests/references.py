"""Cross-object checks: within one rendered overlay, references resolve and selectors select.

Why: every object can pass its schema while the set is broken: a Service that
selects no pod, a monitor naming a port no container has, a RoleBinding to a
missing Role, a pod whose ServiceAccount nobody created. The API server
accepts each of them; the failure shows only when traffic, scrapes or
permissions are needed. KEDA's objects (:mod:`tests.manifests.keda_checks`)
and accelerator placement (:mod:`tests.manifests.scheduling`) are checked
from here too.
"""

from __future__ import annotations

from collections.abc import Sequence

from tests.manifests.crd_schemas import CrdIndex
from tests.manifests.keda_checks import check_scaled_object
from tests.manifests.problems import Obj, Problem, find_object, namespace_of, ref
from tests.manifests.scheduling import (
    WORKLOADS,
    PodTemplate,
    check_accelerator_pod,
    pod_templates,
    selected_pods,
    selector_matches,
)

__all__ = ["cross_check"]

# API groups of the shipped CRDs: an RBAC rule on them must name a resource
# one of those CRDs serves.
_CRD_GROUPS = ("karpenter.sh", "karpenter.k8s.aws", "keda.sh")


def cross_check(objs: Sequence[Obj], crds: CrdIndex | None = None) -> list[Problem]:
    """References and selectors across the objects of one rendered overlay."""
    out: list[Problem] = []
    pods = pod_templates(objs)
    pools = [o for o in objs if o.get("kind") == "NodePool"]
    for obj in objs:
        out += _check_object(obj, objs, pods, crds)
    for pod in pods:
        out += _check_pod_references(pod, objs)
        out += check_accelerator_pod(pod, pools)
    return out


def _check_object(
    obj: Obj, objs: Sequence[Obj], pods: Sequence[PodTemplate], crds: CrdIndex | None
) -> list[Problem]:
    """The references of one object, by its kind."""
    kind = obj.get("kind")
    if kind in WORKLOADS:
        return _check_workload_selector(obj)
    if kind in ("Service", "PodDisruptionBudget", "NetworkPolicy"):
        return _check_pod_selector(obj, pods)
    if kind == "ServiceMonitor":
        return _check_service_monitor(obj, objs)
    if kind == "PodMonitor":
        return _check_pod_monitor(obj, pods)
    if kind == "NodePool":
        return _check_node_class_ref(obj, objs)
    if kind in ("RoleBinding", "ClusterRoleBinding"):
        return _check_binding(obj, objs)
    if kind in ("Role", "ClusterRole") and crds is not None:
        return _check_crd_resources(obj, crds)
    if kind == "ScaledObject":
        return check_scaled_object(obj, objs, pods)
    return []


def _check_workload_selector(obj: Obj) -> list[Problem]:
    spec = obj.get("spec") or {}
    sel = spec.get("selector")
    if sel is None and obj.get("kind") == "Job" and not spec.get("manualSelector"):
        return []  # the Job controller writes the selector itself
    labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    if sel and selector_matches(sel, labels):
        return []
    return [
        Problem(
            ref(obj),
            "spec.selector",
            "selector",
            "selector does not match the pod template's labels",
        )
    ]


def _check_pod_selector(obj: Obj, pods: Sequence[PodTemplate]) -> list[Problem]:
    """A Service, PodDisruptionBudget or NetworkPolicy selects pods in its namespace
    (and a Service's named target ports exist on them)."""
    kind, who, spec = obj.get("kind"), ref(obj), obj.get("spec") or {}
    sel = spec.get("podSelector") if kind == "NetworkPolicy" else spec.get("selector")
    selected = selected_pods(pods, {namespace_of(obj)}, sel)
    out: list[Problem] = []
    if not selected:
        out.append(
            Problem(who, "spec.selector", "selector", "selects no pod template in its namespace")
        )
    if kind != "Service":
        return out
    for i, port in enumerate(spec.get("ports") or []):
        target = port.get("targetPort")
        if isinstance(target, str) and not any(target in p.container_ports() for p in selected):
            out.append(
                Problem(
                    who,
                    f"spec.ports[{i}].targetPort",
                    "selector",
                    f"no selected pod has a port named {target!r}",
                )
            )
    return out


def _monitored_namespaces(monitor: Obj) -> list[str]:
    """A ServiceMonitor's or PodMonitor's namespaces: its namespaceSelector, else its own."""
    spec = monitor.get("spec") or {}
    names: list[str] = (spec.get("namespaceSelector") or {}).get("matchNames") or [
        namespace_of(monitor)
    ]
    return names


def _check_service_monitor(obj: Obj, objs: Sequence[Obj]) -> list[Problem]:
    who, spec = ref(obj), obj.get("spec") or {}
    names = _monitored_namespaces(obj)
    svcs = [
        o
        for o in objs
        if o.get("kind") == "Service"
        and namespace_of(o) in names
        and selector_matches(spec.get("selector"), (o.get("metadata") or {}).get("labels") or {})
    ]
    out: list[Problem] = []
    if not svcs:
        out.append(Problem(who, "spec.selector", "selector", "selects no Service"))
    for i, ep in enumerate(spec.get("endpoints") or []):
        if svcs and not any(
            ep.get("port") in {p.get("name") for p in (s.get("spec") or {}).get("ports") or []}
            for s in svcs
        ):
            out.append(
                Problem(
                    who,
                    f"spec.endpoints[{i}].port",
                    "selector",
                    f"no selected Service has a port named {ep.get('port')!r}",
                )
            )
    return out


def _check_pod_monitor(obj: Obj, pods: Sequence[PodTemplate]) -> list[Problem]:
    who, spec = ref(obj), obj.get("spec") or {}
    selected = selected_pods(pods, _monitored_namespaces(obj), spec.get("selector"))
    out: list[Problem] = []
    if not selected:
        out.append(Problem(who, "spec.selector", "selector", "selects no pod template"))
    for i, ep in enumerate(spec.get("podMetricsEndpoints") or []):
        missing = [p.name for p in selected if ep.get("port") not in p.container_ports()]
        if missing:
            out.append(
                Problem(
                    who,
                    f"spec.podMetricsEndpoints[{i}].port",
                    "selector",
                    f"{', '.join(missing)} has no container port named {ep.get('port')!r}",
                )
            )
    return out


def _check_node_class_ref(pool: Obj, objs: Sequence[Obj]) -> list[Problem]:
    spec = pool.get("spec") or {}
    class_ref = ((spec.get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
    kind, name = str(class_ref.get("kind", "EC2NodeClass")), str(class_ref.get("name"))
    if find_object(objs, kind, name) is not None:
        return []
    return [
        Problem(
            ref(pool),
            "spec.template.spec.nodeClassRef",
            "reference",
            f"no {class_ref.get('kind')} named {class_ref.get('name')!r}",
        )
    ]


def _check_binding(binding: Obj, objs: Sequence[Obj]) -> list[Problem]:
    """A (Cluster)RoleBinding's role and ServiceAccount subjects exist."""
    who, out = ref(binding), []
    role_ref = binding.get("roleRef") or {}
    role_ns = namespace_of(binding) if role_ref.get("kind") == "Role" else None
    if find_object(objs, role_ref.get("kind", ""), role_ref.get("name", ""), role_ns) is None:
        out.append(
            Problem(
                who, "roleRef", "reference", f"no {role_ref.get('kind')} {role_ref.get('name')!r}"
            )
        )
    for i, s in enumerate(binding.get("subjects") or []):
        if (
            s.get("kind") == "ServiceAccount"
            and find_object(objs, "ServiceAccount", s.get("name", ""), s.get("namespace")) is None
        ):
            out.append(
                Problem(
                    who,
                    f"subjects[{i}]",
                    "reference",
                    f"no ServiceAccount {s.get('namespace')}/{s.get('name')}",
                )
            )
    return out


def _check_crd_resources(role: Obj, crds: CrdIndex) -> list[Problem]:
    """A (Cluster)Role's rules on the CRD groups name resources those CRDs serve."""
    out: list[Problem] = []
    for i, rule in enumerate(role.get("rules") or []):
        for group in rule.get("apiGroups") or []:
            if group not in _CRD_GROUPS:
                continue
            for res in rule.get("resources") or []:
                if (group, res.split("/")[0]) not in crds.plurals:
                    out.append(
                        Problem(
                            ref(role), f"rules[{i}]", "reference", f"no CRD serves {group}/{res}"
                        )
                    )
    return out


def _check_pod_references(pod: PodTemplate, objs: Sequence[Obj]) -> list[Problem]:
    """The ServiceAccount and PriorityClass a pod template names exist."""
    out: list[Problem] = []
    sa = pod.spec.get("serviceAccountName")
    if sa and sa != "default" and find_object(objs, "ServiceAccount", sa, pod.namespace) is None:
        out.append(
            Problem(
                pod.name,
                "spec.template.spec.serviceAccountName",
                "reference",
                f"no ServiceAccount {pod.namespace}/{sa}",
            )
        )
    pc = pod.spec.get("priorityClassName")
    if pc and find_object(objs, "PriorityClass", pc) is None:
        out.append(
            Problem(
                pod.name,
                "spec.template.spec.priorityClassName",
                "reference",
                f"no PriorityClass {pc!r}",
            )
        )
    return out
