"""A ScaledObject's triggers at run time: KEDA's poll and the HPA's metric reads.

Real parts throughout: ScaledObjects parsed from YAML, the emulated
Prometheus fed scrape samples, KEDA's and the HPA's state machines. Rules:
kedacore/keda pkg/scaling/scale_handler.go (getScaledObjectState),
pkg/fallback/fallback.go (both call streams count failures),
pkg/scalers/prometheus_scaler.go (ignoreNullValues), controllers/keda/hpa.go.
"""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from engine.profiles import get_profile
from simulations.autoscaling.hpa import Hpa
from simulations.autoscaling.keda import Keda
from simulations.autoscaling.promql import evaluate
from simulations.autoscaling.scaledobject import ScaledObjectSpec, parse_scaledobject
from simulations.autoscaling.trigger_state import PrescalerHook, TriggerState
from simulations.policies import make_controller, predictive_spec, scaledobject_spec
from simulations.runner import run_policy
from simulations.scrape import PrometheusView, ScrapeSample
from simulations.sim_types import COMPLETED, SimConfig
from simulations.simulation import Simulation
from simulations.traffic import Workload

PROFILE = get_profile("llama-3-8b@g5.xlarge")


def _so(spec: str) -> ScaledObjectSpec:
    head = """\
    apiVersion: keda.sh/v1alpha1
    kind: ScaledObject
    metadata: {name: so}
    spec:
      scaleTargetRef: {name: vllm}
    """
    return parse_scaledobject(textwrap.dedent(head) + textwrap.indent(textwrap.dedent(spec), "  "))


def _sample(
    t: float, *, targets: int, waiting: float = 0.0, kv: float = 0.0, gateway: float = 0.0
) -> ScrapeSample:
    return ScrapeSample(
        t, targets, (waiting, 0.0, kv), (waiting, 0.0, kv), (0.0, 0.0, 0.0, 0.0), gateway
    )


def _state(so: ScaledObjectSpec, *samples: ScrapeSample) -> tuple[TriggerState, Keda]:
    view = PrometheusView(15.0, 60.0)
    keda = Keda(so.keda, triggers=len(so.triggers))
    state = TriggerState(so, keda, view)
    for s in samples:
        view.record(s)
    return state, keda


KV_STRICT = """\
minReplicaCount: 1
maxReplicaCount: 10
fallback: {failureThreshold: 2, replicas: 4}
triggers:
  - type: prometheus
    metadata:
      query: avg(vllm:kv_cache_usage_perc)
      threshold: '0.8'
      ignoreNullValues: 'false'
"""


def test_fallback_fires_after_failure_threshold_on_both_streams() -> None:
    """No pod is up, so avg(kv) returns no series; with ignoreNullValues false
    each read is an error. failureThreshold 2: the poll's failure (1) and the
    HPA read's (2) only hold; the next HPA read (3 > 2) gets target * replicas
    = 0.8 * 4 = 3.2, and the HPA, at spec 2, proposes ceil(3.2 / 0.8) = 4."""
    so = _so(KV_STRICT)
    state, keda = _state(so, _sample(0.0, targets=0))
    hpa = Hpa(so.hpa)
    assert state.poll(1.0, spec=2, ready=0) is None
    assert max(keda.failure_counts) == 1
    assert state.hpa_usages(5.0, spec=2, ready=0) == (None,)
    assert hpa.sync_metrics(5.0, spec=2, status=2, ready=0, usages=(None,)) == 2  # held
    usages = state.hpa_usages(20.0, spec=2, ready=0)
    assert usages == (3.2,) and keda.in_fallback(0)
    assert hpa.sync_metrics(20.0, spec=2, status=2, ready=0, usages=usages) == 4


def test_null_results_read_zero_by_default() -> None:
    """The same query with ignoreNullValues left at its default true reads 0 and
    never counts a failure: fallback cannot fire."""
    so = _so(KV_STRICT.replace("      ignoreNullValues: 'false'\n", ""))
    state, keda = _state(so, _sample(0.0, targets=0))
    for t in range(0, 300, 15):
        state.poll(float(t), spec=2, ready=0)
        assert state.hpa_usages(float(t) + 5.0, spec=2, ready=0) == (0.0,)
    assert max(keda.failure_counts) == 0 and not keda.in_fallback(0)


SCALE_TO_ZERO = """\
minReplicaCount: 0
maxReplicaCount: 10
cooldownPeriod: 60
triggers:
  - type: prometheus
    metadata:
      query: sum(rate(gateway_requests_total[1m]))
      threshold: '0.5'
      activationThreshold: '0.05'
"""


