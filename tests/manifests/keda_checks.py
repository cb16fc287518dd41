"""KEDA's ScaledObjects checked against the objects they name: target, scaler, TLS, pre-warm.

Why: KEDA resolves a trigger's ``scalerAddress`` and ``authenticationRef``
only at run time, so a wrong Service name, a Service that is not headless
(KEDA's gRPC round-robin then reaches one scaler replica), a missing
certificate parameter or a pre-warm balloon the scaler may not patch shows up
as a ScaledObject that never scales. These checks find each from the
rendered manifests.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from tests.manifests.problems import Obj, Problem, find_object, namespace_of, ref
from tests.manifests.scheduling import PodTemplate, selected_pods

__all__ = ["check_scaled_object"]

# dns:///<service>.<namespace>.svc[.cluster.local]:<port>, the scheme optional
# here so that its absence is reported rather than a parse failure.
_SCALER_ADDRESS = re.compile(
    r"^(?P<scheme>dns:///)?(?P<svc>[a-z0-9-]+)\.(?P<ns>[a-z0-9-]+)\.svc(\.cluster\.local)?"
    r":(?P<port>[0-9]+)$"
)


def _check_scaler_address(
    objs: Sequence[Obj], pods: Sequence[PodTemplate], who: str, path: str, address: str
) -> list[Problem]:
    """The address names a headless Service whose gRPC port reaches a container port."""
    m = _SCALER_ADDRESS.match(address)
    if not m:
        return [
            Problem(
                who,
                path,
                "scaler-address",
                f"{address!r} is not dns:///<service>.<namespace>.svc.cluster.local:<port>",
            )
        ]
    out: list[Problem] = []
    if not m.group("scheme"):
        out.append(
            Problem(
                who,
                path,
                "scaler-address",
                "use a dns:/// address so KEDA's round_robin reaches every replica",
            )
        )
    svc = find_object(objs, "Service", m.group("svc"), m.group("ns"))
    if svc is None:
        missing = f"no Service {m.group('ns')}/{m.group('svc')} in the manifests"
        return [*out, Problem(who, path, "scaler-address", missing)]
    sspec = svc.get("spec") or {}
    if sspec.get("clusterIP") != "None":
        out.append(
            Problem(
                who, path, "scaler-address", f"Service {ref(svc)} is not headless (clusterIP: None)"
            )
        )
    port = int(m.group("port"))
    sport = next((p for p in sspec.get("ports") or [] if int(p.get("port", -1)) == port), None)
    if sport is None:
        return [*out, Problem(who, path, "scaler-address", f"{ref(svc)} has no port {port}")]
    if sport.get("appProtocol") != "grpc" and not str(sport.get("name", "")).startswith("grpc"):
        out.append(
            Problem(
                who,
                path,
                "scaler-address",
                f"port {port} of {ref(svc)} is not a gRPC port (name grpc* or appProtocol: grpc)",
            )
        )
    backends = selected_pods(pods, {m.group("ns")}, sspec.get("selector"))
    if not backends:
        out.append(Problem(who, path, "scaler-address", f"{ref(svc)} selects no pods"))
    target = sport.get("targetPort", port)
    for pod in backends:
        ports = pod.container_ports()
        ok = target in ports if isinstance(target, str) else int(target) in ports.values()
        if not ok:
            out.append(
                Problem(
                    who,
                    path,
                    "scaler-address",
                    f"{pod.name} has no container port {target!r} behind {ref(svc)}",
                )
            )
    return out


def _sa_may(
    objs: Sequence[Obj],
    sa_ns: str,
    sa_name: str,
    ns: str,
    group: str,
    resource: str,
    verb: str,
    name: str,
) -> bool:
    """Whether the ServiceAccount is granted verb on resource/name in ns."""
    for binding in objs:
        kind = binding.get("kind")
        if kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        bmeta = binding.get("metadata") or {}
        if kind == "RoleBinding" and bmeta.get("namespace") != ns:
            continue
        if not any(
            s.get("kind") == "ServiceAccount"
            and s.get("name") == sa_name
            and s.get("namespace") == sa_ns
            for s in binding.get("subjects") or []
        ):
            continue
        role_ref = binding.get("roleRef") or {}
        role = find_object(
            objs,
            role_ref.get("kind", ""),
            role_ref.get("name", ""),
            bmeta.get("namespace") if role_ref.get("kind") == "Role" else None,
        )
        for rule in (role or {}).get("rules") or []:
            if (
                group in rule.get("apiGroups", [])
                and resource in rule.get("resources", [])
                and verb in rule.get("verbs", [])
                and (not rule.get("resourceNames") or name in rule["resourceNames"])
            ):
                return True
    return False


def check_scaled_object(
    obj: Obj, objs: Sequence[Obj], pods: Sequence[PodTemplate]
) -> list[Problem]:
    """A ScaledObject's target, external triggers, TLS, replica bounds and pre-warm set-up."""
    who, spec = ref(obj), obj.get("spec") or {}
    ns = namespace_of(obj)
    out: list[Problem] = []
    target = spec.get("scaleTargetRef") or {}
    kind = target.get("kind", "Deployment")
    if (
        target.get("apiVersion", "apps/v1") != "apps/v1"
        or find_object(objs, kind, target.get("name", ""), ns) is None
    ):
        out.append(
            Problem(
                who,
                "spec.scaleTargetRef",
                "reference",
                f"no {kind} {ns}/{target.get('name')} (apps/v1)",
            )
        )
    for i, trig in enumerate(spec.get("triggers") or []):
        p = f"spec.triggers[{i}]"
        if trig.get("type") not in ("external", "external-push"):
            continue
        meta = trig.get("metadata") or {}
        address = meta.get("scalerAddress")
        if not address:
            out.append(Problem(who, f"{p}.metadata", "scaler-address", "scalerAddress missing"))
        else:
            out += _check_scaler_address(objs, pods, who, f"{p}.metadata.scalerAddress", address)
        auth = trig.get("authenticationRef")
        if auth:
            akind = auth.get("kind", "TriggerAuthentication")
            found = find_object(
                objs, akind, auth.get("name", ""), ns if akind == "TriggerAuthentication" else None
            )
            if found is None:
                out.append(
                    Problem(
                        who,
                        f"{p}.authenticationRef",
                        "reference",
                        f"no {akind} {auth.get('name')!r}",
                    )
                )
            else:
                params = {
                    r.get("parameter")
                    for r in (found.get("spec") or {}).get("secretTargetRef") or []
                }
                bad = sorted(params - {"caCert", "tlsClientCert", "tlsClientKey"})
                if bad:
                    out.append(
                        Problem(
                            ref(found),
                            "spec.secretTargetRef",
                            "keda-tls",
                            f"external scalers read only caCert, tlsClientCert, "
                            f"tlsClientKey; got {bad}",
                        )
                    )
        if meta.get("enableTLS", "false").lower() == "true" and not auth:
            out.append(
                Problem(
                    who,
                    f"{p}.metadata.enableTLS",
                    "keda-tls",
                    "enableTLS without an authenticationRef for the certificates",
                )
            )
        for key, spec_key in (
            ("minReplicas", "minReplicaCount"),
            ("maxReplicas", "maxReplicaCount"),
        ):
            if key in meta and spec_key in spec and int(meta[key]) != int(spec[spec_key]):
                out.append(
                    Problem(
                        who,
                        f"{p}.metadata.{key}",
                        "keda-bounds",
                        f"{key}={meta[key]} differs from spec.{spec_key}={spec[spec_key]}",
                    )
                )
        if meta.get("prewarm", "false").lower() == "true":
            out += _check_prewarm(objs, pods, who, f"{p}.metadata", ns, meta, address or "")
    return out


