"""CRD schemas as strict JSON Schema, and the index of the CRDs the validator knows.

Why: no API server runs where the tests run, so a CRD kind is checked
against the CRD's own ``openAPIV3Schema``, translated to JSON Schema with
unknown fields rejected (the API server would prune them silently) and with
schema defaults applied first, as the API server does. The index also hands
the Karpenter checks the CEL rules of the shipped CRDs. Only
:func:`load_yaml_documents` and :func:`load_crds` read files.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.manifests.problems import Obj, ref

__all__ = [
    "CrdIndex",
    "CrdVersion",
    "apply_defaults",
    "load_crds",
    "load_yaml_documents",
    "to_jsonschema",
]


def load_yaml_documents(text: str) -> list[Any]:
    """All non-empty YAML documents of a stream."""
    return [doc for doc in yaml.safe_load_all(text) if doc is not None]


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
    """One version of one CRD kind: where it is served, and its two schemas."""

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
    """The index of every CRD in the given YAML files."""
    docs: list[Obj] = []
    for path in paths:
        docs.extend(load_yaml_documents(path.read_text(encoding="utf-8")))
    return CrdIndex(docs)