def test_the_gateway_rate_wakes_a_fleet_at_zero() -> None:
    """At zero pods the gateway still counts arrivals: 6 requests in 60 s is
    0.1/s > the activation threshold 0.05, so the poll writes max(min, 1) = 1."""
    so = _so(SCALE_TO_ZERO)
    quiet = [_sample(15.0 * i, targets=0, gateway=0.0) for i in range(5)]
    state, _ = _state(so, *quiet)
    assert state.poll(61.0, spec=0, ready=0) is None
    state.view.record(_sample(75.0, targets=0, gateway=6.0))
    state.view.record(_sample(90.0, targets=0, gateway=6.0))
    state.view.record(_sample(105.0, targets=0, gateway=6.0))
    state.view.record(_sample(120.0, targets=0, gateway=6.0))
    assert state.poll(121.0, spec=0, ready=0) == 1


def test_use_cached_metrics_reads_the_last_poll() -> None:
    """useCachedMetrics: the HPA read returns the value stored at the last poll
    (6 waiting), not the newer scrape (30 waiting); the other trigger reads fresh."""
    so = _so(
        """\
        minReplicaCount: 1
        triggers:
          - type: prometheus
            useCachedMetrics: true
            metadata: {query: sum(vllm:num_requests_waiting), threshold: '3'}
          - type: prometheus
            metadata: {query: sum(vllm:num_requests_waiting), threshold: '3'}
        """
    )
    state, _ = _state(so, _sample(0.0, targets=2, waiting=6.0))
    state.poll(1.0, spec=2, ready=2)
    state.view.record(_sample(15.0, targets=2, waiting=30.0))
    assert state.hpa_usages(16.0, spec=2, ready=2) == (6.0, 30.0)
    state.poll(17.0, spec=2, ready=2)
    assert state.hpa_usages(18.0, spec=2, ready=2) == (30.0, 30.0)


MODIFIERS = """\
minReplicaCount: 0
advanced:
  scalingModifiers:
    formula: "queue + 2 * max(kv, 0.5)"
    target: '2'
    activationTarget: '{activation}'
triggers:
  - type: prometheus
    name: queue
    metadata: {{query: sum(vllm:num_requests_waiting), threshold: '3'}}
  - type: prometheus
    name: kv
    metricType: Value
    metadata: {{query: avg(vllm:kv_cache_usage_perc), threshold: '0.8'}}
"""


def test_scaling_modifiers_make_one_composite_metric() -> None:
    """6 waiting, KV average 1.2 / 2 = 0.6: queue + 2 * max(0.6, 0.5) = 7.2, one
    HPA metric with target 2 (AverageValue). activationTarget 8: inactive, so a
    poll at 0 writes nothing; activationTarget 5: active, writes 1."""
    so = _so(MODIFIERS.format(activation="8"))
    assert len(so.hpa.metrics) == 1 and so.hpa.target == 2.0
    state, _ = _state(so, _sample(0.0, targets=2, waiting=6.0, kv=1.2))
    (usage,) = state.hpa_usages(1.0, spec=2, ready=2)
    assert usage == pytest.approx(7.2)
    assert state.poll(2.0, spec=0, ready=0) is None
    state, _ = _state(
        _so(MODIFIERS.format(activation="5")), _sample(0.0, targets=2, waiting=6.0, kv=1.2)
    )
    assert state.poll(2.0, spec=0, ready=0) == 1


@pytest.mark.parametrize(
    "formula,message",
    [
        ("queue > 3", "must give a number"),
        ("pods + 1", "'pods' names no trigger"),
        ("sqrt(queue)", "the function sqrt()"),
        ("queue ** 2", "unexpected '*'"),
        ("queue ? 1 : 0", "must be a comparison"),
    ],
)
def test_formulas_keda_would_reject_are_refused(formula: str, message: str) -> None:
    text = MODIFIERS.format(activation="1").replace("queue + 2 * max(kv, 0.5)", formula)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _so(text)


