"""KEDA's direct scaling (0 <-> N, idle, cooldown) and fallback, against upstream rules.

Sources: kedacore/keda pkg/scaling/executor/scale_scaledobjects.go (RequestScale,
scaleFromZeroOrIdle, scaleToZeroOrIdle), pkg/fallback/fallback.go
(GetMetricsWithFallback, doFallback), pkg/scaling/scale_handler.go (polling loop,
external-push), controllers/keda/hpa.go (the HPA KEDA creates).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulations.autoscaling.hpa import Hpa
from simulations.autoscaling.hpa_config import HpaBehavior, HpaConfig, HpaPolicy, HpaRules
from simulations.autoscaling.keda import Keda, KedaConfig, TriggerPoll

SEEDS_BEHAVIOR = HpaBehavior(
    scale_up=HpaRules(0.0, "Max", (HpaPolicy("Percent", 100, 15.0),)),
    scale_down=HpaRules(300.0, "Max", (HpaPolicy("Percent", 10, 60.0),)),
)


def test_example_a_scale_from_zero_on_push() -> None:
    """A push `true` at spec 0 writes max(min, 1) at once; the HPA then doubles per sync.

    scale_scaledobjects.go RequestScale/scaleFromZeroOrIdle; scale_handler.go
    startPushScalers; kubernetes horizontal.go (ScalingDisabled at 0).
    """
    cfg = KedaConfig(min_replica_count=0, max_replica_count=10, polling_interval_s=30.0)
    keda = Keda(cfg)
    hpa = Hpa(HpaConfig(cfg.hpa_min_replicas(), cfg.max_replica_count, SEEDS_BEHAVIOR, target=3.0))
    spec = 0
    assert keda.poll(0.0, spec=spec, active=False) is None
    assert hpa.sync(5.0, spec=spec, status=0, ready=0, usage=12.0) == 0
    assert hpa.recommendations == ((0, 5.0),)
    written = keda.push_active(12.0, spec=spec)
    assert written == 1 and keda.last_active_s == 12.0
    spec = written
    spec = hpa.sync(20.0, spec=spec, status=spec, ready=0, usage=12.0)
    assert spec == 2  # proposal 4, limit ceil(1 * 2)
    assert keda.poll(30.0, spec=spec, active=True) is None
    assert keda.last_active_s == 30.0
    spec = hpa.sync(35.0, spec=spec, status=spec, ready=0, usage=12.0)
    assert spec == 4  # proposal 4, limit ceil(2 * 2); the t=20 event is not > 35-15
    assert hpa.sync(50.0, spec=spec, status=spec, ready=0, usage=12.0) == 4  # ratio 1
    assert keda.poll(60.0, spec=spec, active=True) is None
    assert keda.last_active_s == 60.0


def test_example_a_with_min_two_writes_two() -> None:
    """scaleFromZeroOrIdle writes minReplicaCount when it is > 0.

    scale_scaledobjects.go scaleFromZeroOrIdle.
    """
    keda = Keda(KedaConfig(min_replica_count=2))
    assert keda.push_active(12.0, spec=0) == 2


def test_example_b_scale_to_zero_after_cooldown() -> None:
    """Zero only once lastActiveTime + cooldown is strictly before now: t=330, not 300.

    scale_scaledobjects.go scaleToZeroOrIdle (LastActiveTime.Add(cooldown).Before(now)).
    """
    keda = Keda(KedaConfig(min_replica_count=0, cooldown_period_s=300.0))
    assert keda.poll(0.0, spec=3, active=True) is None
    assert keda.last_active_s == 0.0
    for t in range(30, 301, 30):
        assert keda.poll(float(t), spec=3, active=False) is None, t
    assert keda.poll(330.0, spec=3, active=False) == 0


def test_active_poll_refreshes_cooldown() -> None:
    """Every active poll or push moves lastActiveTime, extending the cooldown.

    scale_scaledobjects.go RequestScale (updateLastActiveTime); scale_handler.go push.
    """
    keda = Keda(KedaConfig(cooldown_period_s=60.0))
    keda.poll(0.0, spec=2, active=True)
    keda.push_active(50.0, spec=2)
    assert keda.poll(90.0, spec=2, active=False) is None  # 50 + 60 = 110
    assert keda.poll(111.0, spec=2, active=False) == 0


def test_errors_never_scale_to_zero() -> None:
    """An erroring poll without fallback does nothing, however old lastActiveTime is.

    scale_scaledobjects.go RequestScale (isError && Fallback == nil).
    """
    keda = Keda(KedaConfig(min_replica_count=0, cooldown_period_s=10.0))
    keda.poll(0.0, spec=3, active=True)
    assert keda.poll(1000.0, spec=3, active=False, error=True) is None
    assert keda.poll(2000.0, spec=0, active=True, error=True) is None  # activity unknown


def test_error_with_fallback_does_nothing_before_threshold() -> None:
    """With fallback replicas != 0 an error below the threshold leaves scaling to the HPA.

    scale_scaledobjects.go RequestScale; fallback.go GetMetricsWithFallback.
    """
    keda = Keda(KedaConfig(fallback_failure_threshold=3, fallback_replicas=4, cooldown_period_s=1))
    keda.poll(0.0, spec=2, active=True)
    assert keda.poll(100.0, spec=2, active=False, error=True) is None


def test_initial_cooldown_from_creation() -> None:
    """With no lastActiveTime, zero needs creation + initialCooldownPeriod strictly before now.

    scale_scaledobjects.go scaleToZeroOrIdle.
    """
    keda = Keda(KedaConfig(initial_cooldown_period_s=120.0), created_s=10.0)
    assert keda.poll(130.0, spec=2, active=False) is None
    assert keda.poll(131.0, spec=2, active=False) == 0
    keda0 = Keda(KedaConfig(), created_s=0.0)
    assert keda0.poll(0.0, spec=1, active=False) is None  # 0 + 0 is not before 0


def test_below_min_without_idle_writes_min() -> None:
    """Inactive with spec < minReplicaCount and no idle: KEDA writes min.

    scale_scaledobjects.go RequestScale (currentReplicas < minReplicas, no idle).
    """
    keda = Keda(KedaConfig(min_replica_count=2))
    assert keda.poll(0.0, spec=1, active=False) == 2
    assert keda.poll(30.0, spec=2, active=False) is None
    assert keda.poll(60.0, spec=5, active=False) is None  # N <-> min is the HPA's


def test_idle_replicas() -> None:
    """idle < min: inactive goes to idle after cooldown; active below min writes min.

    scale_scaledobjects.go scaleToZeroOrIdle / scaleFromZeroOrIdle.
    """
    keda = Keda(KedaConfig(min_replica_count=2, idle_replica_count=0, cooldown_period_s=30.0))
    keda.poll(0.0, spec=2, active=True)
    assert keda.poll(30.0, spec=2, active=False) is None
    assert keda.poll(60.0, spec=2, active=False) == 0
    assert keda.poll(90.0, spec=0, active=False) is None
    assert keda.poll(120.0, spec=0, active=True) == 2
    assert keda.poll(150.0, spec=1, active=True) == 2  # idle set and current < min


def test_fallback_threshold_is_strict() -> None:
    """Failures must exceed failureThreshold; then the HPA gets target * fallback replicas.

    fallback.go GetMetricsWithFallback (NumberOfFailures > FailureThreshold), doFallback.
    """
    keda = Keda(KedaConfig(fallback_failure_threshold=2, fallback_replicas=5))
    assert keda.metric_for_hpa(None, spec=3, target=3.0) is None
    assert keda.metric_for_hpa(None, spec=3, target=3.0) is None
    assert keda.metric_for_hpa(None, spec=3, target=3.0) == 15.0
    assert keda.metric_for_hpa(7.5, spec=3, target=3.0) == 7.5  # success resets
    assert max(keda.failure_counts) == 0
    assert keda.metric_for_hpa(None, spec=3, target=3.0) is None


def test_fallback_counts_both_streams() -> None:
    """Poll failures and HPA-path failures share one counter; a success on either resets it.

    fallback.go GetMetricsWithFallback is called by both scale_handler.go paths.
    """
    keda = Keda(KedaConfig(fallback_failure_threshold=1, fallback_replicas=4))
    keda.poll(0.0, spec=2, active=False, error=True)
    assert keda.metric_for_hpa(None, spec=2, target=1.0) == 4.0
    keda.poll(30.0, spec=2, active=False)
    assert keda.metric_for_hpa(None, spec=2, target=1.0) is None


def test_fallback_makes_poll_active() -> None:
    """While fallback applies the poll sees the trigger active: from 0 to max(min,1), no zero.

    scale_handler.go getScaledObjectState with fallback.go; scale_scaledobjects.go.
    """
    keda = Keda(
        KedaConfig(fallback_failure_threshold=0, fallback_replicas=3, cooldown_period_s=10.0)
    )
    assert keda.poll(0.0, spec=0, active=False, error=True) == 1
    assert keda.poll(100.0, spec=3, active=False, error=True) is None
    assert keda.last_active_s == 100.0


def test_fallback_value_target_divides_by_ready() -> None:
    """Value targets get target * R / readyPods; zero ready pods fail the fallback.

    fallback.go doFallback (ValueMetricType branch).
    """
    keda = Keda(KedaConfig(fallback_failure_threshold=0, fallback_replicas=6))
    assert keda.metric_for_hpa(None, spec=2, target=2.0, metric_type="Value", ready=4) == 3.0
    assert keda.metric_for_hpa(None, spec=2, target=2.0, metric_type="Value", ready=0) is None


def test_fallback_current_replicas_behaviors() -> None:
    """currentReplicas* behaviors use the Deployment's spec.replicas.

    fallback.go doFallback.
    """
    higher = Keda(
        KedaConfig(
            fallback_failure_threshold=0,
            fallback_replicas=4,
            fallback_behavior="currentReplicasIfHigher",
        )
    )
    assert higher.metric_for_hpa(None, spec=7, target=1.0) == 7.0
    assert higher.metric_for_hpa(None, spec=2, target=1.0) == 4.0


def test_config_validation() -> None:
    """CRD/webhook rules: idle < min, max >= min, fallback fields together."""
    with pytest.raises(ValueError, match="idle_replica_count"):
        KedaConfig(min_replica_count=1, idle_replica_count=1)
    with pytest.raises(ValueError, match="max_replica_count"):
        KedaConfig(min_replica_count=5, max_replica_count=2)
    with pytest.raises(ValueError, match="together"):
        KedaConfig(fallback_failure_threshold=3)
    assert KedaConfig(min_replica_count=0).hpa_min_replicas() == 1
    assert KedaConfig(min_replica_count=3).hpa_min_replicas() == 3


_event = st.tuples(
    st.sampled_from(["poll", "push"]),
    st.integers(0, 12),
    st.booleans(),
    st.booleans(),
    st.floats(0.0, 200.0),
)


@settings(max_examples=150, deadline=None)
@given(
    min_r=st.integers(0, 4),
    idle=st.booleans(),
    fallback=st.booleans(),
    events=st.lists(_event, min_size=1, max_size=30),
)
def test_writes_are_only_the_known_targets(
    min_r: int, idle: bool, fallback: bool, events: list[tuple[str, int, bool, bool, float]]
) -> None:
    """KEDA only ever writes 0/idle, minReplicaCount or max(min,1), and never the same spec.

    scale_scaledobjects.go RequestScale (the only updateScaleOnScaleTarget callers).
    """
    cfg = KedaConfig(
        min_replica_count=min_r,
        idle_replica_count=0 if idle and min_r > 0 else None,
        fallback_failure_threshold=2 if fallback else None,
        fallback_replicas=3 if fallback else None,
    )
    keda = Keda(cfg)
    allowed = {0, min_r, max(min_r, 1)}
    t = 0.0
    for kind, spec, active, error, dt in events:
        t += dt
        out = (
            keda.poll(t, spec=spec, active=active, error=error)
            if kind == "poll"
            else keda.push_active(t, spec=spec)
        )
        if out is not None:
            assert out in allowed
            assert out != spec
        if kind == "push" or (active and not error):
            assert keda.last_active_s == t


# -- several triggers (scale_handler.go getScaledObjectState) ---------------------


def test_several_triggers_active_when_any_is() -> None:
    """The ScaledObject is active when any trigger is: from 0 a poll with one
    active trigger of two writes max(min, 1); with none active the cooldown runs."""
    keda = Keda(KedaConfig(min_replica_count=0, cooldown_period_s=60.0), triggers=2)
    both_idle = (TriggerPoll(False), TriggerPoll(False))
    assert keda.poll_triggers(0.0, spec=0, results=both_idle) is None
    assert keda.poll_triggers(15.0, spec=0, results=(TriggerPoll(False), TriggerPoll(True))) == 1
    assert keda.last_active_s == 15.0
    assert keda.poll_triggers(60.0, spec=3, results=both_idle) is None  # 15 + 60 < 60: no
    assert keda.poll_triggers(90.0, spec=3, results=both_idle) == 0


def test_one_trigger_erroring_never_scales_to_zero() -> None:
    """An error on one trigger (no fallback) keeps the ScaledObject in error:
    inactive but never scaled to zero, however long the cooldown is past."""
    keda = Keda(KedaConfig(min_replica_count=0, cooldown_period_s=0.0), triggers=2)
    results = (TriggerPoll(False), TriggerPoll(False, error=True))
    assert keda.poll_triggers(100.0, spec=2, results=results) is None


def test_failures_are_counted_per_trigger() -> None:
    """status.health is per metric: trigger 1 failing does not reset with trigger 0's
    successes, and passes the threshold (2) on its third failure, on either stream."""
    keda = Keda(KedaConfig(fallback_failure_threshold=2, fallback_replicas=5), triggers=2)
    failing = (TriggerPoll(True), TriggerPoll(False, error=True))
    assert keda.poll_triggers(0.0, spec=2, results=failing) is None  # 1 failure
    assert keda.metric_for_hpa(4.0, spec=2, target=3.0, trigger=0) == 4.0
    assert keda.metric_for_hpa(None, spec=2, target=3.0, trigger=1) is None  # 2 failures
    assert keda.failure_counts == [0, 2]
    assert keda.metric_for_hpa(None, spec=2, target=3.0, trigger=1) == 15.0  # 3 > 2
    assert keda.in_fallback(1) and not keda.in_fallback(0)
    assert keda.metric_for_hpa(4.0, spec=2, target=3.0, trigger=1) == 4.0  # success resets
    assert keda.failure_counts == [0, 0]


def test_a_trigger_in_fallback_counts_as_active_not_as_error() -> None:
    """Past the threshold the poll sees that trigger active and not erroring
    (its metric is the synthetic one): from 0 it writes max(min, 1)."""
    keda = Keda(
        KedaConfig(min_replica_count=0, fallback_failure_threshold=0, fallback_replicas=3),
        triggers=2,
    )
    results = (TriggerPoll(False), TriggerPoll(False, error=True))
    assert keda.poll_triggers(0.0, spec=0, results=results) == 1


def test_activity_override_for_a_composite_metric() -> None:
    """scalingModifiers: activity is the composite value's, not the OR; an error
    still blocks activity."""
    keda = Keda(KedaConfig(min_replica_count=0), triggers=2)
    results = (TriggerPoll(True), TriggerPoll(True))
    assert keda.poll_triggers(0.0, spec=0, results=results, active=lambda: False) is None
    assert keda.poll_triggers(1.0, spec=0, results=results, active=lambda: True) == 1
    errored = (TriggerPoll(True), TriggerPoll(False, error=True))
    assert keda.poll_triggers(2.0, spec=0, results=errored, active=lambda: True) is None


def test_poll_needs_one_result_per_trigger() -> None:
    keda = Keda(KedaConfig(), triggers=2)
    with pytest.raises(ValueError, match="2 trigger"):
        keda.poll(0.0, spec=1, active=True)
    with pytest.raises(ValueError, match="triggers"):
        Keda(KedaConfig(), triggers=0)
