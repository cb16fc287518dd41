"""ScaledObject manifests -> simulator policies (simulations.autoscaling.scaledobject)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from decision.settings import SettingsError, parse_settings
from simulations.autoscaling.hpa_config import HpaBehavior
from simulations.autoscaling.scaledobject import (
    PromQuery,
    load_scaledobject,
    parse_query,
    parse_scaledobject,
    prescaler_scaledobject,
    seeds_reactive,
)

DATA = Path(__file__).resolve().parents[1] / "data"
REPO = Path(__file__).resolve().parents[3]
BLOG_A = DATA / "eks-vllm-keda-blog-a.yaml"
BLOG_B = DATA / "eks-vllm-keda-blog-b.yaml"
GPU_MANIFEST = REPO / "manifests" / "vllm" / "gpu" / "scaledobject.yaml"

BEHAVIOR = {
    "scaleUp": {
        "stabilizationWindowSeconds": 0,
        "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
    },
    "scaleDown": {
        "stabilizationWindowSeconds": 300,
        "policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}],
    },
}


def _doc(**spec_overrides: object) -> dict[str, object]:
    spec: dict[str, object] = {
        "scaleTargetRef": {"name": "vllm"},
        "triggers": [
            {
                "type": "prometheus",
                "metadata": {"query": "sum(vllm:num_requests_waiting)", "threshold": "3"},
            }
        ],
    }
    spec.update(spec_overrides)
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "so"},
        "spec": spec,
    }


def _parse(doc: dict[str, object]):  # type: ignore[no-untyped-def]
    return parse_scaledobject(yaml.safe_dump(doc))


@pytest.mark.parametrize(("path", "min_count"), [(BLOG_A, 2), (BLOG_B, 1)], ids=["a", "b"])
def test_blog_scaledobjects_load_as_published(path: Path, min_count: int) -> None:
    """The queue-length ScaledObjects of two public EKS + vLLM + KEDA + Karpenter
    write-ups load unchanged: prometheus trigger on sum(vllm:num_requests_waiting)
    with threshold 3 as an AverageValue target (keda.sh docs, prometheus scaler)."""
    so = load_scaledobject(path)
    assert so.trigger.kind == "prometheus"
    assert so.trigger.query is not None
    assert so.trigger.query.aggregation == "sum"
    assert so.trigger.query.metric == "vllm:num_requests_waiting"
    assert so.trigger.query.rate_window_s is None
    assert so.trigger.threshold == 3.0
    assert so.hpa.target == 3.0 and so.hpa.target_type == "AverageValue"
    assert so.keda.polling_interval_s == 15.0 and so.keda.cooldown_period_s == 300.0
    assert so.keda.min_replica_count == min_count and so.keda.max_replica_count == 10
    assert so.hpa.min_replicas == min_count and so.hpa.max_replicas == 10
    assert so.hpa.behavior == HpaBehavior.from_spec(BEHAVIOR)
    assert so.behavior_spec == BEHAVIOR
    assert not so.push


def test_repo_manifest_loads_as_a_prescaler_policy() -> None:
    """The project's own ScaledObject (manifests/vllm/gpu) is an external trigger
    whose metadata parses with the live scaler's parse_settings; the HPA target
    is 1 replica per unit of the metric (AverageValue), and fallback is kept."""
    so = load_scaledobject(GPU_MANIFEST)
    raw = yaml.safe_load(GPU_MANIFEST.read_text())
    meta = raw["spec"]["triggers"][0]["metadata"]
    assert so.trigger.kind == "prescaler"
    assert so.trigger.settings == parse_settings(meta)
    assert so.trigger.query is None and so.trigger.threshold is None
    assert so.hpa.target == 1.0 and so.hpa.target_type == "AverageValue"
    assert so.keda.min_replica_count == raw["spec"]["minReplicaCount"]
    assert so.keda.max_replica_count == raw["spec"]["maxReplicaCount"]
    assert so.keda.fallback_failure_threshold == 4 and so.keda.fallback_replicas == 4
    assert so.keda.fallback_behavior == "currentReplicasIfHigher"
    assert not so.push


def test_seeds_reactive_is_the_published_baseline() -> None:
    """seeds_reactive(): sum(vllm:num_requests_waiting) > 3, polling 15 s, cooldown
    300 s, up 100 %/15 s (window 0), down 10 %/60 s (window 300 s), 1..10."""
    so = seeds_reactive()
    assert so.trigger.query == PromQuery("sum", "vllm:num_requests_waiting", None, "")
    assert so.trigger.threshold == 3.0
    assert so.keda.polling_interval_s == 15.0 and so.keda.cooldown_period_s == 300.0
    assert (so.hpa.min_replicas, so.hpa.max_replicas) == (1, 10)
    assert so.hpa.behavior == HpaBehavior.from_spec(BEHAVIOR)
    assert seeds_reactive(max_replicas=24).hpa.max_replicas == 24
    with pytest.raises(ValueError, match="max_replicas"):
        seeds_reactive(max_replicas=0)


def test_keda_defaults_apply() -> None:
    """Absent fields take KEDA's defaults (keda.sh ScaledObject spec): polling 30 s,
    cooldown 300 s, min 0, max 100; the HPA's min is 1 when minReplicaCount is 0
    (kedacore/keda controllers/keda/hpa.go); no behavior means the HPA's own."""
    so = _parse(_doc())
    assert so.keda.polling_interval_s == 30.0 and so.keda.cooldown_period_s == 300.0
    assert so.keda.min_replica_count == 0 and so.keda.max_replica_count == 100
    assert so.keda.initial_cooldown_period_s == 0.0 and so.keda.idle_replica_count is None
    assert so.hpa.min_replicas == 1 and so.hpa.max_replicas == 100
    assert so.hpa.behavior is None and so.behavior_spec is None