def test_cron_and_queue_take_the_larger_proposal() -> None:
    """A cron trigger (target 1) inside its window reads desiredReplicas 5 next to
    a queue of 6 (target 3): the HPA's metrics read (6, 5); at spec 2 the HPA
    proposes max(ceil(6 / 3), ceil(5 / 1)) = 5, legacy limit max(4, 4) = 4."""
    so = _so(
        """\
        minReplicaCount: 1
        triggers:
          - type: prometheus
            metadata: {query: sum(vllm:num_requests_waiting), threshold: '3'}
          - type: cron
            metadata: {timezone: UTC, start: 0 8 * * *, end: 0 20 * * *, desiredReplicas: '5'}
        """
    )
    state, _ = _state(so, _sample(0.0, targets=2, waiting=6.0))
    at_nine = 9 * 3600.0
    usages = state.hpa_usages(at_nine, spec=2, ready=2)
    assert usages == (6.0, 5.0)
    assert Hpa(so.hpa).sync_metrics(at_nine, spec=2, status=2, ready=2, usages=usages) == 4
    assert state.hpa_usages(21 * 3600.0, spec=2, ready=2) == (6.0, 0.0)


def _gap_workload() -> Workload:
    """120 requests in the first 4 minutes, 16 quiet minutes, 120 more."""
    rng = np.random.default_rng(1)
    first = np.sort(rng.uniform(0.0, 240.0, 120))
    second = np.sort(rng.uniform(1200.0, 1440.0, 120))
    arrivals = np.concatenate([first, second])
    n = arrivals.size
    return Workload(arrivals, np.full(n, 200), np.full(n, 50), "gap", duration_s=1500.0)


def test_a_fleet_at_zero_wakes_on_gateway_traffic_in_a_full_run() -> None:
    """Requests for 4 minutes, 16 quiet minutes, requests again: with min 0 and
    a 60 s cooldown the fleet goes to zero in the gap and the gateway rate
    brings it back; no request is lost."""
    workload = _gap_workload()
    so = _so(SCALE_TO_ZERO)
    result = run_policy(scaledobject_spec(so), workload, PROFILE, SimConfig(timeout_s=600.0))
    spec = result.timeline["spec"]
    t = result.timeline["t"]
    assert spec[(t > 700) & (t < 1200)].min() == 0
    assert spec[t > 1300].max() >= 1
    assert np.all(result.status == COMPLETED)
    assert np.all(np.isfinite(result.ttft_s))


def test_a_ttft_quantile_trigger_reads_the_fleets_histogram() -> None:
    """A run scaled on the p90 TTFT (target 0.5 s) exposes the TTFT buckets:
    at the end the query reads a p90 inside the histogram's bounds, and the
    requests served in the last minute are counted in its +Inf bucket rate."""
    so = _so(
        """\
        minReplicaCount: 1
        maxReplicaCount: 6
        triggers:
          - type: prometheus
            metricType: Value
            metadata:
              query: >-
                histogram_quantile(0.9, sum by (le)
                (rate(vllm:time_to_first_token_seconds_bucket[1m])))
              threshold: '0.5'
        """
    )
    rng = np.random.default_rng(2)
    arrivals = np.sort(rng.uniform(0.0, 600.0, 900))
    n = arrivals.size
    workload = Workload(arrivals, np.full(n, 300), np.full(n, 40), "steady", duration_s=600.0)
    spec = scaledobject_spec(so)
    sim = Simulation(workload, PROFILE, make_controller(spec, workload, PROFILE), SimConfig())
    result = sim.run()
    assert np.all(result.status == COMPLETED)
    assert so.trigger.expr is not None
    p90 = evaluate(so.trigger.expr, sim.prometheus).value
    assert p90 is not None and 0.0 < p90 <= 2560.0
    rates = sim.prometheus.ttft_bucket_rates(60.0)
    assert rates is not None and rates[-1] > 0.5  # 1.5 requests/s arrive


def test_a_trigger_in_fallback_makes_the_composite_the_fallback_metric() -> None:
    """scalingModifiers with fallback {failureThreshold 0, replicas 3}: at zero
    pods the strict kv trigger errors; its first failure (1 > 0) puts it in
    fallback, so the composite is target * replicas = 2 * 3 = 6 on the same
    poll, above activationTarget 1: KEDA wakes the fleet, and the HPA reads 6."""
    so = _so(
        """\
        minReplicaCount: 0
        fallback: {failureThreshold: 0, replicas: 3}
        advanced:
          scalingModifiers: {formula: "queue + kv", target: '2', activationTarget: '1'}
        triggers:
          - type: prometheus
            name: queue
            metadata: {query: sum(vllm:num_requests_waiting), threshold: '3'}
          - type: prometheus
            name: kv
            metadata:
              query: avg(vllm:kv_cache_usage_perc)
              threshold: '0.8'
              ignoreNullValues: 'false'
        """
    )
    state, keda = _state(so, _sample(0.0, targets=0))
    assert state.poll(1.0, spec=0, ready=0) == 1
    assert keda.failure_counts == [0, 1]
    assert state.hpa_usages(5.0, spec=1, ready=0) == (6.0,)


