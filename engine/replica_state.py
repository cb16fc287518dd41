"""The replica model's per-request and per-step state, and a plan's step-end arithmetic.

Kept apart from the step loop (`engine.replica_loop`) that mutates it, so the
loop reads as the scheduler it models. mypyc compiles both in one group: the
loop reads these slots directly.
"""

from __future__ import annotations

from engine.requests import Request


class SeqState:
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


class StepPlan:
    """`steps` identical-composition steps starting at `start`.

    Step i (0-based) lasts ``dt0 + i * slope``. A non-steady plan is a single
    step whose `items` carry each request's token count for that step.
    `stop` caches ``end(steps)``, the next event time a simulator asks for
    after every change: whoever changes `start`, `dt0` or `steps` calls
    `restop()`. `owed` counts steps of a steady jump already behind `start`
    whose tokens are not yet applied to its requests (see `StepLoop._settle`).
    """

    __slots__ = ("dt0", "items", "owed", "slope", "start", "steady", "steps", "stop")

    def __init__(
        self,
        start: float,
        dt0: float,
        slope: float,
        steps: int,
        items: list[tuple[SeqState, int]],
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


class DecodeBatch:
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
        items: list[tuple[SeqState, int]],
        context: int,
        k_fin: int,
        grow: list[tuple[SeqState, int]],
        grow_total: int,
    ) -> None:
        self.items = items
        self.context = context
        self.k_fin = k_fin
        self.grow = grow
        self.grow_total = grow_total


NO_FINISH = 1 << 62
"""Above any request's remaining output tokens (the planner's running minimum starts here)."""


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def bad_step(dt: float, prefill: int, decodes: int, context: int) -> ValueError:
    """The error for a profile whose step time is not a positive number."""
    return ValueError(
        f"profile step time must be > 0, got {dt} for batch "
        f"(prefill={prefill}, decodes={decodes}, context={context})"
    )
