"""Every overlay renders with real kustomize and every object validates.

Schemas (kubernetes-validate strict, CRD openAPIV3Schema strict), the
Karpenter CEL rules in Python, and the cross-object checks all run on the
objects exactly as `kubectl apply -k` would send them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.manifests.conftest import OVERLAYS, find, find_all
from tests.manifests.validate import CrdIndex, cross_check, report, validate_objects

Objs = list[dict[str, Any]]


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_overlay_objects_validate(overlay: str, rendered: dict[str, Objs], crds: CrdIndex) -> None:
    objs = rendered[overlay]
    assert objs, f"{overlay} renders nothing"
    problems = validate_objects(objs, crds) + cross_check(objs, crds)
    assert not problems, report(problems)


def test_overlays_exist_and_differ(rendered: dict[str, Objs]) -> None:
    assert {"base", "gpu-g5-g6", "inf2", "push", "mtls", "full", "observed"} <= set(rendered)
    kinds = {
        name: {(o["kind"], o["metadata"]["name"]) for o in objs} for name, objs in rendered.items()
    }
    assert ("NodePool", "gpu-spot") in kinds["gpu-g5-g6"]
    assert ("NodePool", "inf2") not in kinds["gpu-g5-g6"]
    assert ("NodePool", "inf2") in kinds["inf2"]
    assert ("NodePool", "gpu-spot") not in kinds["inf2"]
    assert ("TriggerAuthentication", "prescaler-mtls") in kinds["mtls"]
    assert {("NodePool", "gpu-spot"), ("NodePool", "inf2")} <= kinds["full"]
    # The base is only the scaler and its namespaces.
    assert not any(k in ("NodePool", "ScaledObject", "ConfigMap") for k, _ in kinds["base"])
    assert kinds["observed"] - kinds["gpu-g5-g6"] == {
        ("ServiceMonitor", "prescaler"),
        ("PodMonitor", "vllm"),
        ("ConfigMap", "prescaler-dashboard-fleet"),
        ("ConfigMap", "prescaler-dashboard-forecast-accuracy"),
    }


def test_ec2nodeclass(rendered: dict[str, Objs]) -> None:
    spec = find(rendered["gpu-g5-g6"], "EC2NodeClass")["spec"]
    assert spec["amiSelectorTerms"] == [{"alias": "al2023@latest"}]
    assert "amiFamily" not in spec
    assert ("role" in spec) != ("instanceProfile" in spec)
    (root,) = [b for b in spec["blockDeviceMappings"] if b.get("rootVolume")]
    ebs = root["ebs"]
    assert ebs["volumeType"] == "gp3" and ebs["encrypted"] is True
    assert int(ebs["volumeSize"].removesuffix("Gi")) >= 150
    assert spec["instanceStorePolicy"] == "RAID0"
    assert spec["metadataOptions"]["httpTokens"] == "required"
    assert spec["metadataOptions"]["httpPutResponseHopLimit"] == 1
    for terms in (spec["subnetSelectorTerms"], spec["securityGroupSelectorTerms"]):
        assert terms == [{"tags": {"karpenter.sh/discovery": "my-cluster"}}]


def _req(pool: dict[str, Any], key: str) -> list[str]:
    reqs = pool["spec"]["template"]["spec"]["requirements"]
    (req,) = [r for r in reqs if r["key"] == key]
    assert req["operator"] == "In"
    return list(req["values"])


def test_gpu_pools(rendered: dict[str, Objs]) -> None:
    objs = rendered["gpu-g5-g6"]
    od, spot = find(objs, "NodePool", "gpu-on-demand"), find(objs, "NodePool", "gpu-spot")
    assert od["spec"]["weight"] > spot["spec"]["weight"]
    assert _req(od, "karpenter.sh/capacity-type") == ["on-demand"]
    assert _req(spot, "karpenter.sh/capacity-type") == ["spot"]
    for pool in (od, spot):
        assert sorted(_req(pool, "karpenter.k8s.aws/instance-family")) == ["g5", "g6"]
        tspec = pool["spec"]["template"]["spec"]
        assert {"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"} in tspec["taints"]
        assert tspec["expireAfter"] == "720h"
        assert tspec["nodeClassRef"] == {
            "group": "karpenter.k8s.aws",
            "kind": "EC2NodeClass",
            "name": "accelerated",
        }
        assert "nvidia.com/gpu" in pool["spec"]["limits"]
        assert pool["spec"]["disruption"]["consolidationPolicy"] == "WhenEmpty"
        assert pool["spec"]["disruption"]["consolidateAfter"]


def test_inf2_pool(rendered: dict[str, Objs]) -> None:
    pool = find(rendered["inf2"], "NodePool", "inf2")
    assert _req(pool, "karpenter.k8s.aws/instance-family") == ["inf2"]
    assert {"key": "aws.amazon.com/neuron", "value": "true", "effect": "NoSchedule"} in pool[
        "spec"
    ]["template"]["spec"]["taints"]
    assert "aws.amazon.com/neuron" in pool["spec"]["limits"]


def _container(deploy: dict[str, Any]) -> dict[str, Any]:
    containers = deploy["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def _probe_budget_s(probe: dict[str, Any]) -> int:
    return int(probe.get("initialDelaySeconds", 0)) + int(probe["periodSeconds"]) * int(
        probe["failureThreshold"]
    )


def test_vllm_gpu_deployment(rendered: dict[str, Objs]) -> None:
    objs = rendered["gpu-g5-g6"]
    deploy = find(objs, "Deployment", "vllm-llama3-8b")
    pod = deploy["spec"]["template"]
    c = _container(deploy)
    args = " ".join(c["args"])
    for flag in (
        "--gpu-memory-utilization 0.90",
        "--max-model-len 8192",
        "--enable-chunked-prefill",
        "Meta-Llama-3-8B",
    ):
        assert flag in args
    assert c["resources"]["requests"]["nvidia.com/gpu"] == "1"
    shm = {v["name"]: v for v in pod["spec"]["volumes"]}["dshm"]
    assert shm["emptyDir"]["medium"] == "Memory"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"]["path"] == "/health"
    # Start-up has its own generous budget; readiness/liveness stay tight.
    assert _probe_budget_s(c["startupProbe"]) >= 600
    assert _probe_budget_s(c["livenessProbe"]) <= 120
    assert "initialDelaySeconds" not in c["readinessProbe"]
    ann = pod["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["prometheus.io/port"] == "8000"
    env = {e["name"]: e for e in c["env"]}
    assert env["HUGGING_FACE_HUB_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
    pdb = find(objs, "PodDisruptionBudget", "vllm-llama3-8b")
    assert pdb["spec"]["selector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]
    find(objs, "Service", "vllm-llama3-8b")


def test_neuron_deployment(rendered: dict[str, Objs]) -> None:
    objs = rendered["inf2"]
    deploy = find(objs, "Deployment", "vllm-llama3-8b-neuron")
    c = _container(deploy)
    repo, _, tag = c["image"].partition(":")
    assert repo == "public.ecr.aws/neuron/pytorch-inference-vllm-neuronx"
    vllm_version = tuple(int(x) for x in tag.split("-")[0].split(".")[:2])
    assert vllm_version <= (0, 16), f"vLLM {tag} on inf2 must be <= 0.16"
    assert c["resources"]["requests"]["aws.amazon.com/neuron"] == "1"
    assert c["resources"]["limits"]["aws.amazon.com/neuron"] == "1"
    tols = deploy["spec"]["template"]["spec"]["tolerations"]
    assert {"key": "aws.amazon.com/neuron", "operator": "Exists", "effect": "NoSchedule"} in tols
    assert _probe_budget_s(c["startupProbe"]) >= 1800
    find(objs, "Service", "vllm-llama3-8b-neuron")
    find(objs, "PodDisruptionBudget", "vllm-llama3-8b-neuron")


def test_scaled_object(rendered: dict[str, Objs]) -> None:
    so = find(rendered["gpu-g5-g6"], "ScaledObject", "vllm-llama3-8b")
    (trigger,) = so["spec"]["triggers"]
    assert trigger["type"] == "external"
    assert trigger["metadata"]["scalerAddress"] == (
        "dns:///prescaler.prescaler.svc.cluster.local:9090"
    )
    assert trigger["metadata"]["prewarm"] == "true"
    assert so["spec"]["fallback"]["failureThreshold"] >= 1
    behavior = so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 0
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] >= 300
    svc = find(rendered["gpu-g5-g6"], "Service", "prescaler")
    assert svc["spec"]["clusterIP"] == "None"


def test_push_and_mtls_variants(rendered: dict[str, Objs]) -> None:
    push = find(rendered["push"], "ScaledObject", "vllm-llama3-8b")
    assert push["spec"]["triggers"][0]["type"] == "external-push"
    assert push["spec"]["minReplicaCount"] == 0
    mtls = find(rendered["mtls"], "ScaledObject", "vllm-llama3-8b")
    trig = mtls["spec"]["triggers"][0]
    assert trig["metadata"]["enableTLS"] == "true"
    auth = find(rendered["mtls"], "TriggerAuthentication", trig["authenticationRef"]["name"])
    assert {r["parameter"] for r in auth["spec"]["secretTargetRef"]} == {
        "caCert",
        "tlsClientCert",
        "tlsClientKey",
    }
    scaler = _container(find(rendered["mtls"], "Deployment", "prescaler"))
    # Kubelet gRPC probes cannot do TLS: TCP checks under mTLS.
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert "grpc" not in scaler[probe] and scaler[probe]["tcpSocket"]["port"] == 9090


def test_schedule_overlay_keeps_a_cron_window_beside_prescaler(
    rendered: dict[str, Objs], tmp_path: Path
) -> None:
    """The cron window is appended after prescaler's trigger, everything
    else as gpu-g5-g6 has it; the simulator reads the rendered object and
    the tuner tunes the window's knobs with prescaler's in one side."""
    import yaml

    from simulations.autoscaling.scaledobject import parse_scaledobject
    from simulations.tune.request import tune_request
    from simulations.tune.sides import make_sides

    so = find(rendered["schedule"], "ScaledObject", "vllm-llama3-8b")
    plain = find(rendered["gpu-g5-g6"], "ScaledObject", "vllm-llama3-8b")
    prescaler, cron = so["spec"]["triggers"]
    assert prescaler == plain["spec"]["triggers"][0]
    assert cron["type"] == "cron"
    assert (cron["metadata"]["start"], cron["metadata"]["end"]) == ("45 8 * * 1-5", "0 19 * * 1-5")
    spec = parse_scaledobject(yaml.safe_dump(so), "schedule")
    assert [t.kind for t in spec.triggers] == ["prescaler", "cron"]
    path = tmp_path / "so.yaml"
    path.write_text(yaml.safe_dump(so), encoding="utf-8")
    request = tune_request(trace=None, profile="llama-3-8b@g5.xlarge", scaledobject=str(path))
    (side,) = (s for s in make_sides(request, request.replay.profile, 16) if s.name == "prescaler")
    keys = {p.key for p in side.space}
    assert {"triggers.1.startMinuteOfDay", "triggers.1.windowMinutes"} <= keys
    assert "triggers.1.desiredReplicas" in keys and "targetWaitingPerReplica" in keys


def test_scaler_deployment(rendered: dict[str, Objs]) -> None:
    objs = rendered["base"]
    deploy = find(objs, "Deployment", "prescaler")
    spec = deploy["spec"]["template"]["spec"]
    assert deploy["spec"]["replicas"] == 2
    assert any(
        t["topologyKey"] == "kubernetes.io/hostname" and t["whenUnsatisfiable"] == "DoNotSchedule"
        for t in spec["topologySpreadConstraints"]
    )
    assert spec["securityContext"]["runAsNonRoot"] is True
    c = _container(deploy)
    assert c["command"] + c["args"] == [
        "prescaler",
        "serve",
        "--port",
        "9090",
        "--metrics-port",
        "9091",
    ]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert c[probe]["grpc"]["port"] == 9090
    # The base's `images:` entry names the placeholder every overlay overrides.
    assert c["image"] == "registry.example.com/prescaler:0.1.0"
    assert find(objs, "PodDisruptionBudget", "prescaler")["spec"]["minAvailable"] == 1


def test_prometheus_operator_component(rendered: dict[str, Objs]) -> None:
    objs = rendered["observed"]
    sm = find(objs, "ServiceMonitor", "prescaler")
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    # The scaler's series carry the ScaledObject's namespace: keep it.
    assert sm["spec"]["endpoints"][0]["honorLabels"] is True
    pm = find(objs, "PodMonitor", "vllm")
    vllm = find(objs, "Deployment", "vllm-llama3-8b")
    assert pm["metadata"]["namespace"] == vllm["metadata"]["namespace"]
    assert pm["spec"]["podMetricsEndpoints"][0]["path"] == "/metrics"


def test_scaler_rbac_is_least_privilege(rendered: dict[str, Objs]) -> None:
    objs = rendered["gpu-g5-g6"]
    granted: set[tuple[str, str, str, tuple[str, ...]]] = set()
    for role in find_all(objs, "Role") + find_all(objs, "ClusterRole"):
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for res in rule["resources"]:
                    for verb in rule["verbs"]:
                        granted.add((group, res, verb, tuple(rule.get("resourceNames", []))))
    writes = {g for g in granted if g[2] not in ("get", "list", "watch")}
    assert writes == {("apps", "deployments/scale", "patch", ("prescaler-balloon",))}
    for group, res in (
        ("", "pods"),
        ("discovery.k8s.io", "endpointslices"),
        ("", "nodes"),
        ("karpenter.sh", "nodeclaims"),
    ):
        assert {v for g, r, v, _ in granted if (g, r) == (group, res)} == {"get", "list", "watch"}
    assert all("*" not in (g, r, v) for g, r, v, _ in granted)


def test_network_policy_admits_only_keda_and_prometheus(rendered: dict[str, Objs]) -> None:
    np = find(rendered["base"], "NetworkPolicy", "prescaler")
    assert np["spec"]["policyTypes"] == ["Ingress"]
    sources = {}
    for rule in np["spec"]["ingress"]:
        (peer,) = rule["from"]
        ns = peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        sources[ns] = {p["port"] for p in rule["ports"]}
    assert sources == {"keda": {9090}, "monitoring": {9091}}


def test_prewarm_balloon(rendered: dict[str, Objs]) -> None:
    objs = rendered["gpu-g5-g6"]
    pc = find(objs, "PriorityClass", "prescaler-balloon")
    assert pc["value"] < 0 and pc["globalDefault"] is False
    balloon = find(objs, "Deployment", "prescaler-balloon")
    vllm = find(objs, "Deployment", "vllm-llama3-8b")
    assert balloon["spec"]["replicas"] == 0
    bspec, vspec = balloon["spec"]["template"]["spec"], vllm["spec"]["template"]["spec"]
    assert bspec["priorityClassName"] == "prescaler-balloon"
    assert bspec["tolerations"] == vspec["tolerations"]
    assert bspec["affinity"] == vspec["affinity"]
    breq = _container(balloon)["resources"]["requests"]
    vreq = _container(vllm)["resources"]["requests"]
    for key in ("cpu", "memory", "nvidia.com/gpu"):
        assert breq[key] == vreq[key], key
    # Without the prewarm component there is no balloon at all.
    assert not [o for o in rendered["inf2"] if o["metadata"]["name"] == "prescaler-balloon"]


def test_time_slicing_config(rendered: dict[str, Objs]) -> None:
    import yaml

    cm = find(rendered["gpu-g5-g6"], "ConfigMap", "nvidia-device-plugin-config")
    shared = {k: yaml.safe_load(v) for k, v in cm["data"].items()}
    assert all(cfg["version"] == "v1" for cfg in shared.values())
    sliced = [cfg for cfg in shared.values() if "sharing" in cfg]
    assert sliced
    for cfg in sliced:
        (res,) = cfg["sharing"]["timeSlicing"]["resources"]
        assert res["name"] == "nvidia.com/gpu" and res["replicas"] >= 2


def test_dashboards_configmaps(rendered: dict[str, Objs]) -> None:
    cms = [
        o
        for o in rendered["observed"]
        if o["kind"] == "ConfigMap"
        and o["metadata"].get("labels", {}).get("grafana_dashboard") == "1"
    ]
    assert sorted(next(iter(c["data"])) for c in cms) == ["fleet.json", "forecast-accuracy.json"]


def test_readme_describes_every_overlay() -> None:
    from tests.manifests.conftest import MANIFESTS

    readme = (MANIFESTS / "README.md").read_text(encoding="utf-8")
    for name in OVERLAYS:
        row = f"| `{name}` |" if name == "base" else f"| `overlays/{name}` |"
        assert row in readme, f"manifests/README.md does not describe {name}"
    assert "docker build -t" in readme
