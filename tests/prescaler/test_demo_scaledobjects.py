"""The ScaledObjects `prescaler demo` writes (``OUT/scaledobjects/*.yaml``):
each applies as written: KEDA's CRD schema accepts it, prescaler's trigger
names the scaler's address, and its fields agree with one another."""

from __future__ import annotations

from pathlib import Path

import yaml

from prescaler.demo import write_scaledobjects
from prescaler.demo_tuned import FIXTURE, load_fixture
from simulations.tune.paste import DEFAULT_SCALER_ADDRESS
from tests.manifests.validate import load_crds, validate_object

CRD = Path(__file__).resolve().parents[1] / "manifests" / "data" / "crds"


def test_the_demos_scaledobjects_apply_as_written(tmp_path: Path) -> None:
    crds = load_crds([CRD / "keda.sh_scaledobjects.yaml"])
    paths = write_scaledobjects(load_fixture(FIXTURE), tmp_path)
    assert paths
    for path in paths:
        doc = yaml.safe_load(path.read_text())
        assert [str(p) for p in validate_object(doc, crds)] == [], path.name
        spec = doc["spec"]
        floor = spec.get("minReplicaCount", 0)
        if "fallback" in spec:
            assert spec["fallback"]["replicas"] >= floor, path.name
        for trig in spec["triggers"]:
            if trig["type"] not in ("external", "external-push"):
                continue
            meta = trig["metadata"]
            assert meta["scalerAddress"] == DEFAULT_SCALER_ADDRESS, path.name
            if "fallbackReplicas" in meta and "fallback" in spec:
                assert int(meta["fallbackReplicas"]) == spec["fallback"]["replicas"]
            if "scaleDownStabilizationSeconds" in meta:
                # the trigger's window is the one scale-in wait
                down = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]
                assert down["stabilizationWindowSeconds"] == 0, path.name
