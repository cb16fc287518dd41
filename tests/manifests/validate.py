"""Offline validation of Kubernetes manifests: schemas, CEL rules, cross-object checks.

Why this exists: no API server runs where the tests run, yet a manifest that
kubectl would reject (or, worse, accept and silently misapply, like a
Karpenter requirement on a made-up label key) must fail CI. So every rendered
object goes through:

1. its schema with unknown fields rejected (:func:`validate_object`): core
   kinds with ``kubernetes-validate --strict`` (bundled OpenAPI schemas), CRD
   kinds with the CRD's ``openAPIV3Schema`` translated to JSON Schema
   (:mod:`tests.manifests.crd_schemas`), and kinds whose CRDs are not shipped
   with the hand-written schemas of :mod:`tests.manifests.hand_schemas`;
2. the checks JSON Schema cannot express: Karpenter's CEL rules and label-key
   lint (:mod:`tests.manifests.karpenter_rules`), the NVIDIA device plugin's
   config inside ConfigMaps (:mod:`tests.manifests.device_plugin`);
3. cross-object checks (:func:`cross_check`, :mod:`tests.manifests.references`):
   references resolve, selectors select, accelerator pods tolerate and
   request what their pool offers (:mod:`tests.manifests.scheduling`), the
   KEDA trigger reaches the scaler's headless Service
   (:mod:`tests.manifests.keda_checks`).

This module is the entry point the tests import; it re-exports the public
names of the modules above. Everything is pure: functions take parsed
objects and return :class:`Problem` lists (:mod:`tests.manifests.problems`).
Only :func:`load_yaml_documents` and :func:`load_crds` read files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema
import kubernetes_validate

from tests.manifests.crd_schemas import (
    CrdIndex,
    apply_defaults,
    load_crds,
    load_yaml_documents,
    to_jsonschema,
)
from tests.manifests.device_plugin import check_device_plugin_config
from tests.manifests.hand_schemas import HAND_SCHEMAS
from tests.manifests.karpenter_rules import (
    WELL_KNOWN_LABELS,
    check_ec2nodeclass,
    check_nodepool,
    check_requirements,
)
from tests.manifests.problems import Obj, Problem, json_path, ref, report
from tests.manifests.references import cross_check

__all__ = [
    "DEFAULT_K8S_VERSION",
    "WELL_KNOWN_LABELS",
    "CrdIndex",
    "Problem",
    "check_device_plugin_config",
    "check_ec2nodeclass",
    "check_nodepool",
    "check_requirements",
    "cross_check",
    "load_crds",
    "load_yaml_documents",
    "report",
    "to_jsonschema",
    "validate_object",
    "validate_objects",
]

# The newest minor kubernetes-validate ships strict schemas for that EKS
# also runs; the manifests use nothing newer than 1.27 (gRPC probes GA).
DEFAULT_K8S_VERSION = "1.33"


def _schema_problems(obj: Obj, schema: Mapping[str, Any], rule: str) -> list[Problem]:
    """Every JSON Schema error of the object, in path order."""
    validator = jsonschema.Draft202012Validator(schema)
    return [
        Problem(ref(obj), json_path(err.absolute_path), rule, err.message)
        for err in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.path)))
    ]


def _split_api_version(api_version: str) -> tuple[str, str]:
    """``apps/v1`` -> (``apps``, ``v1``); the core group is ``""``."""
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
            problems.append(Problem(ref(obj), json_path(exc.path), "schema", exc.message))
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
    """Every object through :func:`validate_object`, plus objects defined twice."""
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
