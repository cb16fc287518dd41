"""The validator catches what it claims to: each check is shown a broken
copy of a good rendered object and must name the rule at fault."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.manifests.conftest import find
from tests.manifests.validate import (
    WELL_KNOWN_LABELS,
    CrdIndex,
    Problem,
    check_device_plugin_config,
    check_requirements,
    cross_check,
    to_jsonschema,
    validate_object,
    validate_objects,
)

Objs = list[dict[str, Any]]


def _rules(problems: list[Problem]) -> set[str]:
    return {p.rule for p in problems}


def _mutated(objs: Objs, kind: str, name: str, mutate: Callable[[dict[str, Any]], None]) -> Objs:
    out = copy.deepcopy(objs)
    mutate(find(out, kind, name))
    return out


def test_to_jsonschema_closes_objects_unless_preserved() -> None:
    schema = to_jsonschema(
        {
            "type": "object",
            "properties": {
                "a": {"type": "object", "properties": {"b": {"type": "string"}}},
                "free": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                    "properties": {"c": {"type": "string"}},
                },
                "map": {"type": "object", "additionalProperties": {"type": "string"}},
                "n": {"type": "string", "nullable": True},
            },
        }
    )
    assert schema["additionalProperties"] is False
    assert schema["properties"]["a"]["additionalProperties"] is False
    assert "additionalProperties" not in schema["properties"]["free"]
    assert schema["properties"]["map"]["additionalProperties"] == {"type": "string"}
    assert schema["properties"]["n"]["type"] == ["string", "null"]


BREAKS: list[tuple[str, str, str, Callable[[dict[str, Any]], None], str]] = [
    # (overlay, kind, name, mutation, rule expected)
    (
        "gpu-g5-g6",
        "EC2NodeClass",
        "accelerated",
        lambda o: o["spec"].update(instanceProfile="X"),
        "cel:role-xor-instance-profile",
    ),
    (
        "gpu-g5-g6",
        "EC2NodeClass",
        "accelerated",
        lambda o: o["spec"].pop("role"),
        "cel:role-xor-instance-profile",
    ),
    (
        "gpu-g5-g6",
        "EC2NodeClass",
        "accelerated",
        lambda o: o["spec"].update(amiFamily="AL2"),
        "cel:alias-ami-family",
    ),
    (
        "gpu-g5-g6",
        "EC2NodeClass",
        "accelerated",
        lambda o: o["spec"].update(amiSelectorTerms=[{"id": "ami-123"}]),
        "cel:ami-family-required",
    ),
    (
        "gpu-g5-g6",
        "EC2NodeClass",
        "accelerated",
        lambda o: o["spec"].pop("amiSelectorTerms"),
        "schema",
    ),
    (
        "gpu-g5-g6",
        "EC2NodeClass",
        "accelerated",
        lambda o: o["spec"]["metadataOptions"].update(httpTokens="sometimes"),
        "schema",
    ),
    (
        "gpu-g5-g6",
        "NodePool",
        "gpu-spot",
        lambda o: o["spec"]["template"]["metadata"]["labels"].update({"karpenter.sh/team": "x"}),
        "cel:restricted-label-domain",
    ),
    (
        "gpu-g5-g6",
        "NodePool",
        "gpu-spot",
        lambda o: o["spec"]["template"]["metadata"]["labels"].update(
            {"karpenter.k8s.aws/whatever": "x"}
        ),
        "cel:restricted-label-domain",
    ),
    (
        "gpu-g5-g6",
        "NodePool",
        "gpu-spot",
        lambda o: o["spec"]["template"]["spec"]["requirements"][1].update(
            key="instance.k8s.aws/instance-family"
        ),
        "label-key",
    ),
    (
        "gpu-g5-g6",
        "NodePool",
        "gpu-spot",
        lambda o: o["spec"]["template"]["spec"]["requirements"][1].update(key="instance-family"),
        "label-key",
    ),
    (
        "gpu-g5-g6",
        "NodePool",
        "gpu-spot",
        lambda o: o["spec"]["template"]["spec"]["requirements"][1].update(minValues=3),
        "cel:requirement-min-values",
    ),
    (
        "gpu-g5-g6",
        "NodePool",
        "gpu-spot",
        lambda o: o["spec"]["template"]["spec"]["requirements"][0].update(values=["preemptible"]),
        "label-value",
    ),
    (
        "gpu-g5-g6",
        "NodePool",
        "gpu-spot",
        lambda o: o["spec"]["template"]["spec"].update(limits={"nvidia.com/gpu": "4"}),
        "schema",
    ),
    (
        "gpu-g5-g6",
        "NodePool",
        "gpu-spot",
        lambda o: o["spec"]["template"]["spec"]["nodeClassRef"].update(
            apiVersion="karpenter.k8s.aws/v1"
        ),
        "schema",
    ),
    (
        "gpu-g5-g6",
        "NodePool",
        "gpu-spot",
        lambda o: o["spec"]["disruption"].update(consolidationPolicy="WhenUnderutilized"),
        "schema",
    ),
    (
        "gpu-g5-g6",
        "NodePool",
        "gpu-spot",
        lambda o: o["spec"]["template"]["spec"].pop("taints"),
        "accelerator-taint",
    ),
    (
        "gpu-g5-g6",
        "NodePool",
        "gpu-spot",
        lambda o: o.update(apiVersion="karpenter.sh/v1beta1"),
        "api-version",
    ),
    (
        "gpu-g5-g6",
        "ScaledObject",
        "vllm-llama3-8b",
        lambda o: o["spec"].update(pollingIntervall=5),
        "schema",
    ),
    (
        "gpu-g5-g6",
        "Deployment",
        "vllm-llama3-8b",
        lambda o: o["spec"]["template"]["spec"]["containers"][0].update(startupprobe={}),
        "schema",
    ),
    (
        "gpu-g5-g6",
        "ConfigMap",
        "nvidia-device-plugin-config",
        lambda o: o["data"].update(bad="version: v1\nsharing:\n  timeSlicing:\n    replicas: 2\n"),
        "device-plugin",
    ),
    (
        "mtls",
        "TriggerAuthentication",
        "prescaler-mtls",
        lambda o: o["spec"]["secretTargetRef"][0].pop("key"),
        "schema",
    ),
    (
        "observed",
        "ServiceMonitor",
        "prescaler",
        lambda o: o["spec"]["endpoints"][0].update(interval="fast"),
        "schema",
    ),
    (
        "observed",
        "PodMonitor",
        "vllm",
        lambda o: o["spec"].update(endpoints=o["spec"].pop("podMetricsEndpoints")),
        "schema",
    ),
]


@pytest.mark.parametrize(
    ("overlay", "kind", "name", "mutate", "rule"),
    BREAKS,
    ids=[f"{b[1]}-{b[4]}-{i}" for i, b in enumerate(BREAKS)],
)
def test_object_checks_catch_breakage(
    rendered: dict[str, Objs],
    crds: CrdIndex,
    overlay: str,
    kind: str,
    name: str,
    mutate: Callable[[dict[str, Any]], None],
    rule: str,
) -> None:
    objs = _mutated(rendered[overlay], kind, name, mutate)
    problems = validate_object(find(objs, kind, name), crds)
    assert rule in _rules(problems), problems


CROSS_BREAKS: list[tuple[str, str, str, Callable[[dict[str, Any]], None], str]] = [
    (
        "gpu-g5-g6",
        "ScaledObject",
        "vllm-llama3-8b",
        lambda o: o["spec"]["scaleTargetRef"].update(name="nope"),
        "reference",
    ),
    (
        "gpu-g5-g6",
        "ScaledObject",
        "vllm-llama3-8b",
        lambda o: o["spec"]["triggers"][0]["metadata"].update(
            scalerAddress="dns:///prescaler.keda.svc.cluster.local:9090"
        ),
        "scaler-address",
    ),
    (
        "gpu-g5-g6",
        "ScaledObject",
        "vllm-llama3-8b",
        lambda o: o["spec"]["triggers"][0]["metadata"].update(
            scalerAddress="dns:///prescaler.prescaler.svc.cluster.local:9091"
        ),
        "scaler-address",
    ),
    (
        "gpu-g5-g6",
        "ScaledObject",
        "vllm-llama3-8b",
        lambda o: o["spec"]["triggers"][0]["metadata"].update(
            scalerAddress="prescaler.prescaler.svc.cluster.local:9090"
        ),
        "scaler-address",
    ),
    ("gpu-g5-g6", "Service", "prescaler", lambda o: o["spec"].pop("clusterIP"), "scaler-address"),
    (
        "gpu-g5-g6",
        "ScaledObject",
        "vllm-llama3-8b",
        lambda o: o["spec"]["triggers"][0]["metadata"].update(maxReplicas="99"),
        "keda-bounds",
    ),
    (
        "gpu-g5-g6",
        "ScaledObject",
        "vllm-llama3-8b",
        lambda o: o["spec"]["triggers"][0]["metadata"].update(prewarmDeployment="other"),
        "prewarm",
    ),
    (
        "gpu-g5-g6",
        "Role",
        "prescaler-balloon-scaler",
        lambda o: o["rules"][0].update(resourceNames=["other"]),
        "prewarm",
    ),
    ("gpu-g5-g6", "PriorityClass", "prescaler-balloon", lambda o: o.update(value=1000), "prewarm"),
    (
        "gpu-g5-g6",
        "Deployment",
        "vllm-llama3-8b",
        lambda o: o["spec"]["template"]["spec"].pop("tolerations"),
        "accelerator-placement",
    ),
    (
        "gpu-g5-g6",
        "Deployment",
        "vllm-llama3-8b",
        lambda o: (
            o["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"].pop(
                "nvidia.com/gpu"
            )
            and o["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"].pop(
                "nvidia.com/gpu"
            )
        ),
        "accelerator-placement",
    ),
    (
        "inf2",
        "Deployment",
        "vllm-llama3-8b-neuron",
        lambda o: o["spec"]["template"]["spec"]["tolerations"][0].update(key="nvidia.com/gpu"),
        "accelerator-placement",
    ),
    (
        "gpu-g5-g6",
        "Service",
        "vllm-llama3-8b",
        lambda o: o["spec"]["selector"].update({"app.kubernetes.io/instance": "x"}),
        "selector",
    ),
    (
        "gpu-g5-g6",
        "PodDisruptionBudget",
        "vllm-llama3-8b",
        lambda o: o["spec"]["selector"]["matchLabels"].update(extra="x"),
        "selector",
    ),
    (
        "observed",
        "ServiceMonitor",
        "prescaler",
        lambda o: o["spec"]["endpoints"][0].update(port="http"),
        "selector",
    ),
    (
        "observed",
        "PodMonitor",
        "vllm",
        lambda o: o["spec"]["podMetricsEndpoints"][0].update(port="metrics"),
        "selector",
    ),
    (
        "observed",
        "PodMonitor",
        "vllm",
        lambda o: o["spec"]["namespaceSelector"].update(matchNames=["prescaler"]),
        "selector",
    ),
    (
        "gpu-g5-g6",
        "NodePool",
        "gpu-spot",
        lambda o: o["spec"]["template"]["spec"]["nodeClassRef"].update(name="gpu"),
        "reference",
    ),
    (
        "base",
        "ClusterRoleBinding",
        "prescaler-nodes-reader",
        lambda o: o["subjects"][0].update(name="scaler"),
        "reference",
    ),
    (
        "base",
        "ClusterRole",
        "prescaler-nodes-reader",
        lambda o: o["rules"][1].update(resources=["nodeclaim"]),
        "reference",
    ),
    (
        "mtls",
        "ScaledObject",
        "vllm-llama3-8b",
        lambda o: o["spec"]["triggers"][0].update(authenticationRef={"name": "gone"}),
        "reference",
    ),
]


@pytest.mark.parametrize(
    ("overlay", "kind", "name", "mutate", "rule"),
    CROSS_BREAKS,
    ids=[f"{b[1]}-{b[4]}-{i}" for i, b in enumerate(CROSS_BREAKS)],
)
def test_cross_checks_catch_breakage(
    rendered: dict[str, Objs],
    crds: CrdIndex,
    overlay: str,
    kind: str,
    name: str,
    mutate: Callable[[dict[str, Any]], None],
    rule: str,
) -> None:
    assert not cross_check(rendered[overlay], crds)
    problems = cross_check(_mutated(rendered[overlay], kind, name, mutate), crds)
    assert rule in _rules(problems), problems


def test_duplicate_objects_are_reported(rendered: dict[str, Objs], crds: CrdIndex) -> None:
    objs = rendered["base"]
    assert "duplicate" in _rules(validate_objects([*objs, objs[0]], crds))


_NAME = st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(WELL_KNOWN_LABELS)),
    domain=st.one_of(
        st.just(""), _NAME.map(lambda n: f"{n}.example.com"), _NAME.map(lambda n: f"{n}.k8s.aws")
    ),
)
def test_well_known_name_on_wrong_domain_is_flagged(name: str, domain: str) -> None:
    if domain == WELL_KNOWN_LABELS[name]:
        return
    key = f"{domain}/{name}" if domain else name
    problems = check_requirements(
        [{"key": key, "operator": "In", "values": ["x"]}], "pool", "requirements"
    )
    assert "label-key" in _rules(problems)


@settings(max_examples=60, deadline=None)
@given(name=st.sampled_from(sorted(set(WELL_KNOWN_LABELS) - {"nodepool"})))
def test_well_known_keys_on_their_domain_pass(name: str) -> None:
    key = f"{WELL_KNOWN_LABELS[name]}/{name}"
    values = {
        "karpenter.sh/capacity-type": ["spot"],
        "kubernetes.io/arch": ["amd64"],
        "kubernetes.io/os": ["linux"],
    }.get(key, ["x"])
    assert check_requirements([{"key": key, "operator": "In", "values": values}], "p", "r") == []


def test_nodepool_label_is_restricted_in_requirements() -> None:
    problems = check_requirements(
        [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["a"]}], "p", "r"
    )
    assert "cel:restricted-label" in _rules(problems)


@settings(max_examples=60, deadline=None)
@given(key=st.text(max_size=40))
def test_requirement_keys_never_crash(key: str) -> None:
    problems = check_requirements([{"key": key, "operator": "Exists"}], "p", "r")
    assert all(isinstance(p, Problem) for p in problems)


def test_device_plugin_config_ignores_unrelated_configmaps() -> None:
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "x"},
        "data": {"app.yaml": "version: 3\nname: app\n", "plain": "hello"},
    }
    assert check_device_plugin_config(cm) == []
