"""One vLLM replica as a pure discrete-event model (no I/O, no wall clock).

Three modules hold it, one job each: this one the public surface (request
checks, submission, abort, the clock's queries, the metrics snapshot),
`engine.replica_loop` the step loop (scheduling and applying steps),
`engine.replica_counters` vLLM's counters and histograms, with the state
they share in `engine.replica_state`.

The scheduler follows vLLM V1 (`vllm/v1/core/sched/scheduler.py`):

- every step first serves the *running* requests in admission order (a
  decode is one token; a request still in prefill gets its next chunk), then
  admits *waiting* requests first-come-first-served while the token budget
  (`max_num_batched_tokens`) and `max_num_seqs` allow; with chunked prefill
  on, the last admitted prompt may get a partial chunk; with it off, a prompt
  is admitted only whole;
- KV memory is paged in blocks of `block_size` tokens, allocated as tokens
  are computed; when a running request cannot get a block, the NEWEST running
  request is preempted (recompute: its blocks are freed, it goes back to the
  front of the waiting queue and later recomputes prompt + tokens generated so
  far); a step that preempted admits nobody;
- the step that finishes a request's prefill samples its first token; each
  decode step samples one token; a request finishes at the end of the step
  that sampled its last token and frees its blocks.
- Prefix caching, speculative decoding and priorities are not modelled.

Time advances by events. A step that starts at time s sees every request
submitted at or before s, except that a step is planned (and fixed) the first
time `next_event_time()` / `next_token_time()` is asked at s or time moves
past s: a caller that has several arrivals at the very same instant should
submit them all before asking for the next event. When the batch is steady
(only decodes, nobody admitted, nobody preempted) it stays identical until a
request finishes or the free KV blocks run out, so the replica plans all
those k steps as ONE event.
Step times inside such a jump change as contexts grow: they are modelled as an
arithmetic series between the profile's step time at the first and at the
last step of the jump (exact when the step time is affine in context tokens);
when the profile's step time at the jump's middle step differs from that line
by more than `engine.replica_loop.STEP_TIME_RTOL` (a roofline knee inside the
jump), the jump is halved until it does not. So token times are within that
tolerance (0.1 %) of stepping one by one.

Public API (all times on the replica's own clock, in seconds):

- `submit(request)`: a new request, arriving at `request.arrival_s >= now`.
  With a profile's `request_overhead`, it joins the scheduler after its way
  in (until then it is outstanding, not waiting), and its record's first
  token and finish are when the client gets them (after the way out);
  vLLM's histograms stay the engine's own (arrival to the step's end).
- `next_event_time()`: when the batch next changes (a completion, a prefill
  chunk's end, a KV shortage), None when idle. A simulator jumps there.
- `next_token_time()`: the end of the step in flight (the next instant any
  request may get a token). The emulator wakes there to stream tokens.
- `advance_to(t)`: run every step that ends at or before t; returns the
  records of requests that finished (each exactly once).
- `tokens_generated(request_id)`: tokens a live request has produced by now.
- `abort(request_id)`: the client went away; returns its record.
- `metrics_snapshot()`: vLLM's counters, gauges and histograms now
  (`Replica(..., latency_histograms=False)` keeps the latency histograms
  empty, for a simulator that never reads them: they cost a large share of
  its time; records, counters and gauges are the same either way).
"""

from __future__ import annotations

from collections.abc import Iterable
from heapq import heapify, heappush

from engine.metrics import MetricsSnapshot
from engine.replica_loop import StepLoop
from engine.replica_state import SeqState, blocks_for
from engine.requests import Request, RequestRecord
from engine.scheduler import ProfileLike


class RequestRejected(ValueError):
    """A request vLLM would refuse at submission (too long for the model or the KV cache)."""


