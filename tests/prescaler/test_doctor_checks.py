"""``prescaler doctor``'s pure parts: the inputs it reads and each check's verdict.

The live test (``test_doctor_live.py``) runs them against a real Prometheus
and a real scaler; here each verdict is pinned on plain values, with
hypothesis for the rules that must hold whatever the numbers.
"""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from prescaler.doctor.checks import (
    DEMAND_FLOOR,
    Finding,
    QueryData,
    ScalerAnswer,
    check_answer,
    check_bounds,
    check_hpa,
    check_max,
    check_movement,
    check_query,
    exit_code,
    moved,
)
from prescaler.doctor.inputs import (
    HpaMetric,
    HpaView,
    InputError,
    ObjectView,
    TriggerView,
    parse_hpa,
    parse_quantity,
    parse_scaledobject,
)

PRESCALER = TriggerView(0, "external", "prescaler", {"scalerAddress": "prescaler:9090"})
QUEUE = TriggerView(1, "prometheus", "queue", {"query": "sum(x)", "threshold": "3"})


def obj(lo: int = 1, hi: int = 16) -> ObjectView:
    return ObjectView("so", "llm", lo, hi, (PRESCALER,), "keda-hpa-so")


# ---------------------------------------------------------------- inputs


@given(st.integers(min_value=0, max_value=10**9))
def test_milli_quantities_read_back(n: int) -> None:
    assert parse_quantity(f"{n}m") == pytest.approx(n / 1000)
    assert parse_quantity(str(n)) == n


@pytest.mark.parametrize(("text", "value"), [("1.5k", 1500.0), ("2Ki", 2048.0), ("250u", 2.5e-4)])
def test_quantity_suffixes(text: str, value: float) -> None:
    assert parse_quantity(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "m", "1x", "1e999", "abc"])
def test_bad_quantity_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity(text)


SO = {
    "apiVersion": "keda.sh/v1alpha1",
    "kind": "ScaledObject",
    "metadata": {"name": "vllm", "namespace": "ml"},
    "spec": {
        "scaleTargetRef": {"name": "vllm"},
        "triggers": [
            {"type": "prometheus", "metadata": {"query": "sum(x)", "threshold": "3"}},
            {
                "type": "external",
                "name": "prescaler",
                "metadata": {"prometheusAddress": "http://p"},
            },
        ],
    },
}


def test_scaledobject_defaults_are_kedas() -> None:
    view = parse_scaledobject(yaml.safe_dump(SO), "so.yaml")
    assert (view.min_replicas, view.max_replicas) == (0, 100)
    assert not view.min_given and not view.max_given
    assert view.hpa_name == "keda-hpa-vllm"
    assert [t.is_prescaler for t in view.triggers] == [False, True]
    assert view.triggers[0].label == "prometheus#0"


def test_scaledobject_in_a_list_and_picked_by_name() -> None:
    other = json.loads(json.dumps(SO))
    other["metadata"]["name"] = "other"
    text = yaml.safe_dump({"kind": "List", "items": [SO, other]})
    with pytest.raises(InputError, match=r"several ScaledObjects .*--name"):
        parse_scaledobject(text, "f")
    assert parse_scaledobject(text, "f", "other").name == "other"


def test_named_hpa_from_the_advanced_config() -> None:
    so = json.loads(json.dumps(SO))
    so["spec"]["advanced"] = {"horizontalPodAutoscalerConfig": {"name": "mine"}}
    assert parse_scaledobject(yaml.safe_dump(so), "f").hpa_name == "mine"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: Deployment\n", "no ScaledObject"),
        ("kind: ScaledObject\nmetadata: {name: x}\nspec: {triggers: []}\n", "spec.triggers"),
        (
            "kind: ScaledObject\nmetadata: {name: x}\n"
            "spec: {maxReplicaCount: -1, triggers: [{type: cpu}]}\n",
            "maxReplicaCount must be a non-negative integer",
        ),
        ("{", "not YAML"),
    ],
)
def test_bad_scaledobject_is_one_line(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_scaledobject(text, "f")


def test_hpa_status_read() -> None:
    hpa = {
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "keda-hpa-so"},
        "spec": {"maxReplicas": 8, "minReplicas": 1},
        "status": {
            "currentReplicas": 4,
            "desiredReplicas": 8,
            "currentMetrics": [
                {"type": "Resource", "resource": {"name": "cpu"}},
                {
                    "type": "External",
                    "external": {
                        "metric": {"name": "s0-prescaler-desired-replicas"},
                        "current": {"averageValue": "2500m"},
                    },
                },
            ],
            "conditions": [
                {"type": "ScalingLimited", "status": "True", "reason": "TooManyReplicas"}
            ],
        },
    }
    view = parse_hpa(json.dumps(hpa), "hpa.json", "keda-hpa-so")
    assert view.metric("s0-prescaler-desired-replicas") == HpaMetric(
        "s0-prescaler-desired-replicas", None, 2.5
    )
    assert view.conditions["ScalingLimited"][:2] == ("True", "TooManyReplicas")
    with pytest.raises(
        InputError, match=r"no HorizontalPodAutoscaler 'other' \(found: keda-hpa-so"
    ):
        parse_hpa(json.dumps(hpa), "hpa.json", "other")


