"""One vLLM replica as a pure discrete-event model (no I/O, no wall clock).

The scheduler follows vLLM V1 (`vllm/v1/core/sched/scheduler.py`): running
requests first (a decode token or the next prefill chunk), then waiting ones
first-come-first-served within `max_num_batched_tokens` and `max_num_seqs`
(a prompt only whole without chunked prefill); KV blocks are allocated as
tokens are computed, and a shortage preempts the newest running request by
recompute (that step admits nobody). No prefix caching, speculative decoding
or priorities.

Time advances by events: a step is fixed when the clock is first asked about
it, so submit simultaneous arrivals before asking. A steady decode batch is
one jump whose step times follow an arithmetic series, halved until within
`engine.replica_loop.STEP_TIME_RTOL` of stepping one by one (the step loop).
"""

from __future__ import annotations

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
        stall_seed: int = 0,
    ) -> None:
        """`jump=False` plans every step on its own (slow; a reference for tests).

        `latency_histograms=False` leaves the TTFT, inter-token, e2e and
        queue-time histograms empty: a simulator that reads only the counters
        and gauges skips the per-step histogram work (a large share of its
        time; the records and every counter are the same either way).

        `stall_seed` seeds the replica's own stalls (the profile's `stalls`):
        a simulation gives each replica its own, so they do not stall together.
        """
        super().__init__(profile, float(start_s), jump, latency_histograms, stall_seed)

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
        """Queue `request` at its arrival time (advancing there first if needed). With a
        profile's `request_overhead` it reaches the scheduler after its way in, and its
        record's times are the client's; vLLM's histograms stay the engine's own."""
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
            pending = self._pending_at
            if pending is None:
                return self._next_join(None) if self._inbound else None
            if pending <= self._now:
                self._start_step(pending)
            plan = self._plan
            if plan is None:
                # a stall holds the next step until then (`EngineStalls`); it is
                # planned when the stall ends, with whatever arrived meanwhile
                held = self._pending_at
                if held is None:  # pragma: no cover - a pending step always plans work
                    return None
                return self._next_join(held) if self._inbound else held
        return self._next_join(plan.stop) if self._inbound else plan.stop

    def next_token_time(self) -> float | None:
        """When the step in flight ends (tokens may appear); None when idle."""
        self._ensure_plan()
        plan = self._plan
        # no plan but a step pending: a stall holds it until then
        end = self._pending_at if plan is None else plan.end(1)
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
