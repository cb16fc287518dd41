"""What every manifest check returns: :class:`Problem`, and how objects are named in it.

Why a module of its own: the schema, Karpenter, device-plugin and
cross-object checks all report in the same shape and name objects the same
way (``Kind/namespace/name``), so a test can sort, compare and print their
findings together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Obj", "Problem", "find_object", "json_path", "namespace_of", "ref", "report"]

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


def namespace_of(obj: Obj) -> str:
    """The object's namespace; ``default`` when unset, as kubectl applies it."""
    namespace: str = (obj.get("metadata") or {}).get("namespace", "default")
    return namespace


def json_path(parts: Iterable[Any]) -> str:
    """``spec.template.spec.containers[0]``: where in an object a finding is."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def find_object(
    objs: Iterable[Obj], kind: str, name: str, namespace: str | None = None
) -> Obj | None:
    """The first object of that kind and name (and namespace, when given)."""
    for obj in objs:
        meta = obj.get("metadata") or {}
        if (
            obj.get("kind") == kind
            and meta.get("name") == name
            and (namespace is None or meta.get("namespace") == namespace)
        ):
            return obj
    return None


def report(problems: Iterable[Problem]) -> str:
    """All findings, sorted, one per line: what a failing test prints."""
    return "\n".join(str(p) for p in sorted(problems))
