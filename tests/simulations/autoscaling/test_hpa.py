"""The HPA emulation against the upstream controller's rules and worked examples.

Sources: kubernetes/kubernetes pkg/controller/podautoscaler/horizontal.go
(reconcileAutoscaler, normalization, stabilization, rate limits, scale events),
pkg/controller/podautoscaler/replica_calculator.go (per-metric proposals,
tolerance) and pkg/apis/autoscaling/v2/defaults.go (behavior defaults).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulations.autoscaling.hpa import Hpa
from simulations.autoscaling.hpa_config import (
    DEFAULT_SCALE_DOWN_POLICIES,
    DEFAULT_SCALE_UP_POLICIES,
    HpaBehavior,
    HpaConfig,
    HpaMetric,
    HpaPolicy,
    HpaRules,
    quantize_milli,
)

# The seeds' behavior: fast scale-up, slow scale-down.
SEEDS_BEHAVIOR = HpaBehavior(
    scale_up=HpaRules(0.0, "Max", (HpaPolicy("Percent", 100, 15.0),)),
    scale_down=HpaRules(300.0, "Max", (HpaPolicy("Percent", 10, 60.0),)),
)


def _run(hpa: Hpa, times: list[float], spec: int, usage: float) -> list[int]:
    """Sync at each time with status == spec (pods created at once), constant usage."""
    out = []
    for t in times:
        spec = hpa.sync(t, spec=spec, status=spec, ready=spec, usage=usage)
        out.append(spec)
    return out


# -- worked examples ---------------------------------------------------------------


def test_example1_scale_up_with_behavior() -> None:
    """Percent 100/15 s doubles per sync; the t=0 event is not inside (t > now-15 is strict).

    horizontal.go calculateScaleUpLimitWithScalingRules / getReplicasChangePerPeriod.
    """
    hpa = Hpa(HpaConfig(2, 10, SEEDS_BEHAVIOR, target=3.0))
    assert _run(hpa, [0, 15, 30, 45, 60, 120], 2, 30.0) == [4, 8, 10, 10, 10, 10]


def test_example1_scale_up_legacy() -> None:
    """behavior nil: limit max(2*current, 4), same 4, 8, 10.

    horizontal.go convertDesiredReplicasWithRules / calculateScaleUpLimit.
    """
    hpa = Hpa(HpaConfig(2, 10, None, target=3.0))
    assert _run(hpa, [0, 15, 30, 45], 2, 30.0) == [4, 8, 10, 10]


def test_example2_scale_down_with_behavior() -> None:
    """The 300 s window releases at t=285 (strict), then trunc(start*0.9) once per 60 s.

    horizontal.go stabilizeRecommendationWithBehaviors and
    calculateScaleDownLimitWithBehaviors (periodStart counts both event lists).
    """
    hpa = Hpa(HpaConfig(2, 10, SEEDS_BEHAVIOR, target=3.0))
    # Stable at 10 with recommendations of 10 up to t = -15.
    assert _run(hpa, [float(t) for t in range(-600, 0, 15)], 10, 30.0)[-1] == 10
    times = [float(t) for t in range(0, 721, 15)]
    got = dict(zip(times, _run(hpa, times, 10, 6.0), strict=True))
    assert all(got[float(t)] == 10 for t in range(0, 271, 15))
    assert got[285.0] == 9
    assert got[300.0] == got[315.0] == got[330.0] == 9
    expected = {345: 8, 405: 7, 465: 6, 525: 5, 585: 4, 645: 3, 705: 2, 720: 2}
    for t, n in expected.items():
        assert got[float(t)] == n, t
    assert got[390.0] == 8 and got[450.0] == 7  # blocked for 60 s after each step


def test_example2_legacy_window_includes_boundary() -> None:
    """behavior nil: the 5-minute max window keeps a sample exactly at now-300 s.

    horizontal.go stabilizeRecommendation (only samples Before the cutoff drop out).
    """
    hpa = Hpa(HpaConfig(2, 10, None, target=3.0))
    _run(hpa, [float(t) for t in range(-600, 0, 15)], 10, 30.0)
    times = [float(t) for t in range(0, 316, 15)]
    got = dict(zip(times, _run(hpa, times, 10, 6.0), strict=True))
    assert got[285.0] == 10  # the sample at -15 is not before 285-300
    assert got[300.0] == 2  # no scale-down rate limit in the legacy path


def test_example3_defaulted_behavior_vs_nil() -> None:
    """behavior {} gets the API defaults (Pods 4 / Percent 100 per 15 s): 5, 10, 20.

    behavior nil uses the legacy limit: 4, 8, 16, 20 (pkg/apis/autoscaling/v2/defaults.go,
    horizontal.go normalizeDesiredReplicas vs normalizeDesiredReplicasWithBehaviors).
    """
    defaulted = Hpa(HpaConfig(1, 20, HpaBehavior.from_spec({}), target=3.0))
    assert _run(defaulted, [0, 15, 30, 45], 1, 60.0) == [5, 10, 20, 20]
    legacy = Hpa(HpaConfig(1, 20, None, target=3.0))
    assert _run(legacy, [0, 15, 30, 45, 60], 1, 60.0) == [4, 8, 16, 20, 20]


def test_example3_value_target_uses_ready_pods() -> None:
    """Value: ceil(usage/target * readyPods), then the same limits.

    replica_calculator.go GetExternalMetricReplicas / getUsageRatioReplicaCount.
    """
    hpa = Hpa(HpaConfig(1, 20, HpaBehavior.from_spec({}), target_type="Value", target=3.0))
    assert _run(hpa, [0, 15, 30], 1, 60.0) == [5, 10, 20]
    legacy = Hpa(HpaConfig(1, 20, None, target_type="Value", target=10.0))
    # ratio 3, 2 ready of 5 pods: ceil(3 * 2) = 6 (status and spec are not used).
    assert legacy.sync(0.0, spec=5, status=5, ready=2, usage=30.0) == 6


# -- float64 rounding ----------------------------------------------------------------


def test_percent_up_uses_float64_ceil() -> None:
    """50 replicas +10 % is ceil(50 * 1.1) = ceil(55.000000000000007) = 56 in float64.

    horizontal.go calculateScaleUpLimitWithScalingRules (math.Ceil on float64).
    """
    behavior = HpaBehavior.from_spec(
        {"scaleUp": {"policies": [{"type": "Percent", "value": 10, "periodSeconds": 15}]}}
    )
    hpa = Hpa(HpaConfig(1, 100, behavior, target=1.0))
    assert hpa.sync(0.0, spec=50, status=50, ready=50, usage=100.0) == 56


def test_percent_down_truncates_in_float64() -> None:
    """10 replicas -80 % is int32(10 * 0.19999999999999996) = 1, not 2.

    horizontal.go calculateScaleDownLimitWithBehaviors (int32 conversion truncates).
    """
    behavior = HpaBehavior.from_spec(
        {
            "scaleDown": {
                "stabilizationWindowSeconds": 0,
                "policies": [{"type": "Percent", "value": 80, "periodSeconds": 15}],
            }
        }
    )
    hpa = Hpa(HpaConfig(1, 100, behavior, target=1.0))
    assert hpa.sync(0.0, spec=10, status=10, ready=10, usage=0.5) == 1


# -- tolerance, proposals, holds -----------------------------------------------------


@pytest.mark.parametrize("usage", [9.0, 11.0])
def test_tolerance_bounds_are_inclusive(usage: float) -> None:
    """Ratios 0.9 and 1.1 are inside the 0.1 tolerance: (1-d) <= ratio <= (1+u).

    replica_calculator.go Tolerances.isWithin.
    """
    hpa = Hpa(HpaConfig(1, 100, None, target=1.0))
    assert hpa.sync(0.0, spec=10, status=10, ready=10, usage=usage) == 10


def test_just_outside_tolerance_scales() -> None:
    """Ratio 1.1001 is outside: proposal ceil(usage/target) = 12.

    replica_calculator.go GetExternalPerPodMetricReplicas.
    """
    hpa = Hpa(HpaConfig(1, 100, None, target=1.0))
    assert hpa.sync(0.0, spec=10, status=10, ready=10, usage=11.001) == 12


def test_average_value_within_tolerance_returns_status() -> None:
    """AverageValue divides by status.replicas and, inside the tolerance, proposes status.

    replica_calculator.go GetExternalPerPodMetricReplicas (called with statusReplicas).
    """
    behavior = HpaBehavior.from_spec({"scaleDown": {"stabilizationWindowSeconds": 0}})
    hpa = Hpa(HpaConfig(1, 100, behavior, target=1.0))
    # spec 10, status 8, usage 8: ratio 1.0 -> proposal 8 (the status), not 10.
    assert hpa.sync(0.0, spec=10, status=8, ready=3, usage=8.0) == 8


def test_average_value_ignores_ready_pods() -> None:
    """AverageValue never looks at ready pods: ceil(usage / target) whatever is Ready.

    replica_calculator.go GetExternalPerPodMetricReplicas.
    """
    hpa = Hpa(HpaConfig(1, 100, None, target=2.0))
    assert hpa.sync(0.0, spec=4, status=4, ready=0, usage=14.0) == 7


def test_per_direction_tolerance_from_behavior() -> None:
    """behavior.scaleUp.tolerance widens only the upper bound (HPAConfigurableTolerance).

    horizontal.go tolerancesForHpa.
    """
    behavior = HpaBehavior.from_spec(
        {"scaleUp": {"tolerance": "500m"}, "scaleDown": {"stabilizationWindowSeconds": 0}}
    )
    hpa = Hpa(HpaConfig(1, 100, behavior, target=1.0))
    assert hpa.sync(0.0, spec=10, status=10, ready=10, usage=14.0) == 10  # 1.4 <= 1.5
    assert hpa.sync(15.0, spec=10, status=10, ready=10, usage=8.5) == 9  # 0.85 < 0.9


def test_metric_error_holds_without_recording() -> None:
    """A failed metric returns without scaling and records no recommendation or event.

    horizontal.go reconcileAutoscaler (computeReplicasForMetrics returns -1).
    """
    hpa = Hpa(HpaConfig(1, 10, SEEDS_BEHAVIOR, target=1.0))
    assert hpa.sync(0.0, spec=3, status=3, ready=3, usage=None) == 3
    assert hpa.recommendations == ((3, 0.0),)  # only the initial one
    assert hpa.sync(15.0, spec=3, status=3, ready=3, usage=None) == 3
    assert hpa.recommendations == ((3, 0.0),)
    # No event was stored: the next up step starts from 3 (Percent 100 -> 6).
    assert hpa.sync(30.0, spec=3, status=3, ready=3, usage=9.0) == 6


def test_value_target_no_pods_is_an_error() -> None:
    """Value with no pod at all errors (hold); pods but none ready proposes 0 (-> min).

    replica_calculator.go getReadyPodsCount / getUsageRatioReplicaCount.
    """
    hpa = Hpa(HpaConfig(1, 10, None, target_type="Value", target=1.0))
    assert hpa.sync(0.0, spec=3, status=0, ready=0, usage=9.0) == 3
    behavior = HpaBehavior.from_spec({"scaleDown": {"stabilizationWindowSeconds": 0}})
    hpa2 = Hpa(HpaConfig(2, 10, behavior, target_type="Value", target=1.0))
    assert hpa2.sync(0.0, spec=3, status=3, ready=0, usage=9.0) == 2


def test_zero_spec_does_nothing() -> None:
    """spec 0 with minReplicas >= 1: ScalingDisabled, the HPA never leaves 0.

    horizontal.go reconcileAutoscaler (currentReplicas == 0 && minReplicas != 0).
    """
    hpa = Hpa(HpaConfig(1, 10, None, target=1.0))
    assert hpa.sync(0.0, spec=0, status=0, ready=0, usage=100.0) == 0
    assert hpa.recommendations == ((0, 0.0),)


def test_out_of_range_spec_is_corrected_without_metrics() -> None:
    """spec > max -> max and spec < min -> min, even when the metric fails.

    horizontal.go reconcileAutoscaler (the first branches skip computeReplicasForMetrics).
    """
    hpa = Hpa(HpaConfig(2, 5, SEEDS_BEHAVIOR, target=1.0))
    assert hpa.sync(0.0, spec=9, status=9, ready=9, usage=None) == 5
    hpa2 = Hpa(HpaConfig(2, 5, SEEDS_BEHAVIOR, target=1.0))
    assert hpa2.sync(0.0, spec=1, status=1, ready=1, usage=None) == 2


def test_scale_up_limit_counts_down_events() -> None:
    """periodStart = current - added + deleted: a recent scale-down raises the up limit.

    horizontal.go calculateScaleUpLimitWithScalingRules (both event lists).
    """
    behavior = HpaBehavior.from_spec(
        {
            "scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]},
            "scaleDown": {"stabilizationWindowSeconds": 0},
        }
    )
    hpa = Hpa(HpaConfig(1, 20, behavior, target=1.0))
    assert hpa.sync(0.0, spec=10, status=10, ready=10, usage=4.0) == 4  # down by 6
    # periodStart = 4 - 0 + 6 = 10, Pods 1 -> limit 11.
    assert hpa.sync(15.0, spec=4, status=4, ready=4, usage=20.0) == 11


def test_select_policy_min_and_disabled() -> None:
    """selectPolicy Min takes the smallest change; Disabled freezes that direction.

    horizontal.go calculateScaleUpLimitWithScalingRules / calculateScaleDownLimitWithBehaviors.
    """
    up_min = HpaBehavior.from_spec({"scaleUp": {"selectPolicy": "Min"}})
    hpa = Hpa(HpaConfig(1, 50, up_min, target=1.0))
    assert hpa.sync(0.0, spec=10, status=10, ready=10, usage=40.0) == 14  # min(10+4, 20)
    disabled = HpaBehavior.from_spec(
        {"scaleDown": {"selectPolicy": "Disabled", "stabilizationWindowSeconds": 0}}
    )
    hpa2 = Hpa(HpaConfig(1, 50, disabled, target=1.0))
    assert hpa2.sync(0.0, spec=10, status=10, ready=10, usage=1.0) == 10


def test_up_stabilization_uses_lowest_recent_recommendation() -> None:
    """scaleUp window: scale up only to the lowest recommendation inside the window.

    horizontal.go stabilizeRecommendationWithBehaviors (upRecommendation = min).
    """
    behavior = HpaBehavior.from_spec({"scaleUp": {"stabilizationWindowSeconds": 60}})
    hpa = Hpa(HpaConfig(1, 50, behavior, target=1.0))
    assert hpa.sync(0.0, spec=4, status=4, ready=4, usage=4.0) == 4
    assert hpa.sync(15.0, spec=4, status=4, ready=4, usage=20.0) == 4  # recs 4, 4 in window
    assert hpa.sync(30.0, spec=4, status=4, ready=4, usage=20.0) == 4
    # At 61 only the 20s at t=15 and 30 are inside (t > 1): up to 20, rate-limited to 8.
    assert hpa.sync(61.0, spec=4, status=4, ready=4, usage=20.0) == 8


# -- behavior defaults ----------------------------------------------------------------


def test_from_spec_applies_api_defaults() -> None:
    """Empty behavior: up 0 s/Max/{Pods 4, Percent 100}; down unset/Max/{Percent 100}.

    pkg/apis/autoscaling/v2/defaults.go GenerateHPAScaleUpRules / GenerateHPAScaleDownRules.
    """
    b = HpaBehavior.from_spec({})
    assert b.scale_up == HpaRules(0.0, "Max", DEFAULT_SCALE_UP_POLICIES)
    assert b.scale_down == HpaRules(None, "Max", DEFAULT_SCALE_DOWN_POLICIES)


def test_from_spec_is_field_by_field() -> None:
    """A given field wins, the others keep their default; policies replace the list whole.

    pkg/apis/autoscaling/v2/defaults.go copyHPAScalingRules.
    """
    b = HpaBehavior.from_spec(
        {
            "scaleUp": {"policies": [{"type": "Pods", "value": 2, "periodSeconds": 30}]},
            "scaleDown": {"selectPolicy": "Min", "tolerance": 0.05},
        }
    )
    assert b.scale_up == HpaRules(0.0, "Max", (HpaPolicy("Pods", 2, 30.0),))
    assert b.scale_down == HpaRules(None, "Min", DEFAULT_SCALE_DOWN_POLICIES, 0.05)


def test_unset_scale_down_window_uses_controller_flag() -> None:
    """scaleDown window unset -> the --horizontal-pod-autoscaler-downscale-stabilization value.

    horizontal.go maybeInitScaleDownStabilizationWindow.
    """
    behavior = HpaBehavior.from_spec({})
    hpa = Hpa(HpaConfig(1, 20, behavior, target=1.0, downscale_stabilization_s=30.0))
    assert hpa.sync(0.0, spec=10, status=10, ready=10, usage=2.0) == 10  # initial rec 10
    assert hpa.sync(15.0, spec=10, status=10, ready=10, usage=2.0) == 10  # (10, t=0) inside
    assert hpa.sync(30.0, spec=10, status=10, ready=10, usage=2.0) == 2  # t=0 is not > 0


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ({"scaleUp": {"policies": []}}, "non-empty"),
        ({"scaleUp": {"selectPolicy": "Sometimes"}}, "selectPolicy"),
        ({"scaleUp": {"policies": [{"type": "Pods", "value": 0, "periodSeconds": 15}]}}, "value"),
        ({"scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 0}]}}, "period"),
        ({"scaleDown": {"stabilizationWindowSeconds": 4000}}, "3600"),
        ({"scaleSideways": {}}, "unsupported"),
        ({"scaleUp": {"tolerance": "lots"}}, "quantity"),
    ],
)
def test_from_spec_rejects_invalid(spec: dict[str, object], match: str) -> None:
    """Invalid behaviors fail eagerly, like API validation (pkg/apis/autoscaling/validation)."""
    with pytest.raises(ValueError, match=match):
        HpaBehavior.from_spec(spec)


def test_config_validation() -> None:
    """min >= 1 (KEDA owns zero), max >= min, target >= 0.001 (milli-units, metrics/client.go)."""
    with pytest.raises(ValueError, match="min_replicas"):
        HpaConfig(0, 5)
    with pytest.raises(ValueError, match="max_replicas"):
        HpaConfig(3, 2)
    with pytest.raises(ValueError, match="target"):
        HpaConfig(1, 2, target=0.0001)


def test_quantize_milli() -> None:
    """Values reach the HPA as milli-units: %.3f rounding, NaN/Inf -> 0.

    kedacore/keda pkg/scalers/scaler.go GenerateMetricInMili; horizontal metrics/client.go.
    """
    assert quantize_milli(30.000000000000004) == 30000
    assert quantize_milli(1.2345) in (1234, 1235)
    assert quantize_milli(float("nan")) == 0
    assert quantize_milli(float("inf")) == 0


# -- invariant --------------------------------------------------------------------------

_policies = st.lists(
    st.builds(
        HpaPolicy,
        type=st.sampled_from(["Pods", "Percent"]),
        value=st.integers(1, 200),
        period_s=st.sampled_from([15.0, 30.0, 60.0]),
    ),
    min_size=1,
    max_size=3,
).map(tuple)
_rules = st.builds(
    HpaRules,
    stabilization_window_s=st.one_of(st.none(), st.sampled_from([0.0, 15.0, 60.0, 300.0])),
    select_policy=st.sampled_from(["Max", "Min", "Disabled"]),
    policies=_policies,
    tolerance=st.one_of(st.none(), st.sampled_from([0.0, 0.05, 0.2])),
)
_behavior = st.one_of(st.none(), st.builds(HpaBehavior, scale_up=_rules, scale_down=_rules))
_step = st.tuples(
    st.integers(0, 40),  # spec
    st.integers(0, 40),  # status
    st.integers(0, 40),  # ready
    st.one_of(st.none(), st.floats(0.0, 500.0)),  # usage
    st.sampled_from([1.0, 15.0, 15.0, 60.0]),  # time step
)


@settings(max_examples=150, deadline=None)
@given(
    min_r=st.integers(1, 10),
    extra=st.integers(0, 20),
    behavior=_behavior,
    target_type=st.sampled_from(["AverageValue", "Value"]),
    target=st.sampled_from([0.5, 1.0, 3.0, 7.25]),
    steps=st.lists(_step, min_size=1, max_size=30),
)
def test_spec_stays_within_bounds(
    min_r: int,
    extra: int,
    behavior: HpaBehavior | None,
    target_type: str,
    target: float,
    steps: list[tuple[int, int, int, float | None, float]],
) -> None:
    """For spec > 0 the result lies in [min, max] and is never 0; spec 0 stays 0.

    horizontal.go reconcileAutoscaler + convertDesiredReplicasWithRules /
    convertDesiredReplicasWithBehaviorRate (clamps to [minReplicas, maxReplicas]).
    """
    cfg = HpaConfig(min_r, min_r + extra, behavior, target_type, target)  # type: ignore[arg-type]
    hpa = Hpa(cfg)
    t = 0.0
    for spec, status, ready, usage, dt in steps:
        t += dt
        out = hpa.sync(t, spec=spec, status=status, ready=min(ready, status), usage=usage)
        if spec == 0:
            assert out == 0
        elif usage is None and cfg.min_replicas <= spec <= cfg.max_replicas:
            assert out == spec
        else:
            assert cfg.min_replicas <= out <= cfg.max_replicas
            assert out >= 1


# -- several metrics (computeReplicasForMetrics) --------------------------------


def _two_metrics(behavior: HpaBehavior | None = None, lo: int = 1, hi: int = 20) -> Hpa:
    """Metric A: AverageValue target 5; metric B: Value target 0.8."""
    return Hpa(
        HpaConfig(
            lo,
            hi,
            behavior,
            target_type="AverageValue",
            target=5.0,
            extra_metrics=(HpaMetric("Value", 0.8),),
        )
    )


def test_several_metrics_take_the_largest_proposal() -> None:
    """3 ready pods (spec = status = ready = 3), no behavior (legacy rules).

    A (AverageValue 5) reads 21: ratio 21 / (5 * 3) = 1.4, outside the 0.1
    tolerance, proposal ceil(21 / 5) = 5. B (Value 0.8) reads 0.9: ratio
    0.9 / 0.8 = 1.125, outside, proposal ceil(1.125 * 3) = ceil(3.375) = 4.
    The HPA takes max(5, 4) = 5; the legacy up limit max(2 * 3, 4) = 6 lets it.
    With B at 1.6 instead: ratio 2.0, ceil(2.0 * 3) = 6 > 5, so 6.
    """
    hpa = _two_metrics()
    assert hpa.sync_metrics(0.0, spec=3, status=3, ready=3, usages=(21.0, 0.9)) == 5
    hpa = _two_metrics()
    assert hpa.sync_metrics(0.0, spec=3, status=3, ready=3, usages=(21.0, 1.6)) == 6


def test_several_metrics_behavior_applies_after_the_max() -> None:
    """The seeds' behavior (scale-up Percent 100 per 15 s) limits the largest proposal.

    spec 2: A reads 50, ceil(50 / 5) = 10; B reads 0.4, ratio 0.5, ceil(0.5 * 2) = 1.
    max = 10, limit ceil(2 * 2) = 4, so 4; at t=15 from 4: A ratio 50 / 20 = 2.5,
    proposal 10, limit 8, so 8; at t=30: limit 16, so 10.
    """
    hpa = _two_metrics(SEEDS_BEHAVIOR)
    spec = 2
    out = []
    for t in (0.0, 15.0, 30.0):
        spec = hpa.sync_metrics(t, spec=spec, status=spec, ready=spec, usages=(50.0, 0.4))
        out.append(spec)
    assert out == [4, 8, 10]


def test_several_metrics_within_tolerance_keep_status() -> None:
    """spec 4: A reads 21 (ratio 21 / 20 = 1.05, within 0.1: proposal status 4);
    B reads 0.84 (ratio 1.05, within: proposal spec 4). max 4: no change."""
    hpa = _two_metrics()
    assert hpa.sync_metrics(0.0, spec=4, status=4, ready=4, usages=(21.0, 0.84)) == 4


def test_a_failed_metric_blocks_scale_down_only() -> None:
    """control-plane rules 1.3: some metrics fail and the largest valid proposal
    is below spec: hold, nothing recorded. At or above spec: scale on the others.

    spec 6, A failed (None), B reads 0.4: ratio 0.5, ceil(0.5 * 6) = 3 < 6: hold 6.
    spec 2, A failed, B reads 1.6: ratio 2.0, ceil(2.0 * 2) = 4 >= 2: go to 4.
    All failed: hold.
    """
    hpa = _two_metrics()
    assert hpa.sync_metrics(0.0, spec=6, status=6, ready=6, usages=(None, 0.4)) == 6
    assert hpa.recommendations == ((6, 0.0),)  # only the initial one
    hpa = _two_metrics()
    assert hpa.sync_metrics(0.0, spec=2, status=2, ready=2, usages=(None, 1.6)) == 4
    hpa = _two_metrics()
    assert hpa.sync_metrics(0.0, spec=5, status=5, ready=5, usages=(None, None)) == 5


def test_a_value_metric_with_no_pod_is_an_invalid_metric() -> None:
    """spec 3 but no pod at all (status 0, ready 0): the Value metric's calculator
    errors (no pods returned by selector); A reads 40 -> ceil(40 / 5) = 8 >= 3, so
    the HPA scales on A: legacy limit max(2 * 3, 4) = 6."""
    hpa = _two_metrics()
    assert hpa.sync_metrics(0.0, spec=3, status=0, ready=0, usages=(40.0, 2.0)) == 6


def test_sync_needs_one_usage_per_metric() -> None:
    hpa = _two_metrics()
    with pytest.raises(ValueError, match="2 metric"):
        hpa.sync_metrics(0.0, spec=1, status=1, ready=1, usages=(1.0,))
    with pytest.raises(ValueError, match="2 metric"):
        hpa.sync(0.0, spec=1, status=1, ready=1, usage=1.0)


@settings(max_examples=60, deadline=None)
@given(
    usage=st.floats(0.0, 500.0),
    spec=st.integers(1, 20),
)
def test_one_metric_sync_equals_sync_metrics(usage: float, spec: int) -> None:
    """The single-metric call is the several-metric one with one usage."""
    a = Hpa(HpaConfig(1, 20, SEEDS_BEHAVIOR, target=3.0))
    b = Hpa(HpaConfig(1, 20, SEEDS_BEHAVIOR, target=3.0))
    assert a.sync(0.0, spec=spec, status=spec, ready=spec, usage=usage) == b.sync_metrics(
        0.0, spec=spec, status=spec, ready=spec, usages=(usage,)
    )


@settings(max_examples=60, deadline=None)
@given(
    a=st.floats(0.0, 200.0),
    b=st.floats(0.0, 5.0),
    spec=st.integers(1, 20),
)
def test_two_metrics_never_go_below_either_alone(a: float, b: float, spec: int) -> None:
    """The max of proposals: with no failures, the combined HPA's first answer is
    the larger of what each metric alone would answer (legacy rules are monotone)."""
    both = _two_metrics().sync_metrics(0.0, spec=spec, status=spec, ready=spec, usages=(a, b))
    only_a = Hpa(HpaConfig(1, 20, None, target=5.0)).sync(
        0.0, spec=spec, status=spec, ready=spec, usage=a
    )
    only_b = Hpa(HpaConfig(1, 20, None, target_type="Value", target=0.8)).sync(
        0.0, spec=spec, status=spec, ready=spec, usage=b
    )
    assert both == max(only_a, only_b)