class Replica(StepLoop):
    """A vLLM V1 replica driven by events on its own clock (see module doc).

    The request lifecycle (checks, submission, abort), the clock's queries and
    the metrics live here; the step loop they drive is `StepLoop`
    (`engine.replica_loop`), the counters `engine.replica_counters`.
    """

    def __init__(
        self,
        profile: ProfileLike,
        *,
        start_s: float = 0.0,
        jump: bool = True,
        latency_histograms: bool = True,
    ) -> None:
        """`jump=False` plans every step on its own (slow; a reference for tests).

        `latency_histograms=False` leaves the TTFT, inter-token, e2e and
        queue-time histograms empty: a simulator that reads only the counters
        and gauges skips the per-step histogram work (a large share of its
        time; the records and every counter are the same either way).
        """
        super().__init__(profile, float(start_s), jump, latency_histograms)

    # ------------------------------------------------------------------ state
    @property
    def now(self) -> float:
        return self._now

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_outstanding(self) -> int:
        return len(self._live)

    @property
    def kv_blocks_total(self) -> int:
        return self.limits.num_gpu_blocks

    @property
    def steps_run(self) -> int:
        """Engine steps (scheduler iterations) run so far."""
        self._settle()
        return self._steps_run

    @property
    def generation_tokens_total(self) -> int:
        """Output tokens sampled so far (vLLM's generation_tokens counter)."""
        self._settle()
        return self._generation_tokens

    @property
    def kv_blocks_used(self) -> int:
        self._settle()
        return self.limits.num_gpu_blocks - self._free_blocks

    @property
    def kv_usage(self) -> float:
        """Fraction of KV blocks in use (vLLM's kv_cache_usage_perc, 0..1)."""
        return self.kv_blocks_used / self.limits.num_gpu_blocks

    @property
    def way_out_s(self) -> tuple[float, float]:
        """(fixed, per output token) seconds from a token's step to its client
        (the profile's ``request_overhead``): the k-th token arrives fixed + k x per late."""
        return self._out_fixed, self._out_per_token

    def is_live(self, request_id: str) -> bool:
        return request_id in self._live

    def tokens_generated(self, request_id: str) -> int:
        """Output tokens the live request has produced by `now` (KeyError once finished)."""
        self._settle()
        return self._live[request_id].generated

    def check_request(self, prompt_tokens: int, output_tokens: int) -> None:
        """Raise RequestRejected if vLLM would refuse these lengths at submission."""
        lim = self.limits
        total = prompt_tokens + output_tokens
        if total > lim.max_model_len:
            raise RequestRejected(
                f"This model's maximum context length is {lim.max_model_len} tokens. "
                f"However, you requested {total} tokens ({prompt_tokens} in the messages, "
                f"{output_tokens} in the completion). Please reduce the length of the "
                "messages or completion."
            )
        if blocks_for(total, lim.block_size) > lim.num_gpu_blocks:
            raise RequestRejected(
                f"request needs {total} tokens of KV cache but the replica holds only "
                f"{lim.kv_tokens} ({lim.num_gpu_blocks} blocks of {lim.block_size})"
            )
        if not lim.enable_chunked_prefill and total - 1 > lim.max_num_batched_tokens:
            raise RequestRejected(
                f"with chunked prefill disabled a request of {total} tokens cannot be "
                f"recomputed within max_num_batched_tokens={lim.max_num_batched_tokens}"
            )

    # ------------------------------------------------------------ operations
    def submit(self, request: Request) -> None:
        """Queue `request` at its arrival time (advancing there first if needed)."""
        if request.request_id in self._live:
            raise ValueError(f"request id {request.request_id!r} is already in flight")
        if request.arrival_s < self._now:
            raise ValueError(
                f"request {request.request_id!r} arrives at {request.arrival_s} "
                f"but the replica is already at {self._now}: time never goes backwards"
            )
        self.check_request(request.prompt_tokens, request.output_tokens)
        if request.arrival_s > self._now:
            # keeps what finished on the way (and what had) for the next advance_to
            self._finished = self.advance_to(request.arrival_s)
        seq = SeqState(request)
        self._live[request.request_id] = seq
        if self._has_inbound:
            join_s = request.arrival_s + self._in_fixed + self._in_per_token * request.prompt_tokens
            if join_s > self._now:  # on its way in: it joins the scheduler then
                heappush(self._inbound, (join_s, self._inbound_order, seq))
                self._inbound_order += 1
                return
        self._waiting.append(seq)
        self._interrupt()

    def abort(self, request_id: str) -> RequestRecord | None:
        """The client went away now: drop the request; None if it is not live."""
        self._settle()
        seq = self._live.pop(request_id, None)
        if seq is None:
            return None
        seq.aborted = True
        if seq in self._running:
            self._decode_batch = None
            self._running.remove(seq)
            self._free_blocks += seq.blocks
            seq.blocks = 0
            self._interrupt()
        elif seq in self._waiting:
            self._waiting.remove(seq)
        else:  # still on its way in
            self._inbound = [item for item in self._inbound if item[2] is not seq]
            heapify(self._inbound)
        return self._finish(seq, self._now, "abort")

    def next_event_time(self) -> float | None:
        """When the batch composition next changes; None when idle."""
        plan = self._plan
        if plan is None:
            if self._pending_at is None:
                return self._next_join(None) if self._inbound else None
            self._start_step(self._pending_at)
            plan = self._plan
            if plan is None:  # pragma: no cover - a pending step always plans work
                return None
        return self._next_join(plan.stop) if self._inbound else plan.stop

    def next_token_time(self) -> float | None:
        """When the step in flight ends (tokens may appear); None when idle."""
        self._ensure_plan()
        plan = self._plan
        end = None if plan is None else plan.end(1)
        return self._next_join(end) if self._inbound else end

    def metrics_snapshot(self) -> MetricsSnapshot:
        return MetricsSnapshot(
            num_requests_running=len(self._running),
            num_requests_waiting=len(self._waiting),
            kv_cache_usage=self.kv_usage,
            num_preemptions=self.preemptions_total,
            prompt_tokens=self.prompt_tokens_total,
            generation_tokens=self.generation_tokens_total,
            request_success=tuple(self.success_total.items()),
            time_to_first_token=self._ttft.snapshot(),
            inter_token_latency=self._itl.snapshot(),
            e2e_request_latency=self._e2e.snapshot(),
            request_queue_time=self._queue.snapshot(),
            request_prompt_tokens=self._prompt_len.snapshot(),
            request_generation_tokens=self._generation_len.snapshot(),
        )


def run_requests(
    profile: ProfileLike,
    requests: Iterable[Request],
    *,
    start_s: float = 0.0,
    jump: bool = True,
) -> tuple[Replica, list[RequestRecord]]:
    """Replay `requests` (any order) through a fresh replica until all finish."""
    replica = Replica(profile, start_s=start_s, jump=jump)
    records: list[RequestRecord] = []
    for req in sorted(requests, key=lambda r: r.arrival_s):
        records.extend(replica.advance_to(req.arrival_s))
        replica.submit(req)
    while (t := replica.next_event_time()) is not None:
        records.extend(replica.advance_to(t))
    return replica, records
