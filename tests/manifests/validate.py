"""Offline validation of Kubernetes manifests: schemas, CEL rules, cross-object checks.

Why this exists: no API server runs where the tests run, yet a manifest that
kubectl would reject (or, worse, accept and silently misapply, like a
Karpenter requirement on a made-up label key) must fail CI. So every rendered
object goes through:

1. its schema with unknown fields rejected: core kinds with
   ``kubernetes-validate --strict`` (bundled OpenAPI schemas), CRD kinds
   with the CRD's ``openAPIV3Schema`` translated to JSON Schema
   (``additionalProperties: false`` wherever ``properties`` are listed and
   unknown fields are not preserved), after applying schema defaults the way
   the API server does;
2. the CEL rules of the Karpenter CRDs that JSON Schema cannot express, in
   Python (role XOR instanceProfile, alias vs amiFamily, restricted label
   domains, requirement operators), plus lint for label keys that look like
   Karpenter's but are not (``instance.k8s.aws/...``, bare ``instance-family``);
3. cross-object checks (:func:`cross_check`): references resolve, selectors
   select, accelerator pods tolerate and request what their pool offers, the
   KEDA trigger reaches the scaler's headless Service.

Everything here is pure: functions take parsed objects and return
:class:`Problem` lists. Only :func:`load_yaml_documents` and
:func:`load_crds` read files.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from tests.manifests.hand_schemas import HAND_SCHEMAS

__all__ = [
    "DEFAULT_K8S_VERSION",
    "CrdIndex",
    "Problem",
    "check_device_plugin_config",
    "check_ec2nodeclass",
    "check_nodepool",
    "check_requirements",
    "cross_check",
    "load_crds",
    "load_yaml_documents",
    "to_jsonschema",
    "validate_object",
    "validate_objects",
]

# The newest minor kubernetes-validate ships strict schemas for that EKS
# also runs; the manifests use nothing newer than 1.27 (gRPC probes GA).
DEFAULT_K8S_VERSION = "1.33"

Obj = Mapping[str, Any]


@dataclass(frozen=True, order=True)
class Problem:
    """One finding: which object, where in it, which rule, what is wrong."""

    obj: str
    path: str
    rule: str
    message: str

    def __str__(self) -> str:
        where = f"{self.obj} {self.path}".strip()
        return f"{where}: [{self.rule}] {self.message}"


def ref(obj: Obj) -> str:
    """``Kind/namespace/name`` (``Kind/name`` when cluster-scoped)."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    name = meta.get("name", "?")
    return f"{obj.get('kind', '?')}/{ns}/{name}" if ns else f"{obj.get('kind', '?')}/{name}"


