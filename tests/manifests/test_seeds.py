"""Seed regression: the seeds' Karpenter manifests go through the same
validator as ours, and each of their known mistakes is reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.manifests.conftest import DATA
from tests.manifests.validate import (
    CrdIndex,
    Problem,
    check_requirements,
    load_yaml_documents,
    validate_object,
)
from tests.support.reference import reference_path

SEEDS = DATA / "seeds"


def _problems(name: str, crds: CrdIndex) -> list[Problem]:
    out: list[Problem] = []
    for doc in load_yaml_documents((SEEDS / name).read_text(encoding="utf-8")):
        if isinstance(doc, list):  # a requirements fragment
            out += check_requirements(doc, name, "requirements", crds)
        else:
            out += validate_object(doc, crds)
    return out


def _has(problems: list[Problem], rule: str, path_part: str, text: str) -> bool:
    return any(p.rule == rule and path_part in p.path and text in p.message for p in problems)


def test_seed000_ec2nodeclass(crds: CrdIndex) -> None:
    problems = _problems("seed000_ec2nodeclass.yaml", crds)
    assert _has(problems, "api-version", "apiVersion", "v1beta1")
    assert _has(problems, "schema", "spec", "'amiSelectorTerms' is a required property")


def test_seed000_nodepool(crds: CrdIndex) -> None:
    problems = _problems("seed000_nodepool.yaml", crds)
    assert _has(problems, "api-version", "apiVersion", "v1beta1")
    assert _has(problems, "label-key", "requirements[1].key", "instance.k8s.aws")
    assert _has(problems, "schema", "nodeClassRef", "'group' is a required property")
    assert _has(problems, "schema", "nodeClassRef", "'kind' is a required property")
    # v1 moved expireAfter from disruption to template.spec.
    assert _has(problems, "schema", "spec.disruption", "'expireAfter' was unexpected")


def test_seed000_inf2_fragment(crds: CrdIndex) -> None:
    problems = _problems("seed000_inf2_requirement.yaml", crds)
    assert _has(problems, "label-key", "requirements[0].key", "karpenter.k8s.aws/instance-family")


def test_seed002_karpenter(crds: CrdIndex) -> None:
    problems = _problems("seed002_karpenter.yaml", crds)
    pool = [p for p in problems if p.obj.startswith("NodePool/")]
    nodeclass = [p for p in problems if p.obj.startswith("EC2NodeClass/")]
    assert _has(pool, "label-key", "requirements[3].key", "'instance-family' uses a bare key")
    assert _has(pool, "schema", "nodeClassRef", "'apiVersion' was unexpected")
    assert _has(pool, "schema", "nodeClassRef", "'group' is a required property")
    assert _has(pool, "schema", "spec.template.spec", "'limits' was unexpected")
    assert _has(pool, "accelerator-taint", "taints", "nvidia.com/gpu")
    assert _has(pool, "api-version", "apiVersion", "v1beta1")
    # The node class is v1beta1 but otherwise valid v1 (AL2 alias with amiFamily AL2).
    assert {p.rule for p in nodeclass} == {"api-version"}


def test_seed002_time_slicing_is_current_format(crds: CrdIndex) -> None:
    # Seed 2's ConfigMap already uses the v1 config format; nothing to report.
    assert _problems("seed002_time_slicing.yaml", crds) == []


@pytest.mark.parametrize("name", sorted(p.name for p in SEEDS.glob("*.yaml")))
def test_seed_data_is_verbatim(name: str) -> None:
    seeds_dir = reference_path("seeds")
    text = (SEEDS / name).read_text(encoding="utf-8")
    sources = [p.read_text(encoding="utf-8") for p in Path(seeds_dir).glob("*.txt")]
    assert any(text in src for src in sources), f"{name} is not a verbatim excerpt of a seed"