def test_optional_fields_are_read() -> None:
    """initialCooldownPeriod, idleReplicaCount, fallback, metricType Value and
    activationThreshold are carried into the configs."""
    doc = _doc(
        minReplicaCount=2,
        idleReplicaCount=0,
        initialCooldownPeriod=120,
        fallback={"failureThreshold": 3, "replicas": 5},
        triggers=[
            {
                "type": "prometheus",
                "metricType": "Value",
                "metadata": {
                    "query": "max(vllm:kv_cache_usage_perc{model_name='x'})",
                    "threshold": "0.8",
                    "activationThreshold": "0.1",
                },
            }
        ],
    )
    so = _parse(doc)
    assert so.keda.idle_replica_count == 0 and so.keda.initial_cooldown_period_s == 120.0
    assert so.keda.fallback_failure_threshold == 3 and so.keda.fallback_replicas == 5
    assert so.keda.fallback_behavior == "static"
    assert so.hpa.target_type == "Value" and so.hpa.target == 0.8
    assert so.trigger.activation_threshold == 0.1
    assert so.trigger.query == PromQuery("max", "vllm:kv_cache_usage_perc", None, "model_name='x'")


def test_external_push_sets_push() -> None:
    """external-push is the prescaler trigger with KEDA's push stream on."""
    doc = _doc(
        triggers=[
            {"type": "external-push", "metadata": {"prometheusAddress": "http://prometheus:9090"}}
        ]
    )
    so = _parse(doc)
    assert so.push and so.trigger.kind == "prescaler"


def test_bad_prescaler_metadata_fails_like_the_live_scaler() -> None:
    """Prescaler metadata is parsed by decision.settings.parse_settings: the same
    SettingsError, naming the same key, as the running scaler would give."""
    meta = {"prometheusAddress": "http://prometheus:9090", "targetKvCacheUsage": "2"}
    doc = _doc(triggers=[{"type": "external", "metadata": meta}])
    with pytest.raises(SettingsError) as caught:
        _parse(doc)
    with pytest.raises(SettingsError) as live:
        parse_settings(meta)
    assert str(caught.value) == str(live.value)
    assert caught.value.key == "targetKvCacheUsage"


def test_prescaler_scaledobject_builds_from_metadata() -> None:
    """prescaler_scaledobject() builds the same policy a manifest would, with
    KEDA's replica bounds taken from the metadata's minReplicas/maxReplicas."""
    meta = {"prometheusAddress": "http://p:9090", "minReplicas": "0", "maxReplicas": "12"}
    so = prescaler_scaledobject(meta, push=True, behavior=BEHAVIOR)
    assert so.push and so.trigger.kind == "prescaler"
    assert so.keda.min_replica_count == 0 and so.keda.max_replica_count == 12
    assert so.keda.polling_interval_s == 15.0
    assert so.hpa.min_replicas == 1 and so.hpa.target == 1.0
    assert so.hpa.behavior == HpaBehavior.from_spec(BEHAVIOR)
    with pytest.raises(SettingsError):
        prescaler_scaledobject({"prometheusAddress": "http://p:9090", "maxReplicas": "x"})


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("sum(vllm:num_requests_waiting)", PromQuery("sum", "vllm:num_requests_waiting")),
        (
            'avg( vllm:num_requests_running{namespace="a", app="b"} )',
            PromQuery("avg", "vllm:num_requests_running", None, 'namespace="a", app="b"'),
        ),
        (
            "sum(rate(vllm:request_success_total{app='x'}[2m]))",
            PromQuery("sum", "vllm:request_success_total", 120.0, "app='x'"),
        ),
        (
            "sum(rate(vllm:prompt_tokens_total[1m30s]))\n",
            PromQuery("sum", "vllm:prompt_tokens_total", 90.0, ""),
        ),
    ],
)
def test_supported_queries_parse(query: str, expected: PromQuery) -> None:
    """The supported query shapes (Prometheus querying docs: aggregation
    operators, rate() over a range vector) parse into their parts."""
    assert parse_query(query) == expected