def _path(parts: Iterable[Any]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------


def load_yaml_documents(text: str) -> list[Any]:
    """All non-empty YAML documents of a stream."""
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


# --------------------------------------------------------------------------
# CRD schemas
# --------------------------------------------------------------------------


def to_jsonschema(node: Any) -> Any:
    """Translate a structural OpenAPI v3 schema into a strict JSON Schema.

    Unknown fields are pruned by the API server unless the schema says
    ``x-kubernetes-preserve-unknown-fields``; a manifest that relies on
    pruning has a typo in it, so here they are rejected instead.
    """
    if isinstance(node, list):
        return [to_jsonschema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("properties", "patternProperties"):
            out[key] = {k: to_jsonschema(v) for k, v in value.items()}
        elif key == "default" or key == "enum" or key == "example":
            out[key] = value
        elif key.startswith("x-kubernetes-") or key in ("description", "format"):
            continue
        else:
            out[key] = to_jsonschema(value)
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    out.pop("nullable", None)
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def apply_defaults(value: Any, schema: Mapping[str, Any]) -> Any:
    """Fill in schema defaults as the API server does before validating.

    A property with a ``default`` is set when its parent object exists and
    the property is absent (structural defaulting); applied recursively.
    """
    if isinstance(value, dict):
        out = dict(value)
        props = schema.get("properties") or {}
        for name, sub in props.items():
            if name not in out and isinstance(sub, Mapping) and "default" in sub:
                out[name] = copy.deepcopy(sub["default"])
        for name, sub in props.items():
            if name in out and isinstance(sub, Mapping):
                out[name] = apply_defaults(out[name], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping):
            for name in out:
                if name not in props:
                    out[name] = apply_defaults(out[name], extra)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [apply_defaults(v, schema["items"]) for v in value]
    return value


@dataclass(frozen=True)
class CrdVersion:
    group: str
    kind: str
    plural: str
    scope: str
    version: str
    served: bool
    storage: bool
    openapi: Mapping[str, Any]
    """The CRD's own openAPIV3Schema (defaults, CEL rules)."""
    schema: Mapping[str, Any]
    """The strict JSON Schema translation."""


class CrdIndex:
    """The CRDs the validator knows, by (group, kind) and version."""

    def __init__(self, crds: Iterable[Obj]) -> None:
        self._versions: dict[tuple[str, str], dict[str, CrdVersion]] = {}
        self.plurals: set[tuple[str, str]] = set()
        for crd in crds:
            if crd.get("kind") != "CustomResourceDefinition":
                raise ValueError(f"not a CustomResourceDefinition: {ref(crd)}")
            spec = crd["spec"]
            group, kind, plural = spec["group"], spec["names"]["kind"], spec["names"]["plural"]
            self.plurals.add((group, plural))
            for ver in spec["versions"]:
                openapi = ver["schema"]["openAPIV3Schema"]
                self._versions.setdefault((group, kind), {})[ver["name"]] = CrdVersion(
                    group=group,
                    kind=kind,
                    plural=plural,
                    scope=spec.get("scope", "Namespaced"),
                    version=ver["name"],
                    served=bool(ver.get("served")),
                    storage=bool(ver.get("storage")),
                    openapi=openapi,
                    schema=to_jsonschema(openapi),
                )

    def knows(self, group: str, kind: str) -> bool:
        return (group, kind) in self._versions

    def version(self, group: str, kind: str, version: str) -> CrdVersion | None:
        return self._versions.get((group, kind), {}).get(version)

    def served(self, group: str, kind: str) -> list[CrdVersion]:
        return [v for v in self._versions.get((group, kind), {}).values() if v.served]

    def storage(self, group: str, kind: str) -> CrdVersion | None:
        return next((v for v in self._versions.get((group, kind), {}).values() if v.storage), None)

    def cel_rules(self, group: str, kind: str) -> list[tuple[str, str]]:
        """Every (message, rule) pair of the storage version's schema."""
        ver = self.storage(group, kind)
        found: list[tuple[str, str]] = []

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                for item in node.get("x-kubernetes-validations") or []:
                    found.append((item.get("message", ""), item["rule"]))
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)

        if ver is not None:
            walk(ver.openapi)
        return found


def load_crds(paths: Iterable[Path]) -> CrdIndex:
    docs: list[Obj] = []
    for path in paths:
        docs.extend(load_yaml_documents(path.read_text(encoding="utf-8")))
    return CrdIndex(docs)


def _schema_problems(obj: Obj, schema: Mapping[str, Any], rule: str) -> list[Problem]:
    validator = jsonschema.Draft202012Validator(schema)
    return [
        Problem(ref(obj), _path(err.absolute_path), rule, err.message)
        for err in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.path)))
    ]


def _split_api_version(api_version: str) -> tuple[str, str]:
    if "/" in api_version:
        group, version = api_version.split("/", 1)
        return group, version
    return "", api_version