OUTAGE_SO = """\
minReplicaCount: 1
maxReplicaCount: 10
pollingInterval: 30
fallback: {failureThreshold: 3, replicas: 3}
advanced:
  horizontalPodAutoscalerConfig:
    behavior:
      scaleDown:
        stabilizationWindowSeconds: 0
        policies: [{type: Percent, value: 100, periodSeconds: 15}]
triggers:
  - type: prometheus
    metadata: {query: sum(vllm:num_requests_waiting), threshold: '5'}
"""


def test_a_prometheus_outage_fires_fallback_and_recovery_ends_it() -> None:
    """Fallback {failureThreshold 3, replicas 3}, a queue of 4 against a target
    of 5 (the HPA holds 1). Prometheus dies at t = 10; every query fails even
    with ignoreNullValues true (an HTTP error is not a null result), and both
    call streams count: HPA read at 20 (1), poll at 30 (2), HPA at 35 (3: not
    above 3, held), HPA at 50 (4 > 3): KEDA answers 5 x 3 = 15 and the HPA
    goes to ceil(15 / 5) = 3 (the default scale-up policies, 100 % or 4 pods
    per 15 s, allow it); the poll at 60 sees the trigger active, not errored. Prometheus is
    back at 70 and scrapes a queue of 4 at 75: the HPA read at 80 resets the
    count and, with no scale-down window, returns to ceil(4 / 5) = 1."""
    so = _so(OUTAGE_SO)
    view = PrometheusView(15.0, 60.0)
    keda = Keda(so.keda, triggers=1)
    state, hpa = TriggerState(so, keda, view), Hpa(so.hpa)
    view.record(_sample(0.0, targets=1, waiting=4.0))
    spec = 1

    def sync(t: float) -> int:
        usages = state.hpa_usages(t, spec=spec, ready=spec)
        return hpa.sync_metrics(t, spec=spec, status=spec, ready=spec, usages=usages)

    assert state.poll(0.0, spec=spec, ready=spec) is None and sync(5.0) == 1
    view.set_up(False)
    view.record(_sample(15.0, targets=1, waiting=4.0))  # not scraped
    assert sync(20.0) == 1 and keda.failure_counts == [1]
    assert state.poll(30.0, spec=spec, ready=spec) is None and keda.failure_counts == [2]
    assert sync(35.0) == 1 and keda.failure_counts == [3] and not keda.in_fallback(0)
    spec = sync(50.0)
    assert spec == 3 and keda.failure_counts == [4] and keda.in_fallback(0)
    assert state.poll(60.0, spec=spec, ready=spec) is None
    assert keda.last_active_s == 60.0  # in fallback the poll sees it active
    view.set_up(True)
    view.record(_sample(75.0, targets=3, waiting=4.0))
    spec = sync(80.0)
    assert spec == 1 and keda.failure_counts == [0] and not keda.in_fallback(0)


def test_an_outage_in_a_full_run_holds_the_fallback_replicas_then_recovers() -> None:
    """The same ScaledObject over a light steady load (one replica's worth):
    before the outage the fleet is 1, within a minute of Prometheus dying
    (four failed calls at 15-30 s spacing) it is 3 and stays 3 while the
    outage lasts, and after Prometheus is back it returns to 1. Every request
    still completes."""
    rng = np.random.default_rng(3)
    arrivals = np.sort(rng.uniform(0.0, 900.0, 450))
    n = arrivals.size
    workload = Workload(arrivals, np.full(n, 200), np.full(n, 40), "steady", duration_s=900.0)
    config = SimConfig(initial_replicas=1, prometheus_outage=(200.0, 500.0))
    result = run_policy(scaledobject_spec(_so(OUTAGE_SO)), workload, PROFILE, config)
    spec, t = result.timeline["spec"], result.timeline["t"]
    assert spec[t < 200].max() == 1
    assert spec[(t > 270) & (t < 500)].min() == 3
    assert spec[(t > 200) & (t < 500)].max() == 3
    assert spec[t > 600].max() == 1
    assert np.all(result.status == COMPLETED)


