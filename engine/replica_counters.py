"""What a replica counts: vLLM's counters and histograms, and a finished request's record.

A base of the step loop (`engine.replica_loop.StepLoop`) rather than an
object it holds, so the loop's hot path updates them as plain attributes;
mypyc compiles it in the same group.
"""

from __future__ import annotations

from engine.metrics import (
    ITL_BUCKETS_V1,
    REQUEST_LATENCY_BUCKETS_V1,
    TTFT_BUCKETS_V1,
    Histogram,
    request_token_buckets,
)
from engine.replica_state import SeqState
from engine.requests import FINISHED_REASONS, FinishedReason, RequestRecord


class ReplicaCounters:
    """vLLM's counters and histograms of one replica, and the record of each finish."""

    def __init__(self, max_model_len: int, latency_histograms: bool) -> None:
        """`latency_histograms=False` leaves the TTFT, inter-token, e2e and
        queue-time histograms empty (see `engine.replica.Replica`)."""
        self._latency = latency_histograms
        # the way out (``RequestOverhead``): the k-th token reaches the client
        # out_fixed + k x out_per_token after its step; records carry client times
        self._out_fixed = 0.0
        self._out_per_token = 0.0
        self._way_out = False  # either is set (one test per finish)
        self._steps_run = 0
        self.events_run = 0
        self.preemptions_total = 0
        self.prompt_tokens_total = 0
        self._generation_tokens = 0
        self.success_total: dict[str, int] = dict.fromkeys(FINISHED_REASONS, 0)
        self._ttft = Histogram(TTFT_BUCKETS_V1)
        self._itl = Histogram(ITL_BUCKETS_V1)
        self._e2e = Histogram(REQUEST_LATENCY_BUCKETS_V1)
        self._queue = Histogram(REQUEST_LATENCY_BUCKETS_V1)
        # finished requests' prompt and output lengths (vLLM's per-request
        # token histograms, bounded by this replica's max_model_len)
        self._prompt_len = Histogram(request_token_buckets(max_model_len))
        self._generation_len = Histogram(request_token_buckets(max_model_len))

    def _finish(self, seq: SeqState, t: float, reason: FinishedReason) -> RequestRecord:
        """Count a request that ended at `t` for `reason` and return its record."""
        req = seq.req
        self.success_total[reason] += 1
        if self._latency:
            self._e2e.observe(t - req.arrival_s)
        self._prompt_len.observe(req.prompt_tokens)
        self._generation_len.observe(seq.generated)
        if seq.first_sched_s is not None and self._latency:
            self._queue.observe(seq.first_sched_s - req.arrival_s)
        first = seq.first_token_s
        if self._way_out and reason != "abort":
            if first is not None:
                first += self._out_fixed + self._out_per_token
            t += self._out_fixed + self._out_per_token * seq.generated
        # positional (field order of RequestRecord): keywords cost a third more
        # on a record made once per request
        return RequestRecord(
            req.request_id,
            req.arrival_s,
            first,
            t,
            req.prompt_tokens,
            seq.generated,
            seq.preemptions,
            reason,
            seq.first_sched_s,
        )