@pytest.mark.parametrize(
    "query",
    [
        "sum(vllm:num_requests_waiting) > 3",
        "sum by (pod) (vllm:num_requests_waiting)",
        "min(vllm:num_requests_waiting)",
        "sum(container_cpu_usage_seconds_total)",
        "sum(rate(vllm:num_requests_waiting[1m]))",
        "sum(vllm:request_success_total)",
        "avg(rate(vllm:request_success_total[1m]))",
        "sum(rate(vllm:request_success_total[1x]))",
        "histogram_quantile(0.9, sum(rate(vllm:e2e_request_latency_seconds_bucket[1m])) by (le))",
    ],
)
def test_unsupported_queries_are_refused(query: str) -> None:
    """Queries the simulator cannot emulate faithfully are refused with a message
    naming what is supported, never approximated."""
    with pytest.raises(ValueError, match=r"supported|range"):
        parse_query(query)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"triggers": [{"type": "cpu", "metadata": {"value": "50"}}]},
            "trigger type 'cpu' is not supported; supported: external, external-push, prometheus, "
            "cron",
        ),
        ({"triggers": []}, "spec.triggers must be a non-empty list"),
        (
            {
                "triggers": [
                    {"type": "prometheus", "metadata": {"query": "sum(vllm:num_requests_waiting)"}}
                ]
            },
            "threshold",
        ),
        (
            {
                "triggers": [
                    {
                        "type": "prometheus",
                        "metadata": {"query": "sum(vllm:num_requests_waiting)", "threshold": 3},
                    }
                ]
            },
            "must be a string",
        ),
        (
            {
                "triggers": [
                    {
                        "type": "prometheus",
                        "metadata": {"query": "sum(vllm:num_requests_waiting)", "threshold": "0"},
                    }
                ]
            },
            "threshold",
        ),
        (
            {
                "triggers": [
                    {
                        "type": "prometheus",
                        "metricType": "Utilization",
                        "metadata": {"query": "sum(vllm:num_requests_waiting)", "threshold": "3"},
                    }
                ]
            },
            "metricType",
        ),
        (
            {
                "triggers": [
                    {
                        "type": "external",
                        "metricType": "Value",
                        "metadata": {"prometheusAddress": "http://p:9090"},
                    }
                ]
            },
            "AverageValue",
        ),
        ({"minReplicaCount": 5, "maxReplicaCount": 2}, "maxReplicaCount"),
        ({"minReplicaCount": 1, "idleReplicaCount": 1}, "idleReplicaCount"),
        ({"pollingInterval": 0}, "pollingInterval"),
        ({"cooldownPeriod": -1}, "cooldownPeriod"),
        ({"fallback": {"failureThreshold": 3}}, "fallback.replicas"),
        (
            {"fallback": {"failureThreshold": 3, "replicas": 2, "behavior": "sometimes"}},
            "fallback.behavior",
        ),
        ({"advanced": {"scalingModifiers": {"formula": "x"}}}, "scalingModifiers"),
        ({"jobTargetRef": {}}, "spec.jobTargetRef"),
    ],
)
def test_unsupported_or_invalid_specs_are_refused(
    overrides: dict[str, object], message: str
) -> None:
    """Anything the simulator does not model, or KEDA would reject (keda.sh
    ScaledObject spec; CheckReplicaCountBoundsAreValid), is a ValueError naming it."""
    with pytest.raises(ValueError, match=re.escape(message)):
        _parse(_doc(**overrides))


def test_file_must_hold_exactly_one_scaledobject(tmp_path: Path) -> None:
    """A file with several documents is fine if exactly one is a ScaledObject;
    none, or two, is an error; so is a ScaledJob or broken YAML."""
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}
    path = tmp_path / "all.yaml"
    path.write_text(yaml.safe_dump_all([deployment, _doc()]))
    assert load_scaledobject(path).name == "so"
    path.write_text(yaml.safe_dump_all([deployment]))
    with pytest.raises(ValueError, match="exactly one ScaledObject, found 0"):
        load_scaledobject(path)
    path.write_text(yaml.safe_dump_all([_doc(), _doc()]))
    with pytest.raises(ValueError, match="found 2"):
        load_scaledobject(path)
    path.write_text("spec: [unclosed")
    with pytest.raises(ValueError, match="not valid YAML"):
        load_scaledobject(path)
    with pytest.raises(ValueError, match="cannot read"):
        load_scaledobject(tmp_path / "missing.yaml")


