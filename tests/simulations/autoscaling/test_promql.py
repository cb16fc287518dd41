"""The PromQL of prometheus triggers: parsed by a real parser, evaluated on the emulated Prometheus.

Semantics checked against Prometheus's own rules (promql/quantile.go
bucketQuantile; arithmetic with an empty vector is empty; float division by
zero is ±Inf or NaN).
"""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.metrics import TTFT_BUCKETS_V1
from simulations.autoscaling.promql import (
    Aggregate,
    Binary,
    CounterRate,
    Number,
    PromQLError,
    TtftQuantile,
    bucket_quantile,
    evaluate,
    parse_promql,
    rate_windows,
)
from simulations.scrape import PrometheusView, ScrapeSample

N_BUCKETS = len(TTFT_BUCKETS_V1) + 1


def _cumulative(upto: dict[float, int], total: int) -> tuple[float, ...]:
    """Cumulative counts at every TTFT bound: the last ``upto`` bound at or below it."""
    out = []
    for bound in TTFT_BUCKETS_V1:
        below = [n for b, n in upto.items() if b <= bound]
        out.append(float(max(below, default=0)))
    return (*out, float(total))


def _sample(
    t: float,
    *,
    targets: int = 2,
    waiting: float = 6.0,
    running: float = 4.0,
    kv: float = 1.2,
    gateway: float = 0.0,
    success: float = 0.0,
    ttft: tuple[float, ...] = (),
) -> ScrapeSample:
    return ScrapeSample(
        t,
        targets,
        (waiting, running, kv),
        (waiting, running, kv),
        (success, 0.0, 0.0, 0.0),
        gateway,
        ttft,
    )


def _view(*samples: ScrapeSample, retain: float = 0.0) -> PrometheusView:
    view = PrometheusView(15.0, 60.0)
    if retain:
        view.retain(retain)
    for s in samples:
        view.record(s)
    return view


def test_the_queries_users_write_parse() -> None:
    """Gauges, counter rates, the TTFT quantile and arithmetic between them."""
    assert parse_promql("sum(vllm:num_requests_waiting)") == Aggregate(
        "sum", "vllm:num_requests_waiting"
    )
    assert parse_promql("avg(vllm:gpu_cache_usage_perc)") == Aggregate(
        "avg", "vllm:kv_cache_usage_perc"
    )
    assert parse_promql("sum(rate(gateway_requests_total[1m]))") == CounterRate(
        "gateway_requests_total", 60.0
    )
    q = "histogram_quantile(0.9, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[2m])))"
    assert parse_promql(q) == TtftQuantile(0.9, 120.0)
    expr = parse_promql("sum(vllm:num_requests_waiting) / sum(vllm:num_requests_running) * 2")
    assert isinstance(expr, Binary) and expr.op == "*" and expr.rhs == Number(2.0)
    assert rate_windows(parse_promql(f"{q} + sum(rate(vllm:request_success_total[5m]))")) == (
        120.0,
        300.0,
    )


@pytest.mark.parametrize(
    "query,what",
    [
        ("sum(vllm:num_requests_waiting) > 3", "operator '>'"),
        ("vllm:num_requests_waiting", "bare selector"),
        ("sum by (pod) (vllm:num_requests_waiting)", "by/without"),
        ("min(vllm:num_requests_waiting)", "aggregation 'min'"),
        ("avg(rate(vllm:request_success_total[1m]))", "only sum of a rate"),
        ("sum(rate(vllm:num_requests_waiting[1m]))", "not a counter"),
        ("sum(foo)", "not a vLLM gauge"),
        ("sum(vllm:num_requests_waiting offset 5m)", "offset"),
        ("sum(a) / on(x) sum(b)", "binary modifier"),
        ("clamp_max(sum(vllm:num_requests_waiting), 3)", "clamp_max"),
        (
            "histogram_quantile(0.9, sum by (le) "
            "(rate(vllm:e2e_request_latency_seconds_bucket[1m])))",
            "only vllm:time_to_first_token_seconds_bucket",
        ),
        ("sum(", "not valid PromQL"),
    ],
)
def test_what_is_not_supported_is_named(query: str, what: str) -> None:
    with pytest.raises(PromQLError, match=re.escape(what)):
        parse_promql(query)


def test_gauges_and_arithmetic_evaluate_on_the_last_scrape() -> None:
    """2 pods, 6 waiting and 4 running in all, KV use summing to 1.2 (avg 0.6)."""
    view = _view(_sample(0.0), _sample(15.0))
    assert evaluate(parse_promql("sum(vllm:num_requests_waiting)"), view).value == 6.0
    assert evaluate(parse_promql("avg(vllm:kv_cache_usage_perc)"), view).value == pytest.approx(0.6)
    assert evaluate(parse_promql("count(vllm:kv_cache_usage_perc)"), view).value == 2.0
    ratio = "sum(vllm:num_requests_waiting) / sum(vllm:num_requests_running)"
    assert evaluate(parse_promql(ratio), view).value == 1.5
    total = "sum(vllm:num_requests_waiting) + 2 * sum(vllm:num_requests_running) - 1"
    assert evaluate(parse_promql(total), view).value == 13.0
    assert evaluate(parse_promql("-(sum(vllm:num_requests_waiting))"), view).value == -6.0
    scalar = evaluate(parse_promql("2 * 3"), view)
    assert scalar.value == 6.0 and scalar.scalar