# ---------------------------------------------------------------- checks


@given(st.lists(st.sampled_from(["OK", "WARN", "FAIL"]), max_size=8))
def test_exit_code_is_1_exactly_when_a_check_failed(levels: list[str]) -> None:
    findings = [Finding(lvl, "c", "t", "x") for lvl in levels]  # type: ignore[arg-type]
    assert exit_code(findings) == (1 if "FAIL" in levels else 0)


@given(st.integers(0, 50), st.integers(0, 50), st.integers(0, 50), st.integers(0, 50))
def test_bounds_ok_only_when_equal_and_fail_when_capped_below(
    so_lo: int, so_span: int, lo: int, span: int
) -> None:
    view = obj(so_lo, so_lo + so_span + 1)
    hi = lo + span + 1
    finding = check_bounds(view, PRESCALER, lo, hi)
    assert (finding.level == "OK") == ((lo, hi) == (view.min_replicas, view.max_replicas))
    if hi < view.max_replicas:
        assert finding.level == "FAIL" and "never grows past" in finding.cause
    if finding.level != "OK":
        assert "components/replica-bounds" in finding.fix


def test_bounds_min_above_zero_blocks_scale_to_zero() -> None:
    finding = check_bounds(obj(0, 16), PRESCALER, 1, 16)
    assert finding.level == "FAIL" and "never scales to zero" in finding.cause


finite = st.floats(min_value=0, max_value=1e4, allow_nan=False)


@given(st.lists(finite, min_size=3, max_size=40), st.floats(0, 50, allow_nan=False))
def test_flat_answer_warns_exactly_when_demand_moved(demand: list[float], held: float) -> None:
    """Without the scaler's own view of demand a flat answer is no proof of a
    fault (demand may fit in minReplicas): a warning, never a failure."""
    d = [(float(i), v) for i, v in enumerate(demand)]
    a = [(float(i), held) for i in range(len(demand))]
    finding = check_movement(PRESCALER, d, a, 3600, "demand", "answer")
    assert finding.level != "FAIL"
    assert (finding.level == "WARN") == moved(demand)


@given(st.lists(st.floats(0.1, 1e3, allow_nan=False), min_size=3, max_size=40))
def test_scaler_seeing_nothing_of_the_fleet_fails(demand: list[float]) -> None:
    d = [(float(i), v) for i, v in enumerate(demand)]
    a = [(float(i), 1.0) for i in range(len(demand))]
    blind = check_movement(PRESCALER, d, a, 3600, "demand", "answer", seen=[(0.0, 0.0)] * 3)
    assert blind.level == "FAIL" and "the scaler saw 0 req/s" in blind.cause
    # seeing what the fleet served never fails, whatever the answer did
    sighted = check_movement(PRESCALER, d, a, 3600, "demand", "answer", seen=d)
    assert sighted.level == "OK"


@given(st.lists(finite, min_size=3, max_size=40))
def test_a_moving_answer_never_fails(demand: list[float]) -> None:
    d = [(float(i), v) for i, v in enumerate(demand)]
    a = [(0.0, 1.0), (1.0, 2.0)]
    assert check_movement(PRESCALER, d, a, 3600, "demand", "answer").level == "OK"


@given(st.floats(0, 1e4, allow_nan=False), st.integers(2, 30))
def test_steady_demand_never_moved(level: float, n: int) -> None:
    assert not moved([level] * n)
    assert not moved([level, level + DEMAND_FLOOR / 2] * n)