def test_a_prescaler_trigger_without_an_answer_fails_the_poll_too() -> None:
    """KEDA's poll calls GetMetrics before IsActive: while the scaler answers
    UNAVAILABLE (the tracker has no answer) the poll fails and counts, like
    the HPA's read; an answer resets the count."""
    so = predictive_spec(PROFILE.name, max_replicas=8).scaledobject
    assert so is not None
    answer: list[float | None] = [None]
    hook = PrescalerHook(lambda: answer[0], lambda: True)
    keda = Keda(so.keda, triggers=1)
    state = TriggerState(so, keda, PrometheusView(15.0, 60.0), hook)
    state.poll(0.0, spec=2, ready=2)
    assert state.hpa_usages(5.0, spec=2, ready=2) == (None,)
    assert keda.failure_counts == [2]
    answer[0] = 3.0
    state.poll(15.0, spec=2, ready=2)
    assert keda.failure_counts == [0]


def test_an_outage_reaches_prescaler_through_its_tracker() -> None:
    """The predictive policy through a 600 s outage: the tracker gets no
    reading, holds its last answer, and after ``fallbackAfterSeconds`` (180 s)
    of stale data answers its own ``fallbackReplicas`` (4), as the live
    scaler does."""
    rng = np.random.default_rng(4)
    arrivals = np.sort(rng.uniform(0.0, 1200.0, 600))
    n = arrivals.size
    workload = Workload(arrivals, np.full(n, 200), np.full(n, 40), "steady", duration_s=1200.0)
    spec = predictive_spec(PROFILE.name, max_replicas=8)
    controller = make_controller(spec, workload, PROFILE)
    config = SimConfig(initial_replicas=1, prometheus_outage=(300.0, 900.0))
    result = Simulation(workload, PROFILE, controller, config).run()
    desired, t = result.timeline["desired"], result.timeline["t"]
    assert desired[(t > 300 + 180 + 20) & (t < 900)].min() == 4.0
    assert desired[(t > 300 + 180 + 20) & (t < 900)].max() == 4.0
    assert desired[t < 300].max() < 4.0
    assert np.all(result.status == COMPLETED)


PRESCALER_AT_ZERO = """\
minReplicaCount: 0
maxReplicaCount: 10
cooldownPeriod: 60
triggers:
  - type: external
    metadata:
      scalerAddress: prescaler:9090
      prometheusAddress: http://prometheus:9090
      profile: llama-3-8b@g5.xlarge
      forecast: "off"
      minReplicas: "0"
      scaleDownStabilizationSeconds: "60"
"""
GATEWAY_KEY = "      gatewayRateQuery: sum(rate(gateway_requests_total[1m]))\n"


def test_prescalers_trigger_reads_the_gateway_query_on_the_emulated_prometheus() -> None:
    """gatewayRateQuery is evaluated like a prometheus trigger's query: 6
    requests over the last 60 s at zero pods is 0.1/s beside the vLLM reading;
    without the key the reading is the view's, unchanged."""
    keyed = _so(PRESCALER_AT_ZERO + GATEWAY_KEY)
    samples = [_sample(15.0 * i, targets=0, gateway=1.5 * max(0, i - 4)) for i in range(9)]
    view = PrometheusView(15.0, 60.0)
    hook = PrescalerHook(lambda: 0.0, lambda: False)
    with_key = TriggerState(keyed, Keda(keyed.keda, triggers=1), view, hook)
    plain = _so(PRESCALER_AT_ZERO)
    without = TriggerState(plain, Keda(plain.keda, triggers=1), view, hook)
    for s in samples:
        view.record(s)
    reading = with_key.prescaler_reading(view.reading())
    assert reading is not None and reading.ready_replicas == 0
    assert reading.gateway_rate_rps == pytest.approx(0.1)
    assert without.prescaler_reading(view.reading()) == view.reading()
    view.set_up(False)
    assert with_key.prescaler_reading(view.reading()) is None


@pytest.mark.parametrize("gateway", [False, True], ids=["vllm-only", "gateway"])
def test_prescaler_at_zero_wakes_on_the_gateway_in_a_full_run(gateway: bool) -> None:
    """The gap run above with prescaler's trigger at minReplicas 0 (forecast off):
    on vLLM's metrics alone the fleet, once at zero, never learns of the second
    burst, and its requests time out; with gatewayRateQuery the same burst
    wakes it and every request is served."""
    workload = _gap_workload()
    so = _so(PRESCALER_AT_ZERO + (GATEWAY_KEY if gateway else ""))
    result = run_policy(scaledobject_spec(so), workload, PROFILE, SimConfig(timeout_s=240.0))
    spec, t = result.timeline["spec"], result.timeline["t"]
    assert spec[(t > 700) & (t < 1200)].min() == 0
    served = result.status == COMPLETED
    assert served[:120].all()  # the first burst is served either way
    if gateway:
        assert served.all() and spec[t > 1300].max() >= 1
    else:
        assert not served[120:].any() and spec[t > 1200].max() == 0