def test_no_pods_is_an_empty_vector_and_empties_arithmetic() -> None:
    """At zero pods vLLM's gauges have no series: sum() is empty, and so is any
    arithmetic with it; division by zero is Inf or NaN."""
    view = _view(_sample(0.0, targets=0, waiting=0.0, running=0.0, kv=0.0))
    assert evaluate(parse_promql("sum(vllm:num_requests_waiting)"), view).value is None
    assert evaluate(parse_promql("2 * avg(vllm:kv_cache_usage_perc)"), view).value is None
    full = _view(_sample(0.0, running=0.0), _sample(15.0, running=0.0))
    ratio = "sum(vllm:num_requests_waiting) / sum(vllm:num_requests_running)"
    assert evaluate(parse_promql(ratio), full).value == math.inf
    zero = _view(_sample(0.0, waiting=0.0, running=0.0))
    value = evaluate(parse_promql(ratio), zero).value
    assert value is not None and math.isnan(value)


def test_the_gateway_rate_exists_at_zero_pods() -> None:
    """gateway_requests_total is counted in front of vLLM: 30 requests in 60 s
    reach it while no pod runs, so its rate is 0.5/s, over the query's own window."""
    samples = [_sample(15.0 * i, targets=0, gateway=7.5 * i) for i in range(9)]
    view = _view(*samples, retain=60.0)
    value = evaluate(parse_promql("sum(rate(gateway_requests_total[1m]))"), view).value
    assert value == pytest.approx(0.5)
    increase = evaluate(parse_promql("increase(gateway_requests_total[1m])"), view).value
    assert increase == pytest.approx(30.0)


def test_a_long_window_needs_the_view_to_retain_it() -> None:
    """rate(x[5m]) with a 1-minute view: retain(300) keeps the samples; the
    view's own rate window is unchanged."""
    samples = [_sample(15.0 * i, success=2.0 * i) for i in range(41)]  # 600 s, 2 per 15 s
    view = _view(*samples, retain=300.0)
    rate = evaluate(parse_promql("sum(rate(vllm:request_success_total[5m]))"), view).value
    assert rate == pytest.approx(2.0 / 15.0)
    assert view.rate("vllm:request_success_total") == pytest.approx(2.0 / 15.0)


def test_ttft_quantile_interpolates_like_prometheus() -> None:
    """40 first tokens in 60 s: 10 at <= 0.1 s, 30 at <= 0.25 s, all 40 at <= 0.5 s.

    q 0.9: rank 36 falls in (0.25, 0.5] holding 10, 6 above its start: 0.25 + 0.25 * 6/10 = 0.4.
    q 0.5: rank 20 in (0.1, 0.25] holding 20, 10 above: 0.1 + 0.15 * 10/20 = 0.175.
    q 0.1: rank 4 in (0.08, 0.1] holding 10: 0.08 + 0.02 * 4/10 = 0.088.
    """
    empty = _cumulative({}, 0)
    full = _cumulative({0.1: 10, 0.25: 30, 0.5: 40}, 40)
    view = _view(_sample(0.0, ttft=empty), _sample(60.0, ttft=full), retain=60.0)
    for q, expected in ((0.9, 0.4), (0.5, 0.175), (0.1, 0.088)):
        text = (
            f"histogram_quantile({q}, sum by (le) "
            "(rate(vllm:time_to_first_token_seconds_bucket[1m])))"
        )
        assert evaluate(parse_promql(text), view).value == pytest.approx(expected)


def test_bucket_quantile_edges() -> None:
    """No observations: NaN; rank in +Inf: the last finite bound; q outside [0, 1]: ±Inf."""
    bounds = (1.0, 2.0)
    assert math.isnan(bucket_quantile(0.5, bounds, (0.0, 0.0, 0.0)))
    assert bucket_quantile(0.99, bounds, (1.0, 2.0, 10.0)) == 2.0
    assert bucket_quantile(-0.1, bounds, (1.0, 2.0, 2.0)) == -math.inf
    assert bucket_quantile(1.1, bounds, (1.0, 2.0, 2.0)) == math.inf


@settings(max_examples=80, deadline=None)
@given(
    counts=st.lists(st.integers(0, 50), min_size=N_BUCKETS, max_size=N_BUCKETS),
    q1=st.floats(0.0, 1.0),
    q2=st.floats(0.0, 1.0),
)
def test_bucket_quantile_is_monotone_in_q(counts: list[int], q1: float, q2: float) -> None:
    """A higher quantile never reads lower, and stays within the finite bounds."""
    cumulative = []
    acc = 0.0
    for c in counts:
        acc += c
        cumulative.append(acc)
    if acc == 0:
        return
    lo, hi = sorted((q1, q2))
    a = bucket_quantile(lo, TTFT_BUCKETS_V1, tuple(cumulative))
    b = bucket_quantile(hi, TTFT_BUCKETS_V1, tuple(cumulative))
    assert 0.0 <= a <= b <= TTFT_BUCKETS_V1[-1]