def test_no_answer_history_is_a_warning_for_the_scaler_and_a_failure_for_a_query() -> None:
    d = [(0.0, 1.0), (1.0, 4.0), (2.0, 1.0)]
    scaler = check_movement(PRESCALER, d, [], 3600, "demand", "prescaler_desired_replicas")
    assert scaler.level == "WARN" and "honor_labels" in scaler.fix
    query = check_movement(QUEUE, d, [], 3600, "demand", "the query", answer_is_query=True)
    assert query.level == "FAIL"


def test_a_query_with_several_series_is_read_too_much_not_nothing() -> None:
    d = [(0.0, 1.0), (1.0, 4.0), (2.0, 1.0)]
    found = check_movement(
        QUEUE, d, [], 3600, "demand", "the query", answer_is_query=True, answer_series=3
    )
    assert found.level == "FAIL" and "3 series" in found.cause, found
    assert "read nothing" not in found.cause and "sum(" in found.fix


@pytest.mark.parametrize(
    ("reasons", "level", "words"),
    [
        ({"queue": 3.0}, "OK", "from fresh data"),
        ({"queue": 1.0, "stale_hold": 2.0}, "FAIL", "stale_hold x2"),
        ({"fallback": 3.0}, "FAIL", "from held data"),
        ({"partial_hold": 3.0}, "WARN", "partial_hold"),
        ({}, "WARN", "no decision"),
    ],
)
def test_answer_freshness(reasons: dict[str, float], level: str, words: str) -> None:
    ans = ScalerAnswer(tracked=True, value=3.0, reasons=reasons, settle_s=10)
    finding = check_answer(PRESCALER, obj(), ans)
    assert finding.level == level and words in finding.cause


def test_untracked_object_and_unreadable_scaler_fail() -> None:
    untracked = check_answer(PRESCALER, obj(), ScalerAnswer(tracked=False))
    assert untracked.level == "FAIL" and "KEDA has not asked it" in untracked.cause
    unreadable = ScalerAnswer(tracked=False, error="connection refused")
    assert "cannot read the scaler" in check_answer(PRESCALER, obj(), unreadable).cause


def hpa_view(
    average: float | None, replicas: int = 2, **conditions: tuple[str, str, str]
) -> HpaView:
    metrics = (
        (HpaMetric("s0-prescaler-desired-replicas", None, average),) if average is not None else ()
    )
    return HpaView("keda-hpa-so", replicas, replicas, 1, 16, metrics, conditions)


@given(st.integers(1, 100), st.integers(1, 20))
def test_hpa_reading_the_answer_passes(answer: int, replicas: int) -> None:
    finding = check_hpa(PRESCALER, hpa_view(answer / replicas, replicas), float(answer))
    assert finding.level == "OK"


def test_hpa_mismatch_warns_and_missing_metric_fails() -> None:
    assert check_hpa(PRESCALER, hpa_view(1.0, 2), 8.0).level == "WARN"
    missing = hpa_view(
        None, ScalingActive=("False", "FailedGetExternalMetric", "unable to get external metric")
    )
    finding = check_hpa(PRESCALER, missing, 3.0)
    assert finding.level == "FAIL" and "FailedGetExternalMetric" in finding.cause


def test_max_check() -> None:
    view = obj(1, 16)
    assert check_max(PRESCALER, view, 15, 0, None, 3600).level == "OK"
    assert check_max(PRESCALER, view, 16, 0, None, 3600).level == "WARN"
    assert check_max(PRESCALER, view, 20, None, None, 3600).level == "FAIL"
    capped = check_max(PRESCALER, view, 16, 4, None, 3600)
    assert capped.level == "FAIL" and "4 decisions capped" in capped.cause
    limited = hpa_view(1.0, 16, ScalingLimited=("True", "TooManyReplicas", ""))
    assert check_max(PRESCALER, view, 10, 0, limited, 3600).level == "FAIL"


def test_keda_query_without_series_is_read_as_zero() -> None:
    empty = check_query(QUEUE, QueryData('sum(x{a="b"})', 0, None, ('x{a="b"}',)))
    assert empty.level == "FAIL" and "reads that as 0" in empty.cause and 'x{a="b"}' in empty.cause
    strict = TriggerView(1, "prometheus", "queue", {"query": "q", "ignoreNullValues": "false"})
    assert "polls fail" in check_query(strict, QueryData("q", 0, None)).cause
    assert check_query(QUEUE, QueryData("q", 2, None)).level == "FAIL"
    assert check_query(QUEUE, QueryData("q", 1, 4.0)).level == "OK"