def validate_object(
    obj: Obj, crds: CrdIndex, k8s_version: str = DEFAULT_K8S_VERSION
) -> list[Problem]:
    """Schema plus semantic (CEL-equivalent) checks for one object."""
    if not isinstance(obj, Mapping) or "apiVersion" not in obj or "kind" not in obj:
        return [Problem("?", "", "schema", "not a Kubernetes object (apiVersion/kind missing)")]
    api_version, kind = str(obj["apiVersion"]), str(obj["kind"])
    group, version = _split_api_version(api_version)
    problems: list[Problem] = []
    if (api_version, kind) in HAND_SCHEMAS:
        problems += _schema_problems(obj, HAND_SCHEMAS[(api_version, kind)], "schema")
    elif crds.knows(group, kind):
        crd = crds.version(group, kind, version)
        if crd is None or not crd.served:
            served = ", ".join(f"{group}/{v.version}" for v in crds.served(group, kind))
            problems.append(
                Problem(
                    ref(obj),
                    "apiVersion",
                    "api-version",
                    f"{api_version} {kind} is not served by the CRD (served: {served})",
                )
            )
            # Keep going against the served schema: the remaining findings are
            # exactly what a migration to the served version must fix.
            crd = crds.storage(group, kind)
        if crd is not None:
            as_served = dict(obj, apiVersion=f"{group}/{crd.version}")
            defaulted = apply_defaults(as_served, crd.openapi)
            problems += _schema_problems(defaulted, crd.schema, "schema")
    else:
        try:
            kubernetes_validate.validate(dict(obj), k8s_version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(Problem(ref(obj), _path(exc.path), "schema", exc.message))
        except kubernetes_validate.SchemaNotFoundError as exc:
            problems.append(Problem(ref(obj), "", "no-schema", exc.message))
    if group == "karpenter.k8s.aws" and kind == "EC2NodeClass":
        problems += check_ec2nodeclass(obj)
    elif group == "karpenter.sh" and kind == "NodePool":
        problems += check_nodepool(obj, crds)
    elif kind == "ConfigMap" and api_version == "v1":
        problems += check_device_plugin_config(obj)
    return problems


def validate_objects(
    objs: Sequence[Obj], crds: CrdIndex, k8s_version: str = DEFAULT_K8S_VERSION
) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[tuple[str, str, str | None, str]] = set()
    for obj in objs:
        problems += validate_object(obj, crds, k8s_version)
        meta = obj.get("metadata") or {}
        key = (
            str(obj.get("apiVersion")),
            str(obj.get("kind")),
            meta.get("namespace"),
            str(meta.get("name")),
        )
        if key in seen:
            problems.append(Problem(ref(obj), "metadata.name", "duplicate", "defined twice"))
        seen.add(key)
    return problems


# --------------------------------------------------------------------------
# Karpenter: CEL rules and label-key lint
# --------------------------------------------------------------------------

_ALIAS_FAMILIES = {
    "al2": "AL2",
    "al2023": "AL2023",
    "bottlerocket": "Bottlerocket",
    "windows2019": "Windows2019",
    "windows2022": "Windows2022",
    "windows2025": "Windows2025",
}


def check_ec2nodeclass(obj: Obj) -> list[Problem]:
    """The EC2NodeClass CEL rules (Karpenter v1.14) that JSON Schema cannot say."""
    out: list[Problem] = []
    who = ref(obj)
    spec = obj.get("spec") or {}
    if ("role" in spec) == ("instanceProfile" in spec):
        out.append(
            Problem(
                who,
                "spec",
                "cel:role-xor-instance-profile",
                "must specify exactly one of ['role', 'instanceProfile']",
            )
        )
    terms = spec.get("amiSelectorTerms") or []
    aliases = [t["alias"] for t in terms if isinstance(t, Mapping) and "alias" in t]
    family = spec.get("amiFamily")
    for i, term in enumerate(terms):
        if isinstance(term, Mapping) and "alias" in term and (len(term) > 1 or len(terms) > 1):
            out.append(
                Problem(
                    who,
                    f"spec.amiSelectorTerms[{i}]",
                    "cel:alias-exclusive",
                    "'alias' is mutually exclusive with other amiSelectorTerms",
                )
            )
    for alias in aliases:
        alias_family = str(alias).split("@", 1)[0]
        if "@" not in str(alias):
            out.append(
                Problem(
                    who,
                    "spec.amiSelectorTerms",
                    "cel:alias-format",
                    f"alias {alias!r} must match 'family@version'",
                )
            )
        if alias_family not in _ALIAS_FAMILIES:
            out.append(
                Problem(
                    who,
                    "spec.amiSelectorTerms",
                    "cel:alias-family",
                    f"alias family {alias_family!r} is not supported",
                )
            )
        elif family is not None and family not in ("Custom", _ALIAS_FAMILIES[alias_family]):
            out.append(
                Problem(
                    who,
                    "spec.amiFamily",
                    "cel:alias-ami-family",
                    f"amiFamily {family!r} conflicts with alias {alias!r}: "
                    f"must be {_ALIAS_FAMILIES[alias_family]!r} or 'Custom' (or unset)",
                )
            )
    if terms and not aliases and family is None:
        out.append(
            Problem(
                who,
                "spec",
                "cel:ami-family-required",
                "must specify amiFamily if amiSelectorTerms does not contain an alias",
            )
        )
    roots = 0
    for i, bdm in enumerate(spec.get("blockDeviceMappings") or []):
        ebs = bdm.get("ebs") or {}
        if ebs and "snapshotID" not in ebs and "volumeSize" not in ebs:
            out.append(
                Problem(
                    who,
                    f"spec.blockDeviceMappings[{i}].ebs",
                    "cel:ebs-size",
                    "snapshotID or volumeSize must be defined",
                )
            )
        roots += bool(bdm.get("rootVolume"))
    if roots > 1:
        out.append(
            Problem(
                who,
                "spec.blockDeviceMappings",
                "cel:one-root-volume",
                "must have only one blockDeviceMappings with rootVolume",
            )
        )
    return out


# Label names Karpenter and Kubernetes define, by their one correct domain.
# A requirement on the bare name or on another domain is a custom label: it
# constrains nothing about the instance and is merely stamped on the node.
WELL_KNOWN_LABELS: dict[str, str] = {
    "capacity-type": "karpenter.sh",
    "nodepool": "karpenter.sh",
    "instance-type": "node.kubernetes.io",
    "arch": "kubernetes.io",
    "os": "kubernetes.io",
    "zone": "topology.kubernetes.io",
    "region": "topology.kubernetes.io",
    "instance-tenancy": "karpenter.k8s.aws",
    "instance-category": "karpenter.k8s.aws",
    "instance-hypervisor": "karpenter.k8s.aws",
    "instance-family": "karpenter.k8s.aws",
    "instance-generation": "karpenter.k8s.aws",
    "instance-local-nvme": "karpenter.k8s.aws",
    "instance-size": "karpenter.k8s.aws",
    "instance-cpu": "karpenter.k8s.aws",
    "instance-cpu-manufacturer": "karpenter.k8s.aws",
    "instance-memory": "karpenter.k8s.aws",
    "instance-ebs-bandwidth": "karpenter.k8s.aws",
    "instance-network-bandwidth": "karpenter.k8s.aws",
    "instance-gpu-name": "karpenter.k8s.aws",
    "instance-gpu-manufacturer": "karpenter.k8s.aws",
    "instance-gpu-count": "karpenter.k8s.aws",
    "instance-gpu-memory": "karpenter.k8s.aws",
    "instance-accelerator-name": "karpenter.k8s.aws",
    "instance-accelerator-manufacturer": "karpenter.k8s.aws",
    "instance-accelerator-count": "karpenter.k8s.aws",
}
_KNOWN_VALUES: dict[str, frozenset[str]] = {
    "karpenter.sh/capacity-type": frozenset({"on-demand", "spot", "reserved"}),
    "kubernetes.io/arch": frozenset({"amd64", "arm64"}),
    "kubernetes.io/os": frozenset({"linux", "windows"}),
}
_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def _restricted_allow_list(crds: CrdIndex | None, domain: str) -> frozenset[str] | None:
    """The allowed keys of a restricted domain, read from the NodePool CRD's
    CEL rule (so the list follows the shipped CRD, not a copy of it)."""
    if crds is None:
        return None
    for message, rule in crds.cel_rules("karpenter.sh", "NodePool"):
        if message == f'label domain "{domain}" is restricted':
            match = re.search(r"in (\[[^\]]*\])", rule)
            if match:
                return frozenset(json.loads(match.group(1)))
    return None


def _check_label_key(
    key: str, where: str, path: str, crds: CrdIndex | None, *, in_labels: bool
) -> list[Problem]:
    out: list[Problem] = []
    if not _LABEL_KEY.match(key) or len(key) > 316:
        return [Problem(where, path, "label-key", f"{key!r} is not a valid label key")]
    domain, _, name = key.rpartition("/")
    # CEL: restricted domains.
    if domain.endswith("karpenter.sh") and key not in (
        "karpenter.sh/capacity-type",
        "karpenter.sh/nodepool",
    ):
        out.append(
            Problem(
                where,
                path,
                "cel:restricted-label-domain",
                f'label domain "karpenter.sh" is restricted ({key!r})',
            )
        )
    if key == "karpenter.sh/nodepool":
        out.append(
            Problem(
                where, path, "cel:restricted-label", 'label "karpenter.sh/nodepool" is restricted'
            )
        )
    if key == "kubernetes.io/hostname":
        out.append(
            Problem(
                where, path, "cel:restricted-label", 'label "kubernetes.io/hostname" is restricted'
            )
        )
    if domain.endswith("karpenter.k8s.aws"):
        allowed = _restricted_allow_list(crds, "karpenter.k8s.aws")
        if allowed is None:
            allowed = frozenset(
                f"karpenter.k8s.aws/{n}"
                for n, d in WELL_KNOWN_LABELS.items()
                if d == "karpenter.k8s.aws"
            )
        if key not in allowed:
            out.append(
                Problem(
                    where,
                    path,
                    "cel:restricted-label-domain",
                    f'label domain "karpenter.k8s.aws" is restricted ({key!r})',
                )
            )
    if in_labels:
        return out
    # Lint: keys that look like well-known labels but are not.
    right = WELL_KNOWN_LABELS.get(name)
    if domain and domain.endswith("k8s.aws") and domain != "karpenter.k8s.aws":
        out.append(
            Problem(
                where,
                path,
                "label-key",
                f"unknown label domain {domain!r} in {key!r}: Karpenter's AWS labels are "
                f"'karpenter.k8s.aws/<name>'" + (f"; use '{right}/{name}'" if right else ""),
            )
        )
    elif right is not None and domain != right:
        what = "a bare key" if not domain else f"domain {domain!r}"
        out.append(
            Problem(
                where,
                path,
                "label-key",
                f"{key!r} uses {what}: it is a custom label that constrains nothing (Karpenter "
                f"just stamps it on the node); the well-known key is '{right}/{name}'",
            )
        )
    return out


def check_requirements(
    reqs: Sequence[Obj], where: str, path: str, crds: CrdIndex | None = None
) -> list[Problem]:
    """NodePool ``requirements``: label keys, operators, values (CEL + lint)."""
    out: list[Problem] = []
    for i, req in enumerate(reqs):
        p = f"{path}[{i}]"
        key = str(req.get("key", ""))
        op = req.get("operator")
        values = [str(v) for v in req.get("values") or []]
        out += _check_label_key(key, where, f"{p}.key", crds, in_labels=False)
        if op == "In" and not values:
            out.append(
                Problem(
                    where,
                    p,
                    "cel:requirement-in-values",
                    "requirements with operator 'In' must have a value defined",
                )
            )
        if op in ("Gt", "Lt", "Gte", "Lte") and not (len(values) == 1 and values[0].isdigit()):
            out.append(
                Problem(
                    where,
                    p,
                    "cel:requirement-numeric",
                    f"operator {op!r} needs a single non-negative integer value",
                )
            )
        if op == "In" and "minValues" in req and len(values) < int(req["minValues"]):
            out.append(
                Problem(
                    where,
                    p,
                    "cel:requirement-min-values",
                    "requirements with 'minValues' need at least that many values",
                )
            )
        known = _KNOWN_VALUES.get(key)
        if known is not None and op in ("In", "NotIn"):
            unknown = sorted(set(values) - known)
            if unknown:
                out.append(
                    Problem(
                        where,
                        f"{p}.values",
                        "label-value",
                        f"{key} has no value(s) {unknown}; known: {sorted(known)}",
                    )
                )
    return out


_GPU_FAMILY = re.compile(r"^(g[0-9]|p[0-9])")
_NEURON_FAMILY = re.compile(r"^(inf|trn)[0-9]")


def _families(reqs: Sequence[Obj]) -> set[str]:
    fams: set[str] = set()
    for req in reqs:
        if str(req.get("key", "")).endswith("instance-family") and req.get("operator") == "In":
            fams.update(str(v) for v in req.get("values") or [])
    return fams


def _has_taint(taints: Sequence[Obj], key: str) -> bool:
    return any(t.get("key") == key and t.get("effect") == "NoSchedule" for t in taints)


def check_nodepool(obj: Obj, crds: CrdIndex | None = None) -> list[Problem]:
    """NodePool CEL rules on labels/requirements, plus accelerator-taint lint."""
    who = ref(obj)
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    tspec = template.get("spec") or {}
    out: list[Problem] = []
    for key in (template.get("metadata") or {}).get("labels") or {}:
        out += _check_label_key(
            str(key), who, f"spec.template.metadata.labels[{key}]", crds, in_labels=True
        )
    reqs = tspec.get("requirements") or []
    out += check_requirements(reqs, who, "spec.template.spec.requirements", crds)
    taints = tspec.get("taints") or []
    fams = _families(reqs)
    if any(_GPU_FAMILY.match(f) for f in fams) and not _has_taint(taints, "nvidia.com/gpu"):
        out.append(
            Problem(
                who,
                "spec.template.spec.taints",
                "accelerator-taint",
                "GPU pool without a nvidia.com/gpu:NoSchedule taint: any pod may "
                "land on (and hold) an expensive GPU node",
            )
        )
    if any(_NEURON_FAMILY.match(f) for f in fams) and not _has_taint(
        taints, "aws.amazon.com/neuron"
    ):
        out.append(
            Problem(
                who,
                "spec.template.spec.taints",
                "accelerator-taint",
                "Neuron pool without an aws.amazon.com/neuron:NoSchedule taint",
            )
        )
    return out


# --------------------------------------------------------------------------
# NVIDIA device-plugin config (time-slicing)
# --------------------------------------------------------------------------

_DP_TOP_KEYS = frozenset({"version", "flags", "resources", "sharing", "imex"})


def check_device_plugin_config(obj: Obj) -> list[Problem]:
    """A ConfigMap whose entries are NVIDIA device-plugin configs: check the
    current format (``version: v1``, ``sharing.timeSlicing.resources``).

    ConfigMaps that do not look like device-plugin configs are ignored.
    """
    out: list[Problem] = []
    who = ref(obj)
    for name, text in (obj.get("data") or {}).items():
        if not isinstance(text, str) or "version:" not in text:
            continue
        try:
            cfg = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            out.append(Problem(who, f"data.{name}", "device-plugin", f"not YAML: {exc}"))
            continue
        if not isinstance(cfg, dict) or "version" not in cfg or not set(cfg) <= _DP_TOP_KEYS:
            continue
        p = f"data.{name}"
        if cfg.get("version") != "v1":
            out.append(Problem(who, f"{p}.version", "device-plugin", "version must be 'v1'"))
        sharing = cfg.get("sharing")
        if sharing is None:
            continue
        if not isinstance(sharing, dict) or not set(sharing) <= {"timeSlicing", "mps"}:
            out.append(
                Problem(
                    who, f"{p}.sharing", "device-plugin", "sharing takes 'timeSlicing' (or 'mps')"
                )
            )
            continue
        ts = sharing.get("timeSlicing") or {}
        allowed = {"renameByDefault", "failRequestsGreaterThanOne", "resources"}
        for extra in sorted(set(ts) - allowed):
            out.append(
                Problem(who, f"{p}.sharing.timeSlicing.{extra}", "device-plugin", "unknown field")
            )
        resources = ts.get("resources")
        if not isinstance(resources, list) or not resources:
            out.append(
                Problem(
                    who,
                    f"{p}.sharing.timeSlicing.resources",
                    "device-plugin",
                    "needs a non-empty list of {name, replicas}",
                )
            )
            continue
        for i, res in enumerate(resources):
            rp = f"{p}.sharing.timeSlicing.resources[{i}]"
            if not isinstance(res, dict) or not set(res) <= {
                "name",
                "replicas",
                "rename",
                "devices",
            }:
                out.append(Problem(who, rp, "device-plugin", "unknown fields"))
                continue
            if not str(res.get("name", "")).startswith("nvidia.com/"):
                out.append(
                    Problem(
                        who,
                        f"{rp}.name",
                        "device-plugin",
                        "resource must be nvidia.com/gpu (or nvidia.com/mig-*)",
                    )
                )
            reps = res.get("replicas")
            if not isinstance(reps, int) or isinstance(reps, bool) or reps < 2:
                out.append(
                    Problem(
                        who, f"{rp}.replicas", "device-plugin", "replicas must be an integer >= 2"
                    )
                )
    return out


# --------------------------------------------------------------------------
# Cross-object checks
# --------------------------------------------------------------------------

ACCELERATOR_RESOURCES = ("nvidia.com/gpu", "aws.amazon.com/neuron", "aws.amazon.com/neuroncore")


@dataclass(frozen=True)
class PodTemplate:
    owner: Obj
    namespace: str
    labels: Mapping[str, str]
    spec: Mapping[str, Any]

    @property
    def name(self) -> str:
        return ref(self.owner)

    def requests(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for c in self.spec.get("containers") or []:
            res = c.get("resources") or {}
            out.update({k: str(v) for k, v in (res.get("limits") or {}).items()})
            out.update({k: str(v) for k, v in (res.get("requests") or {}).items()})
        return out

    def container_ports(self) -> dict[str, int]:
        return {
            p["name"]: int(p["containerPort"])
            for c in self.spec.get("containers") or []
            for p in c.get("ports") or []
            if "name" in p
        }


_WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


def pod_templates(objs: Iterable[Obj]) -> list[PodTemplate]:
    out = []
    for obj in objs:
        if obj.get("kind") in _WORKLOADS:
            tpl = (obj.get("spec") or {}).get("template") or {}
            out.append(
                PodTemplate(
                    owner=obj,
                    namespace=(obj.get("metadata") or {}).get("namespace", "default"),
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


def tolerates(tolerations: Sequence[Obj], taint: Obj) -> bool:
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


def _find(objs: Iterable[Obj], kind: str, name: str, namespace: str | None = None) -> Obj | None:
    for obj in objs:
        meta = obj.get("metadata") or {}
        if (
            obj.get("kind") == kind
            and meta.get("name") == name
            and (namespace is None or meta.get("namespace") == namespace)
        ):
            return obj
    return None


_SCALER_ADDRESS = re.compile(
    r"^(?P<scheme>dns:///)?(?P<svc>[a-z0-9-]+)\.(?P<ns>[a-z0-9-]+)\.svc(\.cluster\.local)?"
    r":(?P<port>[0-9]+)$"
)


def _check_scaler_address(
    objs: Sequence[Obj], pods: Sequence[PodTemplate], who: str, path: str, address: str
) -> list[Problem]:
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
    svc = _find(objs, "Service", m.group("svc"), m.group("ns"))
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
    backends = [
        p
        for p in pods
        if p.namespace == m.group("ns") and selector_matches(sspec.get("selector"), p.labels)
    ]
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
        role = _find(
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


def cross_check(objs: Sequence[Obj], crds: CrdIndex | None = None) -> list[Problem]:
    """References and selectors across the objects of one rendered overlay."""
    out: list[Problem] = []
    pods = pod_templates(objs)
    pools = [o for o in objs if o.get("kind") == "NodePool"]

    def ns_of(obj: Obj) -> str:
        return (obj.get("metadata") or {}).get("namespace", "default")

    for obj in objs:
        kind, who, ns = obj.get("kind"), ref(obj), ns_of(obj)
        spec = obj.get("spec") or {}
        if kind in _WORKLOADS:
            sel = spec.get("selector")
            labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
            if not selector_matches(sel, labels) or not sel:
                out.append(
                    Problem(
                        who,
                        "spec.selector",
                        "selector",
                        "selector does not match the pod template's labels",
                    )
                )
        elif kind in ("Service", "PodDisruptionBudget", "NetworkPolicy"):
            sel = spec.get("podSelector") if kind == "NetworkPolicy" else spec.get("selector")
            if not any(p.namespace == ns and selector_matches(sel, p.labels) for p in pods):
                out.append(
                    Problem(
                        who, "spec.selector", "selector", "selects no pod template in its namespace"
                    )
                )
            if kind == "Service":
                for i, port in enumerate(spec.get("ports") or []):
                    target = port.get("targetPort")
                    if isinstance(target, str) and not any(
                        p.namespace == ns
                        and selector_matches(sel, p.labels)
                        and target in p.container_ports()
                        for p in pods
                    ):
                        out.append(
                            Problem(
                                who,
                                f"spec.ports[{i}].targetPort",
                                "selector",
                                f"no selected pod has a port named {target!r}",
                            )
                        )
        elif kind == "ServiceMonitor":
            names = (spec.get("namespaceSelector") or {}).get("matchNames") or [ns]
            svcs = [
                o
                for o in objs
                if o.get("kind") == "Service"
                and ns_of(o) in names
                and selector_matches(
                    spec.get("selector"), (o.get("metadata") or {}).get("labels") or {}
                )
            ]
            if not svcs:
                out.append(Problem(who, "spec.selector", "selector", "selects no Service"))
            for i, ep in enumerate(spec.get("endpoints") or []):
                if svcs and not any(
                    ep.get("port")
                    in {p.get("name") for p in (s.get("spec") or {}).get("ports") or []}
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
        elif kind == "PodMonitor":
            names = (spec.get("namespaceSelector") or {}).get("matchNames") or [ns]
            selected = [
                p
                for p in pods
                if p.namespace in names and selector_matches(spec.get("selector"), p.labels)
            ]
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
        elif kind == "NodePool":
            ref_ = ((spec.get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
            if _find(objs, str(ref_.get("kind", "EC2NodeClass")), str(ref_.get("name"))) is None:
                out.append(
                    Problem(
                        who,
                        "spec.template.spec.nodeClassRef",
                        "reference",
                        f"no {ref_.get('kind')} named {ref_.get('name')!r}",
                    )
                )
        elif kind in ("RoleBinding", "ClusterRoleBinding"):
            role_ref = obj.get("roleRef") or {}
            role_ns = ns if role_ref.get("kind") == "Role" else None
            if _find(objs, role_ref.get("kind", ""), role_ref.get("name", ""), role_ns) is None:
                out.append(
                    Problem(
                        who,
                        "roleRef",
                        "reference",
                        f"no {role_ref.get('kind')} {role_ref.get('name')!r}",
                    )
                )
            for i, s in enumerate(obj.get("subjects") or []):
                if (
                    s.get("kind") == "ServiceAccount"
                    and _find(objs, "ServiceAccount", s.get("name", ""), s.get("namespace")) is None
                ):
                    out.append(
                        Problem(
                            who,
                            f"subjects[{i}]",
                            "reference",
                            f"no ServiceAccount {s.get('namespace')}/{s.get('name')}",
                        )
                    )
        elif kind in ("Role", "ClusterRole") and crds is not None:
            for i, rule in enumerate(obj.get("rules") or []):
                for group in rule.get("apiGroups") or []:
                    if group in ("karpenter.sh", "karpenter.k8s.aws", "keda.sh"):
                        for res in rule.get("resources") or []:
                            if (group, res.split("/")[0]) not in crds.plurals:
                                out.append(
                                    Problem(
                                        who,
                                        f"rules[{i}]",
                                        "reference",
                                        f"no CRD serves {group}/{res}",
                                    )
                                )
        elif kind == "ScaledObject":
            out += _check_scaled_object(obj, objs, pods)

    for pod in pods:
        who = pod.name
        sa = pod.spec.get("serviceAccountName")
        if sa and sa != "default" and _find(objs, "ServiceAccount", sa, pod.namespace) is None:
            out.append(
                Problem(
                    who,
                    "spec.template.spec.serviceAccountName",
                    "reference",
                    f"no ServiceAccount {pod.namespace}/{sa}",
                )
            )
        pc = pod.spec.get("priorityClassName")
        if pc and _find(objs, "PriorityClass", pc) is None:
            out.append(
                Problem(
                    who,
                    "spec.template.spec.priorityClassName",
                    "reference",
                    f"no PriorityClass {pc!r}",
                )
            )
        out += _check_accelerator_pod(pod, pools)
    return out


def _check_accelerator_pod(pod: PodTemplate, pools: Sequence[Obj]) -> list[Problem]:
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


def _check_scaled_object(
    obj: Obj, objs: Sequence[Obj], pods: Sequence[PodTemplate]
) -> list[Problem]:
    who, spec = ref(obj), obj.get("spec") or {}
    ns = (obj.get("metadata") or {}).get("namespace", "default")
    out: list[Problem] = []
    target = spec.get("scaleTargetRef") or {}
    kind = target.get("kind", "Deployment")
    if (
        target.get("apiVersion", "apps/v1") != "apps/v1"
        or _find(objs, kind, target.get("name", ""), ns) is None
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
            found = _find(
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
    out: list[Problem] = []
    name = meta.get("prewarmDeployment", "prescaler-balloon")
    balloon = _find(objs, "Deployment", name, ns)
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
    pc = _find(objs, "PriorityClass", str(bpod.spec.get("priorityClassName")))
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
    m = _SCALER_ADDRESS.match(address)
    scaler_pods = []
    if m:
        svc = _find(objs, "Service", m.group("svc"), m.group("ns"))
        if svc is not None:
            scaler_pods = [
                p
                for p in pods
                if p.namespace == m.group("ns")
                and selector_matches((svc.get("spec") or {}).get("selector"), p.labels)
            ]
    for sp in scaler_pods:
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


def iter_problems(problems: Iterable[Problem]) -> Iterator[str]:
    for p in sorted(problems):
        yield str(p)
