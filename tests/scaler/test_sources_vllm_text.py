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


def test_a_counter_reset_counts_from_zero() -> None:
    fake = FakeVllm(engines=[Engine(success=100)])
    first = _state(fake.render(), 0.0)
    fake.engines[0].success = 4
    reading = aggregate(Selection(), [_state(fake.render(), 2.0, first)], 2.0)
    assert reading.completion_rate_rps == pytest.approx(2.0)


def test_model_selector_skips_replicas_of_other_models() -> None:
    mine = FakeVllm(model="llama", engines=[Engine(waiting=3, running=1)])
    theirs = FakeVllm(model="mistral", engines=[Engine(waiting=9, running=9)])
    sel = Selection((LabelMatcher("model_name", "=", "llama"),))
    reading = aggregate(sel, [_state(mine.render(), 1), _state(theirs.render(), 1)], 1)
    assert (reading.ready_replicas, reading.waiting) == (1, 3.0)


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
