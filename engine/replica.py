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
- `metrics_snapshot()`: vLLM's counters, gauges and histograms now
  (`Replica(..., latency_histograms=False)` keeps the latency histograms
  empty, for a simulator that never reads them: they cost a large share of
  its time; records, counters and gauges are the same either way).
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
    request_token_buckets,
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
        self.last_token_s = 0.0  # kept only for the inter-token histogram
        self.preemptions = 0
        self.aborted = False


class _Plan:
    """`steps` identical-composition steps starting at `start`.

    Step i (0-based) lasts ``dt0 + i * slope``. A non-steady plan is a single
    step whose `items` carry each request's token count for that step.
    `stop` caches ``end(steps)``, the next event time a simulator asks for
    after every change: whoever changes `start`, `dt0` or `steps` calls
    `restop()`. `owed` counts steps of a steady jump already behind `start`
    whose tokens are not yet applied to its requests (see `Replica._settle`).
    """

    __slots__ = ("dt0", "items", "owed", "slope", "start", "steady", "steps", "stop")

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
        self.stop = start + steps * dt0 + slope * steps * (steps - 1) / 2.0
        self.owed = 0

    def end(self, n: int) -> float:
        """End time of the n-th step (n >= 1)."""
        return self.start + n * self.dt0 + self.slope * n * (n - 1) / 2.0

    def restop(self) -> None:
        """Recompute `stop` after `start`, `dt0` or `steps` changed."""
        self.stop = self.end(self.steps)

    def steps_done_by(self, t: float) -> int:
        """Largest n <= steps with end(n) <= t (`end` written out: a hot path)."""
        start = self.start
        span = t - start
        if span <= 0.0:
            return 0
        dt0 = self.dt0
        slope = self.slope
        steps = self.steps
        if abs(slope) < 1e-15:
            n = int(span / dt0)
        else:
            a = slope / 2.0
            b = dt0 - a
            disc = b * b + 4.0 * a * span
            n = int((-b + disc**0.5) / (2.0 * a)) if disc > 0 else steps
        if n > steps:
            n = steps
        if n < 0:
            n = 0
        while n < steps and start + (n + 1) * dt0 + slope * (n + 1) * n / 2.0 <= t:
            n += 1
        while n > 0 and start + n * dt0 + slope * n * (n - 1) / 2.0 > t:
            n -= 1
        return n


class _DecodeBatch:
    """What the planner's loop over the running requests yields when all decode.

    Gathered by the commit that ends a plan, in the same pass over the
    requests: `items` is the running list in order, each with one token;
    `grow` the blocks each must add to hold that token (`grow_total` in all);
    `context` the KV tokens they read; `k_fin` the fewest tokens any still
    has to sample. Valid until the running list or a request's state changes
    (the next plan consumes it; an abort drops it).
    """

    __slots__ = ("context", "grow", "grow_total", "items", "k_fin")

    def __init__(
        self,
        items: list[tuple[_Seq, int]],
        context: int,
        k_fin: int,
        grow: list[tuple[_Seq, int]],
        grow_total: int,
    ) -> None:
        self.items = items
        self.context = context
        self.k_fin = k_fin
        self.grow = grow
        self.grow_total = grow_total


_NO_FINISH = 1 << 62
"""Above any request's remaining output tokens (the planner's running minimum starts here)."""


def _blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def _bad_step(dt: float, prefill: int, decodes: int, context: int) -> ValueError:
    """The error for a profile whose step time is not a positive number."""
    return ValueError(
        f"profile step time must be > 0, got {dt} for batch "
        f"(prefill={prefill}, decodes={decodes}, context={context})"
    )


