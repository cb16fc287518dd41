"""Karpenter's CEL rules in Python, plus lint for label keys that only look like Karpenter's.

Why: JSON Schema cannot say "exactly one of role and instanceProfile" or
"this label domain is restricted", and a NodePool requirement on a made-up
label key (``instance.k8s.aws/...``, a bare ``instance-family``) is accepted
by the API server and then constrains nothing. The rules follow the
EC2NodeClass and NodePool CRDs of Karpenter v1; the restricted-domain allow
list is read from the shipped CRD when one is given.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence

from tests.manifests.crd_schemas import CrdIndex
from tests.manifests.problems import Obj, Problem, ref

__all__ = [
    "WELL_KNOWN_LABELS",
    "check_ec2nodeclass",
    "check_nodepool",
    "check_requirements",
]

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
