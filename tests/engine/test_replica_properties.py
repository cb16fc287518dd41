"""Invariants of the replica model under random workloads (hypothesis)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.replica import Replica
from engine.requests import Request, RequestRecord


@dataclass(frozen=True)
class Vllm:
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    enable_chunked_prefill: bool


@dataclass(frozen=True)
class Prof:
    vllm: Vllm
    kv_blocks: int
    knee: int = field(default=3000)

    def step_time_s(self, prefill_tokens: int, decode_seqs: int, context_tokens: int) -> float:
        # a roofline-like max(): exercises the jump splitting at the knee
        memory = 0.008 + 2e-6 * context_tokens
        knee = 0.002 if context_tokens > self.knee else 0.0
        compute = 1e-5 * (prefill_tokens + decode_seqs) + knee
        return 0.002 + max(memory, compute)


profiles = st.builds(
    lambda seqs, budget, bs, blocks, chunked: Prof(
        Vllm(2048, seqs, max(budget, seqs, 2048 if not chunked else 1), bs, chunked), blocks
    ),
    st.integers(1, 12),
    st.sampled_from([64, 256, 2048]),
    st.sampled_from([8, 16]),
    st.integers(40, 400),
    st.booleans(),
)
workloads = st.lists(
    st.tuples(
        st.floats(0.0, 0.3),  # gap to previous arrival
        st.integers(1, 600),  # prompt
        st.integers(1, 200),  # output
        st.booleans(),  # abort this one later?
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prof=profiles, work=workloads, jump=st.booleans())
def test_every_request_ends_once_with_its_tokens(
    prof: Prof, work: list[tuple[float, int, int, bool]], jump: bool
) -> None:
    """Each request ends exactly once; KV never over capacity; time monotone; counters agree."""
    rep = Replica(prof, jump=jump)
    cap = prof.kv_blocks * prof.vllm.block_size
    records: dict[str, RequestRecord] = {}
    submitted: dict[str, Request] = {}
    t = 0.0
    last_now = 0.0
    aborts: list[tuple[float, str]] = []

    def take(recs: list[RequestRecord]) -> None:
        for r in recs:
            assert r.request_id not in records, "finished twice"
            records[r.request_id] = r

    def check() -> None:
        nonlocal last_now
        assert 0 <= rep.kv_blocks_used <= rep.limits.num_gpu_blocks
        assert rep.now >= last_now
        last_now = rep.now

    for i, (gap, prompt, out, abort) in enumerate(work):
        t += gap
        prompt = min(prompt, cap - out, 2048 - out)
        if prompt < 1:
            continue
        req = Request(f"r{i}", t, prompt, out)
        for when, rid in sorted(a for a in aborts if a[0] <= t):
            take(rep.advance_to(when))
            check()
            rec = rep.abort(rid)
            if rec is not None:
                take([rec])
        aborts = [a for a in aborts if a[0] > t]
        take(rep.advance_to(t))
        check()
        rep.submit(req)
        submitted[req.request_id] = req
        if abort:
            aborts.append((t + 0.05 * out * 0.3, req.request_id))
    for when, rid in sorted(aborts):
        if when >= rep.now:
            take(rep.advance_to(when))
        rec = rep.abort(rid)
        if rec is not None:
            take([rec])
    while (nxt := rep.next_event_time()) is not None:
        assert nxt > rep.now or nxt == rep.now
        take(rep.advance_to(nxt))
        check()

    assert set(records) == set(submitted)
    assert rep.num_outstanding == 0 and rep.kv_blocks_used == 0
    for rid, rec in records.items():
        req = submitted[rid]
        if rec.finished_reason == "abort":
            assert rec.output_tokens < req.output_tokens
        else:
            assert rec.output_tokens == req.output_tokens
            assert rec.first_token_s is not None
            assert req.arrival_s < rec.first_token_s <= rec.finish_s
        assert rec.finish_s >= rec.arrival_s
    snap = rep.metrics_snapshot()
    assert snap.generation_tokens == sum(r.output_tokens for r in records.values())
    assert snap.num_preemptions == sum(r.preemptions for r in records.values())
    assert sum(c for _, c in snap.request_success) == len(records)
    assert snap.success("abort") == sum(r.finished_reason == "abort" for r in records.values())
    assert snap.e2e_request_latency.count == len(records)
    assert snap.time_to_first_token.count == sum(
        r.first_token_s is not None for r in records.values()
    )
    started = [r for r in records.values() if r.first_token_s is not None]
    assert snap.inter_token_latency.count == sum(r.output_tokens - 1 for r in started)


def _drive(rep: Replica, work: list[tuple[float, int, int, bool]]) -> list[object]:
    """Replay `work` (arrivals, some aborted later) and log every answer the replica gives."""
    cap = rep.limits.kv_tokens
    log: list[object] = []
    t = 0.0
    aborts: list[tuple[float, str]] = []
    for i, (gap, prompt, out, abort) in enumerate(work):
        t += gap
        prompt = min(prompt, cap - out, 2048 - out)
        if prompt < 1:
            continue
        for when, rid in sorted(a for a in aborts if a[0] <= t):
            log.append(rep.advance_to(when))
            log.append((rep.abort(rid), rep.kv_blocks_used))
        aborts = [a for a in aborts if a[0] > t]
        log.append(rep.advance_to(t))
        rep.submit(Request(f"r{i}", t, prompt, out))
        log.append((rep.next_event_time(), rep.next_token_time(), rep.kv_blocks_used))
        log.append((rep.generation_tokens_total, rep.steps_run, rep.num_running))
        if abort:
            aborts.append((t + 0.05 * out * 0.3, f"r{i}"))
    while (nxt := rep.next_event_time()) is not None:
        log.append(rep.advance_to(nxt))
        log.append((rep.kv_blocks_used, rep.generation_tokens_total, rep.events_run))
    return log


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prof=profiles, work=workloads, jump=st.booleans())
def test_skipping_latency_histograms_changes_nothing_else(
    prof: Prof, work: list[tuple[float, int, int, bool]], jump: bool
) -> None:
    """A simulator turns the latency histograms off for speed: every record, time,
    counter and gauge must stay what the full replica reports, and the
    histograms stay empty (the rest of /metrics is unchanged)."""
    full = Replica(prof, jump=jump)
    lean = Replica(prof, jump=jump, latency_histograms=False)
    assert _drive(lean, work) == _drive(full, work)
    a, b = full.metrics_snapshot(), lean.metrics_snapshot()
    assert (a.generation_tokens, a.prompt_tokens, a.request_success, a.num_preemptions) == (
        b.generation_tokens,
        b.prompt_tokens,
        b.request_success,
        b.num_preemptions,
    )
    for hist in (
        b.time_to_first_token,
        b.inter_token_latency,
        b.e2e_request_latency,
        b.request_queue_time,
    ):
        assert hist.count == 0
