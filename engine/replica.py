"""One vLLM replica as a pure discrete-event model (no I/O, no wall clock).

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
submit them all before asking for the next event. When the batch is steady (only decodes, nobody
admitted, nobody preempted) it stays identical until a request finishes or the
free KV blocks run out, so the replica plans all those k steps as ONE event.
Step times inside such a jump change as contexts grow: they are modelled as an
arithmetic series between the profile's step time at the first and at the
last step of the jump (exact when the step time is affine in context tokens);
when the profile's step time at the jump's middle step differs from that line
by more than `STEP_TIME_RTOL` (a roofline knee inside the jump), the jump is
halved until it does not. So token times are within 0.1 % of stepping one by
one.

Public API (all times on the replica's own clock, in seconds):

- `submit(request)`: a new request, arriving at `request.arrival_s >= now`.
- `next_event_time()`: when the batch next changes (a completion, a prefill
  chunk's end, a KV shortage), None when idle. A simulator jumps there.
- `next_token_time()`: the end of the step in flight (the next instant any
  request may get a token). The emulator wakes there to stream tokens.
- `advance_to(t)`: run every step that ends at or before t; returns the
  records of requests that finished (each exactly once).
- `tokens_generated(request_id)`: tokens a live request has produced by now.
- `abort(request_id)`: the client went away; returns its record.
- `metrics_snapshot()`: vLLM's counters, gauges and histograms now.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from engine.metrics import (
    ITL_BUCKETS_V1,
    REQUEST_LATENCY_BUCKETS_V1,
    TTFT_BUCKETS_V1,
    Histogram,
    MetricsSnapshot,
)
from engine.requests import FINISHED_REASONS, FinishedReason, Request, RequestRecord
from engine.scheduler import ProfileLike, SchedulerLimits

#: Largest relative gap allowed between the interpolated and the true step
#: time in the middle of a multi-step jump before the jump is split.
STEP_TIME_RTOL = 1e-3


class RequestRejected(ValueError):
    """A request vLLM would refuse at submission (too long for the model or the KV cache)."""


class _Seq:
    """Mutable per-request scheduler state (internal)."""

    __slots__ = (
        "aborted",
        "blocks",
        "computed",
        "first_sched_s",
        "first_token_s",
        "generated",
        "last_token_s",
        "preemptions",
        "prompt",
        "req",
        "target",
    )

    def __init__(self, req: Request) -> None:
        self.req = req
        self.prompt = req.prompt_tokens
        self.target = req.output_tokens
        self.computed = 0  # tokens whose KV is in the cache
        self.generated = 0  # output tokens sampled so far
        self.blocks = 0
        self.first_token_s: float | None = None
        self.first_sched_s: float | None = None
        self.last_token_s = 0.0
        self.preemptions = 0
        self.aborted = False


class _Plan:
    """`steps` identical-composition steps starting at `start`.

    Step i (0-based) lasts ``dt0 + i * slope``. A non-steady plan is a single
    step whose `items` carry each request's token count for that step.
    """

    __slots__ = ("dt0", "items", "slope", "start", "steady", "steps")

    def __init__(
        self,
        start: float,
        dt0: float,
        slope: float,
        steps: int,
        items: list[tuple[_Seq, int]],
        steady: bool,
    ) -> None:
        self.start = start
        self.dt0 = dt0
        self.slope = slope
        self.steps = steps
        self.items = items
        self.steady = steady

    def end(self, n: int) -> float:
        """End time of the n-th step (n >= 1)."""
        return self.start + n * self.dt0 + self.slope * n * (n - 1) / 2.0

    def steps_done_by(self, t: float) -> int:
        """Largest n <= steps with end(n) <= t."""
        span = t - self.start
        if span <= 0.0:
            return 0
        if abs(self.slope) < 1e-15:
            n = int(span / self.dt0)
        else:
            a = self.slope / 2.0
            b = self.dt0 - a
            disc = b * b + 4.0 * a * span
            n = int((-b + disc**0.5) / (2.0 * a)) if disc > 0 else self.steps
        n = max(0, min(n, self.steps))
        while n < self.steps and self.end(n + 1) <= t:
            n += 1
        while n > 0 and self.end(n) > t:
            n -= 1
        return n


def _blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


class Replica:
    """A vLLM V1 replica driven by events on its own clock (see module doc)."""

    def __init__(self, profile: ProfileLike, *, start_s: float = 0.0, jump: bool = True) -> None:
        """`jump=False` plans every step on its own (slow; a reference for tests)."""
        self.limits = SchedulerLimits.from_profile(profile)
        self._jump = jump
        self._step_time = profile.step_time_s
        self._now = float(start_s)
        self._free_blocks = self.limits.num_gpu_blocks
        self._running: list[_Seq] = []
        self._waiting: deque[_Seq] = deque()
        self._live: dict[str, _Seq] = {}
        self._plan: _Plan | None = None
        self._pending_at: float | None = None  # a step must start at this time
        self._finished: list[RequestRecord] = []
        # counters (vLLM metrics)
        self.steps_run = 0
        self.events_run = 0
        self.preemptions_total = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.success_total: dict[str, int] = dict.fromkeys(FINISHED_REASONS, 0)
        self._ttft = Histogram(TTFT_BUCKETS_V1)
        self._itl = Histogram(ITL_BUCKETS_V1)
        self._e2e = Histogram(REQUEST_LATENCY_BUCKETS_V1)
        self._queue = Histogram(REQUEST_LATENCY_BUCKETS_V1)

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
    def kv_blocks_used(self) -> int:
        return self.limits.num_gpu_blocks - self._free_blocks

    @property
    def kv_usage(self) -> float:
        """Fraction of KV blocks in use (vLLM's kv_cache_usage_perc, 0..1)."""
        return self.kv_blocks_used / self.limits.num_gpu_blocks

    def is_live(self, request_id: str) -> bool:
        return request_id in self._live

    def tokens_generated(self, request_id: str) -> int:
        """Output tokens the live request has produced by `now` (KeyError once finished)."""
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
        if _blocks_for(total, lim.block_size) > lim.num_gpu_blocks:
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
            self._finished.extend(self._advance(request.arrival_s))
        seq = _Seq(request)
        self._live[request.request_id] = seq
        self._waiting.append(seq)
        self._interrupt()

    def abort(self, request_id: str) -> RequestRecord | None:
        """The client went away now: drop the request; None if it is not live."""
        seq = self._live.pop(request_id, None)
        if seq is None:
            return None
        seq.aborted = True
        if seq in self._running:
            self._running.remove(seq)
            self._free_blocks += seq.blocks
            seq.blocks = 0
            self._interrupt()
        else:
            self._waiting.remove(seq)
        return self._finish(seq, self._now, "abort")

    def next_event_time(self) -> float | None:
        """When the batch composition next changes; None when idle."""
        self._ensure_plan()
        plan = self._plan
        return None if plan is None else plan.end(plan.steps)

    def next_token_time(self) -> float | None:
        """When the step in flight ends (tokens may appear); None when idle."""
        self._ensure_plan()
        plan = self._plan
        return None if plan is None else plan.end(1)

    def advance_to(self, t: float) -> list[RequestRecord]:
        """Run every step ending at or before `t`; return requests that finished."""
        if t < self._now:
            raise ValueError(f"cannot advance to {t}: the replica is already at {self._now}")
        out = self._advance(t)
        if self._finished:
            out = self._finished + out
            self._finished = []
        return out

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
        )

    # -------------------------------------------------------------- internals
    def _interrupt(self) -> None:
        """Something changed now: a multi-step jump ends with the step in flight."""
        plan = self._plan
        if plan is not None:
            if plan.steps > 1:
                plan.steps = 1
        elif self._pending_at is None and (self._waiting or self._running):
            self._pending_at = self._now

    def _ensure_plan(self) -> None:
        if self._plan is None and self._pending_at is not None:
            self._start_step(self._pending_at)

    def _advance(self, t: float) -> list[RequestRecord]:
        done: list[RequestRecord] = []
        while True:
            plan = self._plan
            if plan is None:
                if self._pending_at is not None and self._pending_at < t:
                    self._start_step(self._pending_at)
                    continue
                break
            end_all = plan.end(plan.steps)
            if end_all <= t:
                self._commit(plan, plan.steps, done)
                self._plan = None
                self._pending_at = end_all if (self._running or self._waiting) else None
                continue
            n = plan.steps_done_by(t)
            if n == 0:
                break
            self._commit(plan, n, done)
            # the rest of the jump continues from the end of step n
            plan.start = plan.end(n)
            plan.dt0 += n * plan.slope
            plan.steps -= n
            bs = self.limits.block_size
            for seq, _ in plan.items:
                if not seq.aborted:
                    self._grow_blocks(seq, _blocks_for(seq.computed + 1, bs))
            # loop again: re-basing may round the next step's end onto `t`
        self._now = t
        return done

    def _grow_blocks(self, seq: _Seq, blocks: int) -> None:
        need = blocks - seq.blocks
        if need > 0:
            self._free_blocks -= need
            seq.blocks = blocks
            if self._free_blocks < 0:  # pragma: no cover - guarded by planning
                raise AssertionError("KV blocks over-allocated")

    def _preempt(self, seq: _Seq) -> None:
        self._free_blocks += seq.blocks
        seq.blocks = 0
        seq.computed = 0
        seq.preemptions += 1
        self.preemptions_total += 1
        self._waiting.appendleft(seq)

    def _start_step(self, t: float) -> None:
        """Schedule the step (or steady jump) starting at `t` (vLLM V1 `schedule()`)."""
        self._pending_at = None
        lim = self.limits
        bs = lim.block_size
        running = self._running
        waiting = self._waiting
        bsm1 = bs - 1
        chunked = lim.enable_chunked_prefill
        max_seqs = lim.max_num_seqs
        for _attempt in range(2):
            budget = lim.max_num_batched_tokens
            items: list[tuple[_Seq, int]] = []
            append = items.append
            preempted = False
            prefill = decodes = context = 0
            free = self._free_blocks
            i = 0
            n_running = len(running)
            while i < n_running and budget > 0:
                seq = running[i]
                computed = seq.computed
                new = seq.prompt + seq.generated - computed
                if new > budget:
                    new = budget
                need = (computed + new + bsm1) // bs - seq.blocks
                if need > free:
                    self._free_blocks = free
                    scheduled = True
                    while need > self._free_blocks:
                        victim = running.pop()
                        self._preempt(victim)
                        preempted = True
                        if victim is seq:
                            scheduled = False
                            break
                    free = self._free_blocks
                    n_running = len(running)
                    if not scheduled:
                        break
                if need > 0:
                    free -= need
                    seq.blocks += need
                append((seq, new))
                if new == 1 and seq.generated > 0 and computed + 1 == seq.prompt + seq.generated:
                    decodes += 1
                else:
                    prefill += new
                context += computed
                budget -= new
                i += 1
            admitted = 0
            if not preempted:
                while waiting and budget > 0 and len(running) < max_seqs:
                    seq = waiting[0]
                    computed = seq.computed
                    new = seq.prompt + seq.generated - computed
                    if not chunked and new > budget:
                        break
                    if new > budget:
                        new = budget
                    need = (computed + new + bsm1) // bs - seq.blocks
                    if need > free:
                        break
                    waiting.popleft()
                    running.append(seq)
                    free -= need
                    seq.blocks += need
                    if seq.first_sched_s is None:
                        seq.first_sched_s = t
                    append((seq, new))
                    prefill += new
                    context += computed
                    budget -= new
                    admitted += 1
            self._free_blocks = free
            if items:
                break
            if not preempted:
                break
        if not items:
            if running or waiting:  # pragma: no cover - submit() rejects what cannot fit
                raise AssertionError("scheduler made no progress with work queued")
            return
        self.events_run += 1
        all_decode = prefill == 0
        dt0 = self._step(prefill, decodes, context)
        steps = 1
        slope = 0.0
        if (
            self._jump
            and all_decode
            and not preempted
            and admitted == 0
            and len(items) == len(running)
        ):
            steps = self._steady_steps(items)
            if steps > 1:
                m = len(items)
                while True:
                    dt_last = self._step(0, m, context + m * (steps - 1))
                    slope = (dt_last - dt0) / (steps - 1)
                    if steps < 4:
                        break
                    mid = steps // 2
                    true_mid = self._step(0, m, context + m * mid)
                    if abs(dt0 + mid * slope - true_mid) <= STEP_TIME_RTOL * true_mid:
                        break
                    steps = mid
        self._plan = _Plan(t, dt0, slope, steps, items, steps > 1 or all_decode)

    def _step(self, prefill: int, decodes: int, context: int) -> float:
        dt = self._step_time(prefill, decodes, context)
        if not dt > 0.0:
            raise ValueError(
                f"profile step time must be > 0, got {dt} for batch "
                f"(prefill={prefill}, decodes={decodes}, context={context})"
            )
        return float(dt)

    def _steady_steps(self, items: list[tuple[_Seq, int]]) -> int:
        """How many identical decode steps fit before a finish or a KV shortage."""
        k_fin = min(seq.target - seq.generated for seq, _ in items)
        if k_fin <= 1:
            return 1
        bs = self.limits.block_size
        free = self._free_blocks

        def fits(k: int) -> bool:
            need = 0
            for seq, _ in items:
                need += _blocks_for(seq.computed + k, bs) - seq.blocks
            return need <= free

        if fits(k_fin):
            return k_fin
        lo, hi = 1, k_fin  # fits(lo) is true (step 1 was allocated), fits(hi) false
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def _commit(self, plan: _Plan, n: int, done: list[RequestRecord]) -> None:
        """Apply the first `n` steps of `plan` (token counts, metrics, finishes).

        Inter-token gaps of requests whose previous token came at the plan's
        start (nearly all) are one value: they are observed once, weighted.
        """
        self.steps_run += n
        start = plan.start
        t_first = start + plan.dt0
        t_end = plan.end(n)
        finished: list[_Seq] = []
        itl = self._itl
        on_time = 0  # decodes whose previous token ended at `start`
        if plan.steady:
            live = 0
            bs = self.limits.block_size
            bsm1 = bs - 1
            free = self._free_blocks
            for seq, _ in plan.items:
                if seq.aborted:
                    continue
                live += 1
                if seq.last_token_s == start:
                    on_time += 1
                else:
                    itl.observe(t_first - seq.last_token_s)
                computed = seq.computed + n
                seq.computed = computed
                seq.generated += n
                seq.last_token_s = t_end
                need = (computed + bsm1) // bs - seq.blocks
                if need > 0:
                    free -= need
                    seq.blocks += need
                if seq.generated >= seq.target:
                    finished.append(seq)
            if free < 0:  # pragma: no cover - guarded by planning
                raise AssertionError("KV blocks over-allocated")
            self._free_blocks = free
            if on_time:
                itl.observe(plan.dt0, on_time)
            if n > 1:
                itl.observe_arithmetic(plan.dt0 + plan.slope, plan.slope, n - 1, live)
            self.generation_tokens_total += n * live
        else:
            generated_now = 0
            for seq, new in plan.items:
                if seq.aborted:
                    continue
                computed = seq.computed + new
                seq.computed = computed
                if computed == seq.prompt + seq.generated:
                    seq.generated += 1
                    generated_now += 1
                    if seq.first_token_s is None:
                        seq.first_token_s = t_end
                        self._ttft.observe(t_end - seq.req.arrival_s)
                        self.prompt_tokens_total += seq.prompt
                    elif seq.last_token_s == start:
                        on_time += 1
                    else:
                        itl.observe(t_end - seq.last_token_s)
                    seq.last_token_s = t_end
                    if seq.generated >= seq.target:
                        finished.append(seq)
            if on_time:
                itl.observe(t_end - start, on_time)
            self.generation_tokens_total += generated_now
        if finished:
            gone = set(map(id, finished))
            self._running = [s for s in self._running if id(s) not in gone]
            for seq in finished:
                self._free_blocks += seq.blocks
                seq.blocks = 0
                del self._live[seq.req.request_id]
                done.append(self._finish(seq, t_end, seq.req.finished_reason))

    def _finish(self, seq: _Seq, t: float, reason: FinishedReason) -> RequestRecord:
        req = seq.req
        self.success_total[reason] += 1
        self._e2e.observe(t - req.arrival_s)
        if seq.first_sched_s is not None:
            self._queue.observe(seq.first_sched_s - req.arrival_s)
        return RequestRecord(
            request_id=req.request_id,
            arrival_s=req.arrival_s,
            first_token_s=seq.first_token_s,
            finish_s=t,
            prompt_tokens=req.prompt_tokens,
            output_tokens=seq.generated,
            preemptions=seq.preemptions,
            finished_reason=reason,
            first_scheduled_s=seq.first_sched_s,
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
