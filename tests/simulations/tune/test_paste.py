"""The ScaledObject `prescaler tune` prints to paste: it passes KEDA's own CRD
schema, holds no two fields that contradict each other (one scale-in wait,
a fallback at or above the floor, nothing the forecast alone reads beside
``forecast: off``, thresholds its metric can reach, no window under the
floor), and carries the team's names and addresses or says which are still
to set."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulations.tune.manifest import (
    FRACTION_METRICS,
    apply_to_manifest,
    metric_ceiling,
    trigger_space,
)
from simulations.tune.paste import (
    DEFAULT_SCALER_ADDRESS,
    is_loopback,
    paste_manifest,
    window_notes,
)
from simulations.tune.request import TuneRequest, tune_request
from simulations.tune.search import FORECAST_ONLY_KEYS, sample_metadata
from simulations.tune.sides import SIDES, Side, make_sides
from tests.manifests.validate import CrdIndex, load_crds, validate_object

PROFILE = "llama-3-8b@g5.xlarge"
CRD = Path(__file__).resolve().parents[2] / "manifests" / "data" / "crds"
"""KEDA's ScaledObject CRD as released (kedacore/keda v2.20, Apache-2.0;
``tests/manifests/data/crds/SOURCE.md``)."""


@functools.cache
def _crds() -> CrdIndex:
    return load_crds([CRD / "keda.sh_scaledobjects.yaml"])


@functools.cache
def _sides(**kw: Any) -> dict[str, Side]:
    request = tune_request(trace=None, profile=PROFILE, sides=SIDES, **kw)
    return {s.name: s for s in make_sides(request, PROFILE, 10)}


def _tuned(side: Side, seed: int) -> dict[str, Any]:
    """The manifest of one random setting of ``side``, as tune writes it."""
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    setting = sample_metadata(study.ask(), side.space, side.max_replicas)
    return apply_to_manifest(side.manifest, setting)


def _request(**kw: Any) -> TuneRequest:
    return tune_request(trace=None, profile=PROFILE, **kw)


def _prescaler_meta(doc: Mapping[str, Any]) -> dict[str, str] | None:
    for trig in doc["spec"]["triggers"]:
        if trig["type"] in ("external", "external-push"):
            return dict(trig["metadata"])
    return None


def _contradictions(doc: Mapping[str, Any]) -> list[str]:
    """Every pair of fields in ``doc`` that say different things."""
    found: list[str] = []
    spec = doc["spec"]
    floor = int(spec.get("minReplicaCount", 0))
    meta = _prescaler_meta(doc)
    behavior = (spec.get("advanced") or {}).get("horizontalPodAutoscalerConfig", {})
    down = (behavior.get("behavior") or {}).get("scaleDown") or {}
    waits = meta is not None and "scaleDownStabilizationSeconds" in meta
    # the trigger's wait is the one wait: an HPA window would add to it
    if waits and down.get("stabilizationWindowSeconds") != 0:
        assert meta is not None
        found.append(f"two scale-in waits: {meta['scaleDownStabilizationSeconds']} and {down}")
    if meta is not None and "minReplicas" in meta and int(meta["minReplicas"]) != floor:
        # above a minReplicaCount of 0 it keeps IsActive true: never zero
        found.append(f"minReplicas {meta['minReplicas']} != minReplicaCount {floor}")
    fallback = spec.get("fallback") or {}
    if "replicas" in fallback:
        if fallback["replicas"] < floor:
            found.append(f"fallback.replicas {fallback['replicas']} < minReplicaCount {floor}")
        written = None if meta is None else meta.get("fallbackReplicas")
        if written is not None and int(written) != fallback["replicas"]:
            found.append(f"fallback.replicas {fallback['replicas']} != fallbackReplicas")
    if meta is not None and meta.get("forecast") == "off":
        stray = set(meta) & set(FORECAST_ONLY_KEYS)
        if stray:
            found.append(f"forecast off beside {sorted(stray)}")
    for i, trig in enumerate(spec["triggers"]):
        m = trig.get("metadata") or {}
        ceiling = metric_ceiling(str(m.get("query", "")))
        if ceiling is not None:
            for key in ("threshold", "activationThreshold"):
                if key in m and not 0.0 <= float(m[key]) <= ceiling:
                    found.append(f"triggers[{i}].{key} {m[key]} outside [0, {ceiling}]")
            if float(m.get("threshold", 1.0)) <= 0.0:
                found.append(f"triggers[{i}].threshold must be above 0")
    found.extend(window_notes(doc))
    return found


@pytest.mark.parametrize("name", [n for n in SIDES if n != "user"])
def test_every_sides_tuned_block_passes_the_keda_crd_schema_and_contradicts_nothing(
    name: str,
) -> None:
    """Twenty random settings of each side, pasted with the names and
    addresses a team gives: each block is a ScaledObject KEDA's CRD accepts
    (unknown fields refused, as a strict apply would) and none of its fields
    says something another contradicts."""
    side = _sides()[name]
    request = _request(
        name="llama", namespace="llm", target_name="vllm-llama",
        prometheus_address="http://prometheus-operated.monitoring:9090", model="m",
        scaler_address=DEFAULT_SCALER_ADDRESS,
    )  # fmt: skip
    for seed in range(20):
        doc, missing = paste_manifest(request, _tuned(side, seed))
        problems = validate_object(doc, _crds())
        assert not problems, (name, seed, [str(p) for p in problems])
        assert _contradictions(doc) == [], (name, seed)
        assert (doc["metadata"]["name"], doc["metadata"]["namespace"]) == ("llama", "llm")
        assert doc["spec"]["scaleTargetRef"]["name"] == "vllm-llama"
        # only the simulator's gateway series is left to write, where it is read
        assert all(note.startswith("the gateway's request rate") for note in missing), missing


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), forecast_off=st.booleans())
def test_no_sampled_setting_writes_contradicting_fields(seed: int, forecast_off: bool) -> None:
    """Whatever the sampler draws, on every side, with ``forecast: off``
    held or not: one scale-in wait beside prescaler's trigger, a fallback at
    or above the floor agreeing with ``fallbackReplicas``, no forecast-only
    key beside ``forecast: off``, every KV-cache threshold within (0, 1],
    every cron window above the floor."""
    sides = _sides(forecaster="off") if forecast_off else _sides()
    for name, side in sides.items():
        doc = _tuned(side, seed)
        assert _contradictions(doc) == [], (name, seed)
        meta = _prescaler_meta(doc)
        if forecast_off and meta is not None:
            assert meta["forecast"] == "off"
            assert not {p.key for p in side.space} & set(FORECAST_ONLY_KEYS), name


def test_a_kv_cache_threshold_is_searched_within_its_fraction() -> None:
    """avg(vllm:kv_cache_usage_perc) reads 0 to 1: the threshold (and the
    activation, at a floor of 0) are searched in (0, 1], never at 5.4; a
    queue length has no ceiling and keeps its eight-times range."""
    assert metric_ceiling("avg(vllm:kv_cache_usage_perc)") == 1.0
    assert metric_ceiling('max(vllm:gpu_cache_usage_perc{model_name="m"})') == 1.0
    assert metric_ceiling("sum(vllm:kv_cache_usage_perc)") is None  # a sum across replicas
    assert metric_ceiling("sum(vllm:num_requests_waiting)") is None
    for name in ("keda-queue-kv", "keda-queue-kv-cron", "keda-gateway-cron"):
        side = _sides()[name]
        for t, p in _threshold_params(side):
            query = str(t["metadata"]["query"])
            if any(m in query for m in FRACTION_METRICS):
                assert p.low >= 0.0 and 0.0 < p.high <= 1.0, (name, p)
            else:
                assert p.high > 1.0, (name, p)


def _threshold_params(side: Side) -> list[tuple[Mapping[str, Any], Any]]:
    triggers = side.manifest["spec"]["triggers"]
    return [
        (triggers[int(p.key.split(".")[1])], p)
        for p in side.space
        if p.key.endswith(("threshold", "Threshold")) and p.key.startswith("triggers.")
    ]


def test_a_user_kv_threshold_above_its_range_is_searched_inside_it() -> None:
    """A user who wrote 5.4 on the KV-cache fraction (a threshold that never
    fires) gets a search within (0, 1], not around 5.4."""
    from simulations.autoscaling.scaledobject import parse_scaledobject

    doc = yaml.safe_load(
        "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: mine}\n"
        "spec:\n  scaleTargetRef: {name: vllm}\n  minReplicaCount: 0\n  maxReplicaCount: 6\n"
        "  triggers:\n  - type: prometheus\n    metadata:\n"
        "      serverAddress: http://prom:9090\n      query: avg(vllm:kv_cache_usage_perc)\n"
        "      threshold: '5.4'\n"
    )
    so = parse_scaledobject(yaml.safe_dump(doc))
    params = {p.key: p for p in trigger_space(so, 6, activation=True)}
    assert params["triggers.0.threshold"].high == 1.0
    assert params["triggers.0.activationThreshold"].high == 1.0


def test_every_sampled_cron_window_holds_more_than_the_floor() -> None:
    """A cron window's replicas are drawn above the floor the same trial
    drew (a window at or below it holds nothing the floor does not)."""
    for name in ("keda-queue-kv-cron", "keda-gateway-cron", "prescaler-cron"):
        side = _sides()[name]
        floor_key = "minReplicas" if name.startswith("prescaler") else "spec.minReplicaCount"
        study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=7))
        for _ in range(40):
            setting = sample_metadata(study.ask(), side.space, side.max_replicas)
            window = next(v for k, v in setting.items() if k.endswith(".desiredReplicas"))
            assert int(window) > int(setting[floor_key]), (name, setting)


def test_without_names_the_block_says_what_is_still_to_set() -> None:
    """No --scaledobject and no name flags: the simulator's names are
    printed and each is listed, with the flag that sets it; the shipped
    Prometheus placeholder too, on prescaler's trigger and KEDA's."""
    for name in ("prescaler", "keda-queue-kv"):
        _, missing = paste_manifest(_request(), _sides()[name].manifest)
        said = " | ".join(missing)
        for needed in ("metadata.name", "--name", "scaleTargetRef.name", "--target-name",
                       "--namespace", "--prometheus-address"):  # fmt: skip
            assert needed in said, (name, needed)
    _, missing = paste_manifest(_request(), _sides()["prescaler"].manifest)
    assert any(n.startswith("scalerAddress") for n in missing)
    assert any(n.startswith("model:") for n in missing)


@pytest.mark.parametrize(
    "url",
    ["http://localhost:9090", "http://127.0.0.1:9090", "http://[::1]:9090",
     "http://127.3.2.1:19090/", "http://0.0.0.0:9090", "localhost:9090"],
)  # fmt: skip
def test_a_port_forward_address_is_flagged_on_every_trigger(url: str) -> None:
    """A Prometheus read through a port-forward is written (it is what tune
    read) and flagged: in the cluster that address names the reading pod."""
    assert is_loopback(url)
    for name in ("prescaler", "keda-queue-kv"):
        doc, missing = paste_manifest(_request(prometheus=url), _sides()[name].manifest)
        flagged = [n for n in missing if url in n and "prometheus-operated.monitoring" in n]
        assert len(flagged) == 1, (name, missing)
        written = [
            t["metadata"].get("prometheusAddress") or t["metadata"].get("serverAddress")
            for t in doc["spec"]["triggers"]
        ]
        assert set(written) == {url}


@pytest.mark.parametrize(
    "url", ["http://prometheus-operated.monitoring:9090", "http://10.0.0.7:9090", "prom:9090"]
)
def test_an_in_cluster_address_is_not_flagged(url: str) -> None:
    assert not is_loopback(url)
    _, missing = paste_manifest(_request(prometheus_address=url), _sides()["prescaler"].manifest)
    assert not any("Prometheus's Service address" in n for n in missing)


def test_the_users_scaledobject_names_every_sides_block(tmp_path: Path) -> None:
    """--scaledobject: every side's block takes the user's name, namespace,
    target and Prometheus; a flag given beside it wins."""
    from simulations.tune.manifest import load_manifest

    path = tmp_path / "so.yaml"
    path.write_text(
        "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\n"
        "metadata: {name: chat, namespace: llm}\n"
        "spec:\n  scaleTargetRef: {kind: Deployment, name: vllm-chat}\n"
        "  minReplicaCount: 1\n  maxReplicaCount: 6\n"
        "  triggers:\n  - type: prometheus\n    metadata:\n"
        "      serverAddress: http://kps-prometheus.monitoring:9090\n"
        "      query: sum(vllm:num_requests_waiting)\n      threshold: '3'\n"
    )
    user = load_manifest(path)
    request = _request(scaledobject=str(path))
    for name in ("prescaler", "keda-queue-kv", "keda-gateway"):
        doc, missing = paste_manifest(request, _sides()[name].manifest, user)
        assert doc["metadata"] == {"name": "chat", "namespace": "llm"}
        assert doc["spec"]["scaleTargetRef"] == {"kind": "Deployment", "name": "vllm-chat"}
        addresses = {
            t["metadata"].get("prometheusAddress") or t["metadata"].get("serverAddress")
            for t in doc["spec"]["triggers"]
        }
        assert addresses == {"http://kps-prometheus.monitoring:9090"}
        said = " | ".join(missing)
        assert "metadata.name" not in said and "scaleTargetRef" not in said
        assert "placeholder" not in said
    doc, _ = paste_manifest(
        _request(scaledobject=str(path), name="chat-tuned"), _sides()["prescaler"].manifest, user
    )
    assert doc["metadata"]["name"] == "chat-tuned"


def test_a_window_below_the_floor_is_said_to_change_nothing() -> None:
    doc = apply_to_manifest(
        _sides()["keda-queue-kv-cron"].manifest,
        {"spec.minReplicaCount": "3", "triggers.2.desiredReplicas": "2"},
    )
    notes = window_notes(doc)
    assert len(notes) == 1 and "not above the floor of 3" in notes[0]


def test_a_mixed_manifest_writes_the_prometheus_address_on_every_trigger() -> None:
    """A prescaler trigger followed by a KEDA prometheus trigger (a user's
    --scaledobject as prescaler's base): --prometheus-address lands on both,
    the prometheus trigger's ``serverAddress`` too."""
    mixed = yaml.safe_load(
        "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: mixed}\n"
        "spec:\n  scaleTargetRef: {name: vllm}\n  minReplicaCount: 1\n  maxReplicaCount: 6\n"
        "  triggers:\n  - type: external\n    metadata:\n"
        "      scalerAddress: prescaler:9090\n      prometheusAddress: http://prometheus:9090\n"
        "      minReplicas: '1'\n      maxReplicas: '6'\n"
        "  - type: prometheus\n    metadata:\n      serverAddress: http://prometheus:9090\n"
        "      query: sum(vllm:num_requests_waiting)\n      threshold: '3'\n"
    )
    url = "http://prometheus-operated.monitoring:9090"
    doc, missing = paste_manifest(_request(prometheus_address=url), mixed)
    triggers = doc["spec"]["triggers"]
    assert triggers[0]["metadata"]["prometheusAddress"] == url
    assert triggers[1]["metadata"]["serverAddress"] == url
    assert not any("placeholder" in n for n in missing), missing


def test_a_kv_fraction_scaled_to_percent_is_not_capped_at_one() -> None:
    """Only a plain avg/max/min of the 0-1 metric reads at most 1: the
    same metric times 100 (a 0-100 signal) or with other arithmetic on it
    has no ceiling of 1."""
    assert metric_ceiling("avg(vllm:kv_cache_usage_perc)") == 1.0
    assert metric_ceiling('min(vllm:cpu_cache_usage_perc{model_name="m"})') == 1.0
    assert metric_ceiling("max by (pod) (vllm:gpu_cache_usage_perc)") == 1.0
    assert metric_ceiling("avg(vllm:kv_cache_usage_perc) * 100") is None
    assert metric_ceiling("100 * max(vllm:kv_cache_usage_perc)") is None
    assert metric_ceiling("avg(vllm:kv_cache_usage_perc * 100)") is None
    assert metric_ceiling("avg(vllm:kv_cache_usage_perc) / 0.8") is None
    assert metric_ceiling("avg(vllm:kv_cache_usage_perc) + avg(vllm:num_requests_waiting)") is None