class Replica:
    """A vLLM V1 replica driven by events on its own clock (see module doc)."""

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
        self.limits = SchedulerLimits.from_profile(profile)
        self._jump = jump
        self._latency = latency_histograms
        self._step_time = profile.step_time_s
        self._now = float(start_s)
        self._free_blocks = self.limits.num_gpu_blocks
        self._running: list[_Seq] = []
        self._waiting: deque[_Seq] = deque()
        self._live: dict[str, _Seq] = {}
        self._plan: _Plan | None = None
        self._pending_at: float | None = None  # a step must start at this time
        self._decode_batch: _DecodeBatch | None = None  # see _commit
        self._finished: list[RequestRecord] = []
        # counters (vLLM metrics)
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
        self._prompt_len = Histogram(request_token_buckets(self.limits.max_model_len))
        self._generation_len = Histogram(request_token_buckets(self.limits.max_model_len))

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
            # keeps what finished on the way (and what had) for the next advance_to
            self._finished = self.advance_to(request.arrival_s)
        seq = _Seq(request)
        self._live[request.request_id] = seq
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
        else:
            self._waiting.remove(seq)
        return self._finish(seq, self._now, "abort")

    def next_event_time(self) -> float | None:
        """When the batch composition next changes; None when idle."""
        plan = self._plan
        if plan is None:
            if self._pending_at is None:
                return None
            self._start_step(self._pending_at)
            plan = self._plan
            if plan is None:  # pragma: no cover - a pending step always plans work
                return None
        return plan.stop

    def next_token_time(self) -> float | None:
        """When the step in flight ends (tokens may appear); None when idle."""
        self._ensure_plan()
        plan = self._plan
        return None if plan is None else plan.end(1)

    def advance_to(self, t: float) -> list[RequestRecord]:
        """Run every step ending at or before `t`; return requests that finished."""
        if t < self._now:
            raise ValueError(f"cannot advance to {t}: the replica is already at {self._now}")
        done = self._finished  # finished while a submission advanced the clock
        if done:
            self._finished = []
        else:
            done = []
        while True:
            plan = self._plan
            if plan is None:
                pending = self._pending_at
                if pending is not None and pending < t:
                    self._start_step(pending)
                    continue
                break
            end_all = plan.stop
            if end_all <= t:
                self._commit(plan, plan.owed + plan.steps, end_all, done)
                self._plan = None
                self._pending_at = end_all if (self._running or self._waiting) else None
                continue
            n = plan.steps_done_by(t)
            if n == 0:
                break
            t_n = plan.end(n)
            # only a steady jump has steps left here (a single step is all or
            # nothing), and no request finishes within it
            if self._latency:
                # the step in flight after step n holds the blocks its token
                # needs, taken in the same pass (`ahead=1`)
                self._commit(plan, n, t_n, done, ahead=1)
            else:
                # owed: applied with the jump's last steps, in one pass
                # (an arrival cuts a jump here about once per request), or
                # by `_settle` when someone looks before that
                plan.owed += n
            # the rest of the jump continues from the end of step n
            plan.start = t_n
            plan.dt0 += n * plan.slope
            plan.steps -= n
            plan.restop()
            # loop again: re-basing may round the next step's end onto `t`
        self._now = t
        return done

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

    # -------------------------------------------------------------- internals
    def _settle(self) -> None:
        """Apply the steps a jump owes its requests (see `advance_to`).

        Without latency histograms, a jump cut by an arrival leaves the steps
        already run as a count on the plan; its next commit applies them with
        the rest. Anything that reads per-request state, blocks or counters
        first calls this, so it sees exactly what applying them at once gives.
        """
        plan = self._plan
        if plan is not None and plan.owed:
            # their end is the plan's start; no request finishes within them
            self._commit(plan, plan.owed, plan.start, [], ahead=1)

    def _interrupt(self) -> None:
        """Something changed now: a multi-step jump ends with the step in flight."""
        plan = self._plan
        if plan is not None:
            if plan.steps > 1:
                plan.steps = 1
                plan.restop()
        elif self._pending_at is None and (self._waiting or self._running):
            self._pending_at = self._now

    def _ensure_plan(self) -> None:
        if self._plan is None and self._pending_at is not None:
            self._start_step(self._pending_at)

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
        batch = self._decode_batch
        self._decode_batch = None
        if batch is not None and (
            len(batch.items) > lim.max_num_batched_tokens or batch.grow_total > self._free_blocks
        ):
            batch = None  # the budget or the KV blocks run short: the full loop decides
        for _attempt in range(2):
            budget = lim.max_num_batched_tokens
            preempted = False
            prefill = decodes = context = 0
            k_fin = _NO_FINISH  # fewest tokens any running request still has to sample
            free = self._free_blocks
            if batch is not None:
                # every running request decodes one token and its block fits:
                # what the loop below would find, gathered by the last commit
                items = batch.items
                append = items.append
                for seq, need in batch.grow:
                    seq.blocks += need
                free -= batch.grow_total
                decodes = len(items)
                budget -= decodes
                context = batch.context
                k_fin = batch.k_fin
                batch = None
                n_running = 0
            else:
                items = []
                append = items.append
                n_running = len(running)
            i = 0
            while i < n_running and budget > 0:
                seq = running[i]
                computed = seq.computed
                generated = seq.generated
                new = seq.prompt + generated - computed
                # one token whose KV completes the sequence: a decode (the
                # budget is >= 1 here, so it is never cut)
                decode = new == 1 and generated > 0
                if new > budget:
                    new = budget
                need = (computed + new + bsm1) // bs - seq.blocks
                if need > 0:
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
                    free -= need
                    seq.blocks += need
                append((seq, new))
                if decode:
                    decodes += 1
                else:
                    prefill += new
                left = seq.target - generated
                if left < k_fin:
                    k_fin = left
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
        step_time = self._step_time
        dt0 = float(step_time(prefill, decodes, context))
        if not dt0 > 0.0:
            raise _bad_step(dt0, prefill, decodes, context)
        steps = 1
        slope = 0.0
        if (
            self._jump
            and all_decode
            and not preempted
            and admitted == 0
            and len(items) == len(running)
            and k_fin > 1
        ):
            # steady: identical decode steps until a request finishes (k_fin)
            # or the free KV blocks run out, whichever comes first. Each request
            # holds ceil((computed + 1) / bs) blocks now, so k more tokens need at
            # most ceil(k / bs) more each: when that fits, skip the exact count.
            m = len(items)
            if m * ((k_fin + bsm1) // bs) <= free:
                steps = k_fin
            else:
                need = 0
                for seq, _ in items:
                    need += (seq.computed + k_fin + bsm1) // bs - seq.blocks
                steps = k_fin if need <= free else self._kv_steps(items, k_fin)
            if steps > 1:
                while True:
                    dt_last = float(step_time(0, m, context + m * (steps - 1)))
                    if not dt_last > 0.0:
                        raise _bad_step(dt_last, 0, m, context + m * (steps - 1))
                    slope = (dt_last - dt0) / (steps - 1)
                    if steps < 4:
                        break
                    mid = steps // 2
                    true_mid = float(step_time(0, m, context + m * mid))
                    if not true_mid > 0.0:
                        raise _bad_step(true_mid, 0, m, context + m * mid)
                    if abs(dt0 + mid * slope - true_mid) <= STEP_TIME_RTOL * true_mid:
                        break
                    steps = mid
        self._plan = _Plan(t, dt0, slope, steps, items, steps > 1 or all_decode)

    def _kv_steps(self, items: list[tuple[_Seq, int]], k_fin: int) -> int:
        """Most identical decode steps (< `k_fin`) whose KV blocks fit in the free ones."""
        bs = self.limits.block_size
        free = self._free_blocks

        def fits(k: int) -> bool:
            need = 0
            for seq, _ in items:
                need += _blocks_for(seq.computed + k, bs) - seq.blocks
            return need <= free

        lo, hi = 1, k_fin  # fits(lo) is true (step 1 was allocated), fits(hi) false
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def _commit(
        self, plan: _Plan, n: int, t_end: float, done: list[RequestRecord], ahead: int = 0
    ) -> None:
        """Apply the first `n` steps of `plan`, ending at `t_end` (token counts,
        metrics, finishes). A steady plan's requests then hold KV blocks for
        `ahead` tokens past those computed (1: the jump goes on).

        Inter-token gaps of requests whose previous token came at the plan's
        start (nearly all) are one value: they are observed once, weighted.

        When the plan ends here (`ahead` 0) and every request left running is a
        decode, the pass also works out what the next plan's loop over the
        running requests would (:class:`_DecodeBatch`): that loop is then skipped.
        """
        plan.owed = 0  # `n` includes them
        self._steps_run += n
        start = plan.start
        finished: list[_Seq] = []
        itl = self._itl if self._latency else None
        on_time = 0  # decodes whose previous token ended at `start`
        bs = self.limits.block_size
        bsm1 = bs - 1
        # the next plan's decode batch, gathered on the way (None: not all decodes)
        batch: list[tuple[_Seq, int]] | None = None if ahead else []
        grow: list[tuple[_Seq, int]] = []
        grow_total = context = 0
        k_fin = _NO_FINISH
        if plan.steady:
            items = plan.items
            live = len(items)
            free = self._free_blocks
            t_first = start + plan.dt0
            for seq, _ in items:
                if seq.aborted:
                    live -= 1
                    continue
                if itl is not None:  # (last_token_s only feeds this histogram)
                    if seq.last_token_s == start:
                        on_time += 1
                    else:
                        itl.observe(t_first - seq.last_token_s)
                    seq.last_token_s = t_end
                computed = seq.computed + n
                seq.computed = computed
                generated = seq.generated + n
                seq.generated = generated
                blocks = seq.blocks
                need = (computed + ahead + bsm1) // bs - blocks
                if need > 0:
                    free -= need
                    blocks += need
                    seq.blocks = blocks
                left = seq.target - generated
                if left <= 0:
                    finished.append(seq)
                elif batch is not None:
                    # its next step decodes one token: computed + 1 must fit
                    need = (computed + bs) // bs - blocks
                    if need > 0:
                        grow.append((seq, need))
                        grow_total += need
                    if left < k_fin:
                        k_fin = left
                    context += computed
                    batch.append((seq, 1))
            if free < 0:  # pragma: no cover - guarded by planning
                raise AssertionError("KV blocks over-allocated")
            self._free_blocks = free
            if itl is not None:
                if on_time:
                    itl.observe(plan.dt0, on_time)
                if n > 1:
                    itl.observe_arithmetic(plan.dt0 + plan.slope, plan.slope, n - 1, live)
            self._generation_tokens += n * live
        else:
            generated_now = 0
            for seq, new in plan.items:
                if seq.aborted:
                    continue
                computed = seq.computed + new
                seq.computed = computed
                generated = seq.generated
                if computed != seq.prompt + generated:
                    batch = None  # still in prefill
                    continue
                generated += 1
                seq.generated = generated
                generated_now += 1
                if seq.first_token_s is None:
                    seq.first_token_s = t_end
                    if itl is not None:
                        self._ttft.observe(t_end - seq.req.arrival_s)
                    self.prompt_tokens_total += seq.prompt
                elif itl is not None:
                    if seq.last_token_s == start:
                        on_time += 1
                    else:
                        itl.observe(t_end - seq.last_token_s)
                seq.last_token_s = t_end
                left = seq.target - generated
                if left <= 0:
                    finished.append(seq)
                elif batch is not None:
                    need = (computed + bs) // bs - seq.blocks
                    if need > 0:
                        grow.append((seq, need))
                        grow_total += need
                    if left < k_fin:
                        k_fin = left
                    context += computed
                    batch.append((seq, 1))
            if on_time and itl is not None:
                itl.observe(t_end - start, on_time)
            self._generation_tokens += generated_now
        if finished:
            remove = self._running.remove  # one or two finish per step: C-level search
            for seq in finished:
                remove(seq)
            for seq in finished:
                self._free_blocks += seq.blocks
                seq.blocks = 0
                del self._live[seq.req.request_id]
                done.append(self._finish(seq, t_end, seq.req.finished_reason))
        if batch is not None and len(batch) == len(self._running):
            # the running list is exactly `batch` (same order): a request left out
            # of this plan (no token budget) would make the lengths differ
            self._decode_batch = _DecodeBatch(batch, context, k_fin, grow, grow_total)

    def _finish(self, seq: _Seq, t: float, reason: FinishedReason) -> RequestRecord:
        req = seq.req
        self.success_total[reason] += 1
        if self._latency:
            self._e2e.observe(t - req.arrival_s)
        self._prompt_len.observe(req.prompt_tokens)
        self._generation_len.observe(seq.generated)
        if seq.first_sched_s is not None and self._latency:
            self._queue.observe(seq.first_sched_s - req.arrival_s)
        # positional (field order of RequestRecord): keywords cost a third more
        # on a record made once per request
        return RequestRecord(
            req.request_id,
            req.arrival_s,
            seq.first_token_s,
            t,
            req.prompt_tokens,
            seq.generated,
            seq.preemptions,
            reason,
            seq.first_sched_s,
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
