"""What a cluster needs before `kubectl apply -k`: the base and the plain
overlays use only core Kubernetes, KEDA and Karpenter kinds (no
prometheus-operator objects), and every namespace an overlay places objects
in, selects, binds or addresses is either created by that overlay or listed
as a prerequisite in docs/adopt.md."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.manifests.conftest import OVERLAYS, ROOT
from tests.manifests.namespaces import created_namespaces, namespace_uses, unplaced_objects

Objs = list[dict[str, Any]]

# Overlays that add components/prometheus-operator on purpose; every other one
# must apply to a cluster without its CRDs.
OPERATOR_OVERLAYS = {"observed"}
ADOPT = ROOT / "docs" / "adopt.md"


def namespace_table() -> dict[str, str]:
    """docs/adopt.md's "Namespaces" table: namespace -> who creates it."""
    text = ADOPT.read_text(encoding="utf-8")
    section = text.split("### Namespaces", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `([a-z0-9-]+)` \| ([^|]+)\|", section, flags=re.M)
    assert rows, "docs/adopt.md has no namespace rows under '### Namespaces'"
    return {name: who.strip() for name, who in rows}


def prerequisites() -> set[str]:
    return {ns for ns, who in namespace_table().items() if who.startswith("you")}


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_no_prometheus_operator_objects_unless_asked(
    overlay: str, rendered: dict[str, Objs]
) -> None:
    operator = sorted(
        f"{o['kind']}/{o['metadata']['name']}"
        for o in rendered[overlay]
        if o["apiVersion"].startswith("monitoring.coreos.com/")
    )
    if overlay in OPERATOR_OVERLAYS:
        assert operator == ["PodMonitor/vllm", "ServiceMonitor/prescaler"]
    else:
        assert operator == [], f"{overlay} needs prometheus-operator's CRDs: {operator}"


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_every_namespace_is_created_or_a_prerequisite(
    overlay: str, rendered: dict[str, Objs]
) -> None:
    objs = rendered[overlay]
    known = created_namespaces(objs) | prerequisites()
    unknown = [u for u in namespace_uses(objs) if u.namespace not in known]
    assert not unknown, "\n".join(
        f"{u.obj} {u.path}: namespace {u.namespace!r} is neither created nor in docs/adopt.md"
        for u in unknown
    )
    assert unplaced_objects(objs) == []


def test_the_namespace_table_matches_the_manifests(rendered: dict[str, Objs]) -> None:
    table = namespace_table()
    created = set().union(*(created_namespaces(objs) for objs in rendered.values()))
    used = {u.namespace for objs in rendered.values() for u in namespace_uses(objs)}
    assert {ns for ns, who in table.items() if who.startswith("the manifests")} == created
    assert prerequisites().isdisjoint(created)
    # No stale prerequisite: each one listed is used by some overlay.
    assert prerequisites() <= used, prerequisites() - used
    assert set(table) == created | prerequisites()


def test_the_check_sees_each_kind_of_namespace_use() -> None:
    # The checks above would be worthless if a use slipped past namespace_uses.
    objs: Objs = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "n1"}},
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "p", "namespace": "n1"},
            "spec": {
                "ingress": [
                    {
                        "from": [
                            {
                                "namespaceSelector": {
                                    "matchLabels": {"kubernetes.io/metadata.name": "n2"}
                                }
                            }
                        ]
                    }
                ]
            },
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "b"},
            "subjects": [{"kind": "ServiceAccount", "name": "s", "namespace": "n3"}],
        },
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": "so", "namespace": "n1"},
            "spec": {
                "triggers": [
                    {
                        "type": "external",
                        "metadata": {
                            "scalerAddress": "dns:///s.n4.svc.cluster.local:9090",
                            "prometheusAddress": "http://prom.n5.svc:9090",
                        },
                    }
                ]
            },
        },
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PodMonitor",
            "metadata": {"name": "m", "namespace": "n1"},
            "spec": {"namespaceSelector": {"matchNames": ["n6"]}},
        },
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "nowhere"}},
    ]
    assert {u.namespace for u in namespace_uses(objs)} == {f"n{i}" for i in range(1, 7)}
    assert unplaced_objects(objs) == ["Service/nowhere"]