def _check_prewarm(
    objs: Sequence[Obj],
    pods: Sequence[PodTemplate],
    who: str,
    path: str,
    ns: str,
    meta: Mapping[str, str],
    address: str,
) -> list[Problem]:
    """The balloon Deployment exists, is preemptible, and the scaler may scale it."""
    out: list[Problem] = []
    name = meta.get("prewarmDeployment", "prescaler-balloon")
    balloon = find_object(objs, "Deployment", name, ns)
    if balloon is None:
        return [
            Problem(
                who,
                f"{path}.prewarmDeployment",
                "prewarm",
                f"no Deployment {ns}/{name} to pre-warm with",
            )
        ]
    bpod = next(p for p in pods if p.owner is balloon)
    pc = find_object(objs, "PriorityClass", str(bpod.spec.get("priorityClassName")))
    if pc is None or int(pc.get("value", 0)) >= 0:
        out.append(
            Problem(
                ref(balloon),
                "spec.template.spec.priorityClassName",
                "prewarm",
                "balloon pods need a PriorityClass below 0 so real pods preempt them",
            )
        )
    # The scaler's identity: the ServiceAccount of the pods behind scalerAddress.
    for sp in _scaler_pods(objs, pods, address):
        sa = sp.spec.get("serviceAccountName", "default")
        for verb in ("get", "patch"):
            if not _sa_may(objs, sp.namespace, sa, ns, "apps", "deployments/scale", verb, name):
                out.append(
                    Problem(
                        who,
                        f"{path}.prewarmDeployment",
                        "prewarm",
                        f"ServiceAccount {sp.namespace}/{sa} may not {verb} "
                        f"deployments/scale {ns}/{name}",
                    )
                )
    return out


def _scaler_pods(
    objs: Sequence[Obj], pods: Sequence[PodTemplate], address: str
) -> list[PodTemplate]:
    """The pods behind the Service a ``scalerAddress`` names (none if it names none)."""
    m = _SCALER_ADDRESS.match(address)
    svc = find_object(objs, "Service", m.group("svc"), m.group("ns")) if m else None
    if m is None or svc is None:
        return []
    return selected_pods(pods, {m.group("ns")}, (svc.get("spec") or {}).get("selector"))
