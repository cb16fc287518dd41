"""The replica's step loop: plan vLLM V1 steps, run them, apply their tokens.

`engine.replica` documents the model (what a step does, when a steady batch
becomes one multi-step jump); this is its engine room, kept apart from the
public surface so the hot path reads in one place. mypyc compiles it with
`engine.replica_state`, `engine.replica_counters` and `engine.replica`
in one group (prescaler_native/build.py).
"""

from __future__ import annotations

from collections import deque
from heapq import heappop
from math import expm1
from random import Random

from engine.replica_counters import ReplicaCounters
from engine.replica_state import (
    NO_FINISH,
    DecodeBatch,
    SeqState,
    StepPlan,
    bad_step,
    blocks_for,
)
from engine.requests import RequestRecord
from engine.scheduler import ProfileLike, SchedulerLimits

#: Largest relative gap allowed between the interpolated and the true step
#: time in the middle of a multi-step jump before the jump is split.
STEP_TIME_RTOL = 1e-3


class StepLoop(ReplicaCounters):
    """A replica's queues, KV blocks and step plan, and the loop that advances them."""

    def __init__(
        self,
        profile: ProfileLike,
        start_s: float,
        jump: bool,
        latency_histograms: bool,
        stall_seed: int = 0,
    ) -> None:
        """See `engine.replica.Replica` for what `jump`, `latency_histograms` and
        `stall_seed` do."""
        self.limits = SchedulerLimits.from_profile(profile)
        super().__init__(self.limits.max_model_len, latency_histograms)
        self._jump = jump
        self._step_time = profile.step_time_s
        self._now = float(start_s)
        self._free_blocks = self.limits.num_gpu_blocks
        self._running: list[SeqState] = []
        self._waiting: deque[SeqState] = deque()
        self._live: dict[str, SeqState] = {}
        self._plan: StepPlan | None = None
        self._pending_at: float | None = None  # a step must start at this time
        self._decode_batch: DecodeBatch | None = None  # see _commit
        self._finished: list[RequestRecord] = []
        # the time outside the scheduler (``RequestOverhead``): requests still on
        # their way in wait here, (join time, order, state), until they join
        overhead = getattr(profile, "request_overhead", None)
        self._in_fixed = 0.0 if overhead is None else float(overhead.in_fixed_s)
        self._in_per_token = 0.0 if overhead is None else float(overhead.in_per_prompt_token_s)
        if overhead is not None:
            self._out_fixed = float(overhead.out_fixed_s)
            self._out_per_token = float(overhead.out_per_output_token_s)
            self._way_out = self._out_fixed > 0.0 or self._out_per_token > 0.0
        self._has_inbound = self._in_fixed > 0.0 or self._in_per_token > 0.0
        self._inbound: list[tuple[float, int, SeqState]] = []
        self._inbound_order = 0
        # the profile's stalls (``EngineStalls``): seconds of steps left before the
        # next one, drawn from the replica's own generator
        stalls = getattr(profile, "stalls", None)
        share = 0.0 if stalls is None else float(stalls.share)
        self._stall_rng = Random(stall_seed)
        self._stall_mean = 0.0 if stalls is None else float(stalls.mean_s)
        self._admit_chance = 0.0 if stalls is None else float(stalls.admit_chance)
        self._admit_mean = 0.0 if stalls is None else float(stalls.admit_mean_s)
        self._stalling = share > 0.0 or self._admit_chance > 0.0
        # mean seconds of steps between two stalls while working
        self._stall_every = (
            float(stalls.work_between_s) if stalls is not None and share > 0.0 else 0.0
        )
        self._work_left = (
            self._stall_rng.expovariate(1.0 / self._stall_every) if share > 0.0 else float("inf")
        )
        self._plan_began = float(start_s)
        self._admit_drawn = False  # the pending step already waited its admission stall
        # the idle engine's wake-up (``EngineStalls.wake_s``): deterministic, so it
        # draws nothing from the stalls' generator; idle since the replica started
        self._wake = 0.0 if stalls is None else float(getattr(stalls, "wake_s", 0.0))
        self._wake_tau = 0.0 if stalls is None else float(getattr(stalls, "wake_tau_s", 0.0))
        cap = 0.0 if stalls is None else float(getattr(stalls, "wake_max_idle_s", 0.0))
        self._wake_cap = cap if cap > 0.0 else float("inf")
        self._idle_since = float(start_s)

    def advance_to(self, t: float) -> list[RequestRecord]:
        """Run every step ending at or before `t`; return requests that finished."""
        if t < self._now:
            raise ValueError(f"cannot advance to {t}: the replica is already at {self._now}")
        inbound = self._inbound
        if inbound and inbound[0][0] <= t:
            return self._advance_joining(t)
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
                if self._running or self._waiting:
                    self._pending_at = end_all
                else:
                    self._pending_at = None
                    self._idle_since = end_all
                if self._stalling:
                    self._stall_after(end_all)
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

    def _advance_joining(self, t: float) -> list[RequestRecord]:
        """`advance_to(t)` across the moments requests on their way in join the
        scheduler: each joins as a submission at that moment would."""
        inbound = self._inbound
        done: list[RequestRecord] = []
        while inbound and inbound[0][0] <= t:
            join_s = inbound[0][0]
            joining: list[SeqState] = []
            while inbound and inbound[0][0] == join_s:
                joining.append(heappop(inbound)[2])
            done.extend(self.advance_to(join_s))  # nothing left joins by join_s
            for seq in joining:
                self._waiting.append(seq)
            self._interrupt()
        done.extend(self.advance_to(t))
        return done

    def _next_join(self, t: float | None) -> float | None:
        """The earlier of `t` (a step's end, None when idle) and the next join."""
        join_s = self._inbound[0][0]
        return join_s if t is None or join_s < t else t

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
            # the scheduler had nothing: an idle engine first wakes up
            # (`EngineStalls.wake_s`); whatever arrives meanwhile joins the step
            now = self._now
            if self._wake > 0.0 and now > self._idle_since:
                idle = min(now - self._idle_since, self._wake_cap)
                now -= self._wake * expm1(-idle / self._wake_tau)
            self._pending_at = now

    def _stall_after(self, end: float) -> None:
        """Count the plan that ended at `end` as work; where the work before the next
        stall has run out, the next step waits out a stall (nothing waits while idle).

        The next step is planned when the stall ends (`_pending_at` in the
        future), so whatever arrives meanwhile joins it. The work the step ran
        past the stall's point counts towards the next one, so the share holds.
        """
        self._work_left -= end - self._plan_began
        if self._work_left > 0.0:
            return
        rng = self._stall_rng
        stall = rng.expovariate(1.0 / self._stall_mean)
        self._work_left += rng.expovariate(1.0 / self._stall_every)
        if self._pending_at is not None:
            self._pending_at = end + stall

    def _ensure_plan(self) -> None:
        """Plan the pending step, unless a stall still holds it (see `_stall_after`)."""
        pending = self._pending_at
        if self._plan is None and pending is not None and pending <= self._now:
            self._start_step(pending)

    def _preempt(self, seq: SeqState) -> None:
        self._free_blocks += seq.blocks
        seq.blocks = 0
        seq.computed = 0
        seq.preemptions += 1
        self.preemptions_total += 1
        self._waiting.appendleft(seq)

    def _start_step(self, t: float) -> None:
        """Schedule the step (or steady jump) starting at `t` (vLLM V1 `schedule()`)."""
        if self._admit_chance > 0.0 and self._admission_stall(t):
            return
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
            k_fin = NO_FINISH  # fewest tokens any running request still has to sample
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
            self._idle_since = t  # what it was due for went away (an abort)
            return
        self.events_run += 1
        all_decode = prefill == 0
        step_time = self._step_time
        dt0 = float(step_time(prefill, decodes, context))
        if not dt0 > 0.0:
            raise bad_step(dt0, prefill, decodes, context)
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
                        raise bad_step(dt_last, 0, m, context + m * (steps - 1))
                    slope = (dt_last - dt0) / (steps - 1)
                    if steps < 4:
                        break
                    mid = steps // 2
                    true_mid = float(step_time(0, m, context + m * mid))
                    if not true_mid > 0.0:
                        raise bad_step(true_mid, 0, m, context + m * mid)
                    if abs(dt0 + mid * slope - true_mid) <= STEP_TIME_RTOL * true_mid:
                        break
                    steps = mid
        plan = StepPlan(t, dt0, slope, steps, items, steps > 1 or all_decode)
        if self._stalling:
            self._plan_began = t
            if steps > 1 and plan.stop > t + self._work_left:
                # a jump ends with the step in which the work before the next stall
                # runs out
                plan.steps = min(steps, plan.steps_done_by(t + self._work_left) + 1)
                plan.steady = plan.steps > 1 or all_decode
                plan.restop()
        self._plan = plan

    def _admission_stall(self, t: float) -> bool:
        """Whether the step due at `t`, which may admit waiting requests, first waits
        out a stall (the profile's `admit_chance`); if so the step is due when it
        ends, and whatever arrives meanwhile joins it. One draw per such step."""
        if self._admit_drawn or not self._waiting or len(self._running) >= self.limits.max_num_seqs:
            self._admit_drawn = False
            return False
        rng = self._stall_rng
        if rng.random() >= self._admit_chance:
            return False
        self._admit_drawn = True
        self._pending_at = t + rng.expovariate(1.0 / self._admit_mean)
        return True

    def _kv_steps(self, items: list[tuple[SeqState, int]], k_fin: int) -> int:
        """Most identical decode steps (< `k_fin`) whose KV blocks fit in the free ones."""
        bs = self.limits.block_size
        free = self._free_blocks

        def fits(k: int) -> bool:
            need = 0
            for seq, _ in items:
                need += blocks_for(seq.computed + k, bs) - seq.blocks
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
        self, plan: StepPlan, n: int, t_end: float, done: list[RequestRecord], ahead: int = 0
    ) -> None:
        """Apply the first `n` steps of `plan`, ending at `t_end` (token counts,
        metrics, finishes). A steady plan's requests then hold KV blocks for
        `ahead` tokens past those computed (1: the jump goes on).

        Inter-token gaps of requests whose previous token came at the plan's
        start (nearly all) are one value: they are observed once, weighted.

        When the plan ends here (`ahead` 0) and every request left running is a
        decode, the pass also works out what the next plan's loop over the
        running requests would (:class:`DecodeBatch`): that loop is then skipped.
        """
        plan.owed = 0  # `n` includes them
        self._steps_run += n
        start = plan.start
        finished: list[SeqState] = []
        itl = self._itl if self._latency else None
        on_time = 0  # decodes whose previous token ended at `start`
        bs = self.limits.block_size
        bsm1 = bs - 1
        # the next plan's decode batch, gathered on the way (None: not all decodes)
        batch: list[tuple[SeqState, int]] | None = None if ahead else []
        grow: list[tuple[SeqState, int]] = []
        grow_total = context = 0
        k_fin = NO_FINISH
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
            self._decode_batch = DecodeBatch(batch, context, k_fin, grow, grow_total)
