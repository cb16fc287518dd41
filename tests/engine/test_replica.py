"""Scheduler and timing rules of the replica model (vLLM V1 semantics)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from engine.profiles import get_profile
from engine.replica import Replica, RequestRejected
from engine.requests import Request, RequestRecord
from tests.support.replica_runs import run_requests


@dataclass(frozen=True)
class Vllm:
    max_model_len: int = 4096
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 512
    block_size: int = 16
    enable_chunked_prefill: bool = True


@dataclass(frozen=True)
class FakeProfile:
    """Affine step time: 10 ms + 0.1 ms per prefill token + 1 ms per decode + 1 us per context."""

    vllm: Vllm = field(default_factory=Vllm)
    kv_blocks: int = 1000
    calls: list[tuple[int, int, int]] = field(default_factory=list, compare=False)

    def step_time_s(self, prefill_tokens: int, decode_seqs: int, context_tokens: int) -> float:
        self.calls.append((prefill_tokens, decode_seqs, context_tokens))
        return 0.010 + 1e-4 * prefill_tokens + 1e-3 * decode_seqs + 1e-6 * context_tokens


def drain(replica: Replica) -> list[RequestRecord]:
    out: list[RequestRecord] = []
    while (t := replica.next_event_time()) is not None:
        out.extend(replica.advance_to(t))
    return out


def test_single_request_times_come_from_the_profile() -> None:
    """TTFT is one prefill step; each later token is one decode step at its context."""
    prof = FakeProfile()
    _, [rec] = run_requests(prof, [Request("a", 0.0, 100, 5)], jump=False)
    ttft = prof.step_time_s(100, 0, 0)
    assert rec.first_token_s == pytest.approx(ttft, abs=1e-12)
    decode = sum(prof.step_time_s(0, 1, 100 + i) for i in range(4))
    assert rec.finish_s == pytest.approx(ttft + decode, abs=1e-12)
    assert rec.output_tokens == 5
    assert rec.finished_reason == "length"
    assert rec.preemptions == 0


def test_steady_jump_matches_step_by_step() -> None:
    """A multi-step jump gives the same records as planning each step alone (within 1e-9 s)."""
    prof = FakeProfile()
    reqs = [Request(f"r{i}", 0.05 * i, 50 + 10 * i, 200 + 7 * i) for i in range(6)]
    _, fast = run_requests(prof, reqs)
    slow_replica, slow = run_requests(prof, reqs, jump=False)
    fast_by_id = {r.request_id: r for r in fast}
    for r in slow:
        f = fast_by_id[r.request_id]
        assert f.first_token_s == pytest.approx(r.first_token_s, abs=1e-9)
        assert f.finish_s == pytest.approx(r.finish_s, abs=1e-9)
    assert slow_replica.events_run > 5 * Replica(prof).events_run + 100


def test_real_profile_jump_error_is_tiny() -> None:
    """With the roofline profile, jumps keep every finish time within 0.1 % of stepping."""
    prof = get_profile("llama-3-8b@g5.xlarge")
    reqs = [Request(f"r{i}", 0.3 * i, 200 + 50 * i, 300) for i in range(20)]
    fast_rep, fast = run_requests(prof, reqs)
    slow_rep, slow = run_requests(prof, reqs, jump=False)
    fast_by_id = {r.request_id: r for r in fast}
    for r in slow:
        assert fast_by_id[r.request_id].finish_s == pytest.approx(r.finish_s, rel=1e-3)
    assert fast_rep.steps_run == slow_rep.steps_run
    assert fast_rep.events_run < slow_rep.events_run / 5


def test_chunked_prefill_splits_a_long_prompt_by_the_token_budget() -> None:
    """A 1200-token prompt with a 512 budget takes three prefill steps (512, 512, 176)."""
    prof = FakeProfile()
    _, [rec] = run_requests(prof, [Request("a", 0.0, 1200, 1)])
    assert [c[0] for c in prof.calls] == [512, 512, 176]
    assert [c[2] for c in prof.calls] == [0, 512, 1024]
    assert rec.first_token_s == pytest.approx(
        sum(prof.step_time_s(*c) for c in [(512, 0, 0), (512, 0, 512), (176, 0, 1024)])
    )


def test_decodes_are_served_before_new_prefills() -> None:
    """Running decodes take the budget first; a new prompt only gets what is left."""
    prof = FakeProfile(vllm=Vllm(max_num_batched_tokens=100))
    rep = Replica(prof)
    rep.submit(Request("a", 0.0, 10, 50))
    rep.advance_to(0.5)  # "a" is decoding
    prof.calls.clear()
    rep.submit(Request("b", 0.5, 300, 1))
    rep.advance_to(rep.next_token_time() or 0.0)  # the step in flight (decode only)
    rep.advance_to(rep.next_token_time() or 0.0)
    assert prof.calls[-1][:2] == (99, 1)


def test_without_chunked_prefill_prompts_are_admitted_whole() -> None:
    """Chunked prefill off: a prompt that does not fit the remaining budget waits."""
    prof = FakeProfile(vllm=Vllm(max_num_batched_tokens=4096, enable_chunked_prefill=False))
    run_requests(prof, [Request("a", 0.0, 3000, 2), Request("b", 0.0, 3000, 2)])
    assert [c[0] for c in prof.calls if c[0]][:2] == [3000, 3000]


def test_max_num_seqs_caps_the_running_batch() -> None:
    """At most max_num_seqs run; the rest wait in FCFS order."""
    prof = FakeProfile(vllm=Vllm(max_num_seqs=2))
    rep = Replica(prof)
    for i in range(5):
        rep.submit(Request(f"r{i}", 0.0, 10, 20))
    rep.advance_to(0.2)
    assert rep.num_running == 2
    assert rep.num_waiting == 3
    records = drain(rep)
    order = sorted(records, key=lambda r: r.first_token_s or 0.0)
    assert [r.request_id for r in order] == [f"r{i}" for i in range(5)]


def test_kv_exhaustion_preempts_the_newest_request() -> None:
    """When blocks run out, the newest running request is recomputed later."""
    prof = FakeProfile(kv_blocks=20)  # 320 tokens
    reqs = [Request("old", 0.0, 100, 150), Request("new", 0.001, 100, 150)]
    rep, records = run_requests(prof, reqs)
    by_id = {r.request_id: r for r in records}
    assert by_id["old"].preemptions == 0
    assert by_id["new"].preemptions >= 1
    assert rep.preemptions_total == sum(r.preemptions for r in records)
    assert by_id["new"].output_tokens == 150
    assert rep.kv_blocks_used == 0


def test_request_too_long_is_rejected_with_the_lengths() -> None:
    """prompt + output beyond max_model_len is refused at submit, naming the numbers."""
    rep = Replica(FakeProfile())
    with pytest.raises(RequestRejected, match=r"maximum context length is 4096 tokens.*4100"):
        rep.submit(Request("a", 0.0, 4000, 100))
    with pytest.raises(RequestRejected, match="KV cache"):
        Replica(FakeProfile(kv_blocks=4)).submit(Request("b", 0.0, 60, 10))


def test_time_never_goes_backwards() -> None:
    """advance_to and submit refuse earlier times."""
    rep = Replica(FakeProfile())
    rep.advance_to(5.0)
    with pytest.raises(ValueError, match=r"already at 5\.0"):
        rep.advance_to(4.0)
    with pytest.raises(ValueError, match="time never goes backwards"):
        rep.submit(Request("a", 1.0, 10, 10))


def test_duplicate_live_request_id_is_an_error() -> None:
    """Two live requests may not share an id."""
    rep = Replica(FakeProfile())
    rep.submit(Request("a", 0.0, 10, 10))
    with pytest.raises(ValueError, match="already in flight"):
        rep.submit(Request("a", 0.0, 10, 10))


def test_tokens_generated_follow_the_clock() -> None:
    """tokens_generated counts tokens whose step ended by now, one per decode step."""
    prof = FakeProfile()
    rep = Replica(prof)
    rep.submit(Request("a", 0.0, 100, 50))
    seen = []
    while rep.is_live("a"):
        t = rep.next_token_time()
        assert t is not None and t > rep.now
        rep.advance_to(t)
        if rep.is_live("a"):
            seen.append(rep.tokens_generated("a"))
    assert seen == list(range(1, 50))


def test_submit_during_a_jump_joins_at_the_next_step() -> None:
    """A request arriving mid-jump is prefilled right after the step in flight."""
    prof = FakeProfile()
    rep = Replica(prof)
    rep.submit(Request("a", 0.0, 10, 1000))
    rep.advance_to(0.1)
    end_before = rep.next_event_time()
    step_end = rep.next_token_time()
    assert end_before is not None and step_end is not None and end_before > 1.0
    rep.submit(Request("b", rep.now, 10, 5))
    assert rep.next_event_time() == pytest.approx(step_end)
    rep.advance_to(step_end)
    rep.advance_to(rep.next_event_time() or 0.0)
    assert rep.tokens_generated("b") == 1


def test_abort_frees_blocks_and_counts_abort() -> None:
    """An aborted request ends once, with finished_reason abort, and frees its KV."""
    rep = Replica(FakeProfile())
    rep.submit(Request("a", 0.0, 100, 500))
    rep.submit(Request("b", 0.0, 100, 200))
    assert rep.advance_to(0.3) == []
    rec = rep.abort("a")
    assert rec is not None and rec.finished_reason == "abort"
    assert 0 < rec.output_tokens < 500
    assert rep.abort("a") is None
    records = drain(rep)
    assert [r.request_id for r in records] == ["b"]
    assert rep.kv_blocks_used == 0
    snap = rep.metrics_snapshot()
    assert snap.success("abort") == 1 and snap.success("length") == 1


def test_finished_reason_stop_is_reported() -> None:
    """A request marked as ending naturally is recorded as 'stop'."""
    _, [rec] = run_requests(FakeProfile(), [Request("a", 0.0, 10, 3, finished_reason="stop")])
    assert rec.finished_reason == "stop"


def test_request_validation() -> None:
    """Empty prompts or outputs are refused with the request named."""
    with pytest.raises(ValueError, match="'x': prompt_tokens"):
        Request("x", 0.0, 0, 1)
    with pytest.raises(ValueError, match="output_tokens"):
        Request("x", 0.0, 1, 0)


def test_metrics_agree_with_records() -> None:
    """Counters and histogram counts equal what the records say."""
    prof = get_profile("llama-3-8b@p5.48xlarge")
    reqs = [Request(f"r{i}", 0.01 * i, 100 + i, 20 + i % 7) for i in range(200)]
    rep, records = run_requests(prof, reqs)
    snap = rep.metrics_snapshot()
    assert snap.generation_tokens == sum(r.output_tokens for r in records)
    assert snap.prompt_tokens == sum(r.prompt_tokens for r in records)
    assert snap.success("length") == 200
    assert snap.time_to_first_token.count == 200
    assert snap.e2e_request_latency.count == 200
    assert snap.request_queue_time.count == 200
    assert snap.inter_token_latency.count == sum(r.output_tokens - 1 for r in records)
    itl_sum = sum(r.finish_s - (r.first_token_s or 0.0) for r in records)
    assert snap.inter_token_latency.sum == pytest.approx(itl_sum, rel=1e-9)
    assert snap.time_to_first_token.sum == pytest.approx(sum(r.ttft_s or 0 for r in records))
    assert snap.num_requests_running == 0 and snap.kv_cache_usage == 0.0
