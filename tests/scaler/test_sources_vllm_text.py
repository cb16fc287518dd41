"""Parsing vLLM /metrics text of both generations (pure)."""

from __future__ import annotations

import pytest

from scaler.settings import LabelMatcher
from scaler.sources.model import Selection
from scaler.sources.scrape import TargetState, aggregate
from scaler.sources.vllm_text import page_rates, parse_vllm_text
from tests.scaler.conftest import Engine, FakeVllm

V0_042 = """# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="facebook/opt-125m"} 2.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="facebook/opt-125m"} 5.0
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="facebook/opt-125m"} 0.25
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="facebook/opt-125m"} 1000.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="facebook/opt-125m"} 400.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{finished_reason="stop",model_name="facebook/opt-125m"} 7.0
vllm:request_success_total{finished_reason="length",model_name="facebook/opt-125m"} 3.0
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{le="0.3",model_name="facebook/opt-125m"} 1.0
vllm:e2e_request_latency_seconds_bucket{le="+Inf",model_name="facebook/opt-125m"} 10.0
vllm:e2e_request_latency_seconds_count{model_name="facebook/opt-125m"} 10.0
vllm:e2e_request_latency_seconds_sum{model_name="facebook/opt-125m"} 12.5
"""


def _state(text: str, t: float, before: TargetState | None = None) -> TargetState:
    page = parse_vllm_text(text)
    rates = page_rates(before.page, page, t - before.time_s) if before else None
    return TargetState(t, page, rates)


def test_v0_page_reads_old_kv_name_and_sums_finished_reasons() -> None:
    state = _state(V0_042, 10.0)
    reading = aggregate(Selection(), [state], 10.0)
    assert (reading.ready_replicas, reading.waiting, reading.running) == (1, 5.0, 2.0)
    assert reading.kv_usage == 0.25
    assert reading.arrival_rate_rps is None  # no rate from one scrape


def test_v1_page_sums_engines_and_prefers_the_new_kv_name() -> None:
    fake = FakeVllm(
        engines=[Engine(waiting=2, running=3, kv=0.5), Engine(waiting=1, running=4, kv=0.7)]
    )
    text = fake.render() + 'vllm:gpu_cache_usage_perc{engine="0",model_name="llama"} 0.99\n'
    reading = aggregate(Selection(), [_state(text, 1.0)], 1.0)
    assert (reading.waiting, reading.running) == (3.0, 7.0)
    assert reading.kv_usage == pytest.approx(0.6)


def test_rates_from_successive_scrapes_include_queue_growth() -> None:
    """Arrivals = completions + growth of waiting + running, per second."""
    fake = FakeVllm(engines=[Engine(waiting=0, running=1, success=10, prompt=100, generation=50)])
    first = _state(fake.render(), 0.0)
    fake.engines[0] = Engine(
        waiting=4, running=3, success=14, prompt=300, generation=90, preemptions=2
    )
    second = _state(fake.render(), 2.0, first)
    reading = aggregate(Selection(), [second], 2.0)
    assert reading.completion_rate_rps == pytest.approx(2.0)
    assert reading.arrival_rate_rps == pytest.approx(2.0 + 6 / 2)
    assert reading.prompt_tokens_per_s == pytest.approx(100.0)
    assert reading.generation_tokens_per_s == pytest.approx(20.0)
    assert reading.preemptions_per_s == pytest.approx(1.0)


def test_a_counter_drop_gives_no_rate_for_that_interval() -> None:
    """Review #6: a drop is a restart or another pod, never ``value / dt``."""
    fake = FakeVllm(engines=[Engine(success=100)])
    first = _state(fake.render(), 0.0)
    fake.engines[0].success = 4
    second = _state(fake.render(), 2.0, first)
    reading = aggregate(Selection(), [second], 2.0)
    assert reading is not None and reading.completion_rate_rps is None
    assert reading.arrival_rate_rps is None and reading.waiting == 0.0
    fake.engines[0].success = 10  # the next interval is comparable again
    third = _state(fake.render(), 4.0, second)
    assert aggregate(Selection(), [third], 4.0).completion_rate_rps == 3.0  # type: ignore[union-attr]


def _with_start(text: str, start: float) -> str:
    return text + f"# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {start}\n"


def test_a_load_balanced_url_alternating_between_pods_gives_no_rate() -> None:
    """Review #6 repro: a Service alternating between two pods 5 s apart. Before:
    23,600 req/s; now rates are keyed on ``process_start_time_seconds``."""
    pod_a = FakeVllm(engines=[Engine(success=118_000, generation=29_000_000)])
    pod_b = FakeVllm(engines=[Engine(success=120, generation=30_000)])
    a = _state(_with_start(pod_a.render(), 1_700_000_000.0), 0.0)
    b = _state(_with_start(pod_b.render(), 1_700_050_000.0), 5.0, a)
    assert b.page.start_time_s == 1_700_050_000.0 and b.rates is None
    a2 = _state(_with_start(pod_a.render().replace("118000", "118100"), 1_700_000_000.0), 10.0, b)
    assert a2.rates is None  # b -> a: the counter "rose", but it is another process
    reading = aggregate(Selection(), [a2], 10.0)
    assert reading is not None and reading.completion_rate_rps is None
    assert reading.generation_tokens_per_s is None
    # the same process twice: a normal rate
    a3 = _state(_with_start(pod_a.render().replace("118000", "118200"), 1_700_000_000.0), 15.0, a2)
    assert aggregate(Selection(), [a3], 15.0).completion_rate_rps == 20.0  # type: ignore[union-attr]


def test_a_url_serving_another_model_is_missing_not_idle() -> None:
    """Review #1: a listed URL with no series for the selection (wrong ``model``)
    used to count as "another model", i.e. zero demand."""
    mine = FakeVllm(model="llama", engines=[Engine(waiting=3, running=1)])
    theirs = FakeVllm(model="mistral", engines=[Engine(waiting=9, running=9)])
    sel = Selection((LabelMatcher("model_name", "=", "llama"),))
    assert aggregate(sel, [_state(mine.render(), 1), _state(theirs.render(), 1)], 1) is None
    reading = aggregate(sel, [_state(mine.render(), 1)], 1)
    assert reading is not None and (reading.ready_replicas, reading.waiting) == (1, 3.0)


@pytest.mark.parametrize(
    "text",
    [
        "<html>502 Bad Gateway</html>",
        "vllm:num_requests_running{",
        "# only a comment\n",
        'vllm:num_requests_running{model_name="m"} NaN\n',
        "up 1\n",
    ],
)
def test_garbage_is_rejected(text: str) -> None:
    """HTML, truncated text, NaN, or a page without vLLM metrics is an error."""
    with pytest.raises(ValueError):
        parse_vllm_text(text)
