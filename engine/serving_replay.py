"""A serving benchmark replayed through the engine model: what would this load measure?

``vllm bench serve`` sends N requests of given prompt and output lengths,
all at once, at a fixed rate, or through at most C concurrent clients, and
reports medians of TTFT, inter-token latency and throughput. The profile fit
(``engine.profile_fit``) and the real-vLLM bench need the same figures from
the engine, measured the same way: every streamed token's time, so the ITL
median is over all token gaps of all requests, as the benchmark's is.
Pure and deterministic: arrivals at a fixed rate are evenly spaced.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from heapq import heappop, heappush

from engine.replica import Replica
from engine.requests import Request
from engine.scheduler import ProfileLike


@dataclass(frozen=True)
class ServingLoad:
    """One benchmark run: ``num_requests`` alike requests."""

    num_requests: int
    prompt_tokens: int
    output_tokens: int
    #: requests in flight at most (a client waits for a slot); None: no cap
    max_concurrency: int | None = None
    #: one request every ``1 / request_rate`` s; None: all at once (the benchmark's ``inf``)
    request_rate: float | None = None
    #: the first ``max_concurrency`` arrivals spread evenly over this many seconds
    #: (a steady service's clients are out of step; a benchmark's start together)
    first_arrivals_over_s: float = 0.0
    #: each request's own (prompt, output) tokens (``prompt_tokens`` and
    #: ``output_tokens`` are then their rounded means)
    lengths: tuple[tuple[int, int], ...] | None = None
    #: the second each request becomes due (a recorded run's)
    send_offsets: tuple[float, ...] | None = None
    #: a client's mean pause before its next request, spread evenly over 0 to twice
    #: it (one that sends at once arrives exactly as a step ends: no real client does)
    think_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("lengths", "send_offsets"):
            value = getattr(self, name)
            if value is not None and len(value) != self.num_requests:
                raise ValueError(
                    f"ServingLoad: {name} has {len(value)} entries for {self.num_requests} requests"
                )
        if self.lengths is not None and any(p < 1 or o < 1 for p, o in self.lengths):
            raise ValueError("ServingLoad: every request's lengths must be >= 1")
        for name in ("num_requests", "prompt_tokens", "output_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"ServingLoad: {name} must be >= 1, got {getattr(self, name)}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(
                f"ServingLoad: max_concurrency must be >= 1, got {self.max_concurrency}"
            )
        if self.first_arrivals_over_s < 0:
            raise ValueError(
                f"ServingLoad: first_arrivals_over_s must be >= 0, got {self.first_arrivals_over_s}"
            )
        if not self.think_s >= 0:
            raise ValueError(f"ServingLoad: think_s must be >= 0, got {self.think_s}")
        if self.request_rate is not None and not self.request_rate > 0:
            raise ValueError(f"ServingLoad: request_rate must be > 0, got {self.request_rate}")


def steady_clients(
    num_requests: int, prompt_tokens: int, output_tokens: int, clients: int, itl_s: float
) -> ServingLoad:
    """``clients`` closed-loop clients of a steady service, out of step with each other.

    Identical requests from clients that start together stay in step in the
    model for ever (they finish in the same step), while a real server's
    jitter soon spreads them: then a newcomer meets requests mid-decode
    rather than a batch of newcomers. So the first requests are spread over
    one request's decode (``itl_s x output_tokens``) and each client pauses
    about one gap (``itl_s``) before its next.
    """
    if not (itl_s > 0 and math.isfinite(itl_s)):
        raise ValueError(f"steady_clients: itl_s must be a number > 0, got {itl_s}")
    return ServingLoad(
        num_requests=num_requests,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        max_concurrency=clients,
        first_arrivals_over_s=itl_s * output_tokens,
        think_s=itl_s,
    )


@dataclass(frozen=True)
class ServingOutcome:
    """What the benchmark would report (seconds and per-second rates)."""

    median_ttft_s: float
    median_itl_s: float | None  # None: replayed without per-token times
    median_tpot_s: float
    mean_ttft_s: float
    mean_itl_s: float
    request_throughput: float
    output_throughput: float
    duration_s: float
    mean_concurrency: float
    #: every request's TTFT (in finishing order) and every token gap, as the client
    #: sees them; empty without per-token times
    ttfts: tuple[float, ...] = ()
    itls: tuple[float, ...] = ()


def replay_load(
    profile: ProfileLike, load: ServingLoad, *, per_token: bool = True
) -> ServingOutcome:
    """Run ``load`` through one fresh replica.

    ``per_token`` follows every step to time each token (the ITL median
    needs it); without it the replica jumps from event to event, several
    times faster, and the mean ITL comes from each request's first and last
    token (the same sum of gaps).
    """
    replica = Replica(profile)
    interval = 0.0 if load.request_rate is None else 1.0 / load.request_rate
    cap = load.max_concurrency or load.num_requests
    arrivals = (
        [i * interval for i in range(load.num_requests)]
        if load.send_offsets is None
        else sorted(load.send_offsets)
    )
    sizes = load.lengths or ((load.prompt_tokens, load.output_tokens),) * load.num_requests
    out_fixed, out_per = replica.way_out_s
    if load.first_arrivals_over_s > 0 and load.max_concurrency is not None:
        spread = load.first_arrivals_over_s / load.max_concurrency
        # the first request of client i at i x spread; later ones wait for a slot
        arrivals = [
            max(a, i * spread if i < load.max_concurrency else load.first_arrivals_over_s)
            for i, a in enumerate(arrivals)
        ]
    next_index = 0
    in_flight: dict[str, int] = {}  # request id -> tokens seen so far
    last_token: dict[str, float] = {}
    ready: list[float] = []  # arrival times waiting for a client slot
    gaps: list[float] = []
    ttfts: list[float] = []
    tpots: list[float] = []
    busy_time = 0.0  # integral of requests in flight over time
    decode_time = 0.0  # sum over requests of last token - first token
    decode_gaps = 0
    first_arrival = arrivals[0]
    last_finish = 0.0
    now = 0.0

    def submit(t: float) -> None:
        nonlocal next_index
        rid = f"r{next_index}"
        next_index += 1
        prompt, output = sizes[next_index - 1]
        replica.submit(Request(rid, t, prompt, output))
        in_flight[rid] = 0

    pending = list(arrivals)
    thinking: list[float] = []  # a heap: when each client between requests sends again
    finishes = 0
    while pending or ready or in_flight:
        # admit what the clients may send now
        while pending and pending[0] <= now:
            ready.append(pending.pop(0))
        while thinking and thinking[0] <= now:
            heappop(thinking)
        while ready and len(in_flight) + len(thinking) < cap:
            ready.pop(0)
            submit(now)
        step_end = replica.next_token_time() if per_token else replica.next_event_time()
        wake = thinking[0] if thinking and ready else None
        candidates = [x for x in (step_end, pending[0] if pending else None, wake) if x is not None]
        if not candidates:
            if pending:
                now = pending[0]
                continue
            break
        t = min(candidates)
        busy_time += len(in_flight) * (t - now)
        finished = replica.advance_to(t)
        now = t
        for rid, seen in list(in_flight.items()) if per_token else ():
            if replica.is_live(rid):
                count = replica.tokens_generated(rid)
                if count > seen:
                    # the client gets token k the way out's fixed + k x per later
                    _note_token(rid, seen, t + out_fixed + out_per * count, last_token, gaps)
                    in_flight[rid] = count
        for rec in finished:
            seen = in_flight.pop(rec.request_id)
            if rec.output_tokens > seen:
                _note_token(rec.request_id, seen, rec.finish_s, last_token, gaps)
            last_token.pop(rec.request_id, None)
            if rec.ttft_s is not None:
                ttfts.append(rec.ttft_s)
            if rec.tpot_s is not None:
                tpots.append(rec.tpot_s)
                decode_time += rec.tpot_s * (rec.output_tokens - 1)
                decode_gaps += rec.output_tokens - 1
            last_finish = max(last_finish, rec.finish_s)
            if load.think_s > 0:
                # this client sends again after its last token and a pause
                finishes += 1
                pause = 2.0 * load.think_s * ((finishes * _GOLDEN) % 1.0)
                heappush(thinking, max(now, rec.finish_s) + pause)
    duration = last_finish - first_arrival
    total_out = sum(output for _, output in sizes)
    return ServingOutcome(
        median_ttft_s=statistics.median(ttfts),
        median_itl_s=statistics.median(gaps) if per_token and gaps else None,
        median_tpot_s=statistics.median(tpots) if tpots else 0.0,
        mean_ttft_s=statistics.fmean(ttfts),
        mean_itl_s=decode_time / decode_gaps if decode_gaps else 0.0,
        request_throughput=load.num_requests / duration,
        output_throughput=total_out / duration,
        duration_s=duration,
        mean_concurrency=busy_time / duration,
        ttfts=tuple(ttfts) if per_token else (),
        itls=tuple(gaps) if per_token else (),
    )


#: The golden ratio's fractional part: k x it mod 1 spreads evenly over [0, 1).
_GOLDEN = 0.6180339887498949


def _note_token(
    rid: str, seen: int, t: float, last_token: dict[str, float], gaps: list[float]
) -> None:
    """Record the gap since this request's previous token (its first token has none)."""
    if seen > 0:
        gaps.append(t - last_token[rid])
    last_token[rid] = t