# -- several triggers, cron, scalingModifiers ------------------------------------

QUEUE = {
    "type": "prometheus",
    "name": "queue",
    "metadata": {"query": "sum(vllm:num_requests_waiting)", "threshold": "3"},
}
KV = {
    "type": "prometheus",
    "name": "kv",
    "metricType": "Value",
    "metadata": {"query": "avg(vllm:kv_cache_usage_perc)", "threshold": "0.8"},
}
CRON = {
    "type": "cron",
    "name": "day",
    "metadata": {
        "timezone": "UTC",
        "start": "0 8 * * *",
        "end": "0 20 * * *",
        "desiredReplicas": "4",
    },
}


def test_each_trigger_is_one_hpa_metric_with_its_own_target() -> None:
    """controllers/keda/hpa.go: one External metric per trigger, target = the
    trigger's threshold (prometheus) or 1 (cron), metricType per trigger."""
    so = _parse(_doc(triggers=[QUEUE, KV, CRON]))
    assert so.trigger.name == "queue" and [t.name for t in so.extra_triggers] == ["kv", "day"]
    assert [(m.target_type, m.target) for m in so.hpa.metrics] == [
        ("AverageValue", 3.0),
        ("Value", 0.8),
        ("AverageValue", 1.0),
    ]
    assert so.hpa.target == 3.0 and so.hpa.target_type == "AverageValue"


def test_scaling_modifiers_give_one_composite_metric() -> None:
    so = _parse(
        _doc(
            triggers=[QUEUE, KV],
            advanced={
                "scalingModifiers": {
                    "formula": "kv > 0.9 ? queue : queue / 2",
                    "target": "2",
                    "activationTarget": "0.5",
                    "metricType": "Value",
                }
            },
        )
    )
    assert so.modifiers is not None and so.modifiers.formula.names == {"queue", "kv"}
    assert [(m.target_type, m.target) for m in so.hpa.metrics] == [("Value", 2.0)]
    assert so.modifiers.activation_target == 0.5


def test_the_start_annotation_sets_the_cron_wall_clock() -> None:
    """simulation.prescaler.io/start: t = 0 at 07:30 UTC puts 08:00 at t = 1800 s."""
    doc = _doc(triggers=[CRON])
    doc["metadata"] = {
        "name": "so",
        "annotations": {"simulation.prescaler.io/start": "2024-03-04T07:30:00Z"},
    }
    cron = _parse(doc).trigger.cron
    assert cron is not None
    assert not cron.inside(1799.0) and cron.inside(1800.0)
    doc["metadata"] = {"name": "so", "annotations": {"simulation.prescaler.io/start": "1709537400"}}
    cron = _parse(doc).trigger.cron
    assert cron is not None and cron.inside(1800.0)


@pytest.mark.parametrize(
    ("triggers", "extra", "message"),
    [
        ([QUEUE, {**KV, "name": "queue"}], {}, "trigger names must be unique"),
        ([QUEUE, {**CRON, "useCachedMetrics": True}], {}, "triggers[1]: useCachedMetrics"),
        (
            [{**CRON, "metadata": {**CRON["metadata"], "end": "0 8 * * *"}}],  # type: ignore[dict-item]
            {},
            "same time",
        ),
        (
            [{**CRON, "metadata": {**CRON["metadata"], "timezone": "Nowhere/Land"}}],  # type: ignore[dict-item]
            {},
            "IANA",
        ),
        (
            [{**QUEUE, "metadata": {**QUEUE["metadata"], "ignoreNullValues": "maybe"}}],  # type: ignore[dict-item]
            {},
            "ignoreNullValues",
        ),
        ([{**QUEUE, "authenticationRef": {"name": "x"}}], {}, "'authenticationRef'"),
        (
            [QUEUE],
            {"advanced": {"scalingModifiers": {"formula": "queue"}}},
            "needs formula and target",
        ),
        (
            [QUEUE],
            {"metadata": {"name": "so", "annotations": {"simulation.prescaler.io/start": "soon"}}},
            "neither ISO 8601 nor Unix seconds",
        ),
    ],
)
def test_bad_trigger_sets_name_the_trigger(
    triggers: list[object], extra: dict[str, object], message: str
) -> None:
    doc = _doc(triggers=triggers)
    if "metadata" in extra:
        doc["metadata"] = extra["metadata"]
    else:
        doc["spec"].update(extra)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=re.escape(message)):
        _parse(doc)
