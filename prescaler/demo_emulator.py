"""`prescaler demo --emulator`: one emulated vLLM replica behind real HTTP.

The earlier demo: one emulated vLLM replica (`engine.emulator`) started
in-process on a free port, a built-in load sent as streaming completions
through real HTTP (a calm phase, a 4x burst, calm again), and what a client
saw (TTFT, TPOT, throughput) next to what the replica itself exports on
/metrics, the numbers the scaler reads.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

DEFAULT_PROFILE = "llama-3-8b@g5.xlarge"
DEFAULT_DURATION_S = 30.0
_METRIC_LINES = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:time_to_first_token_seconds_count",
    "vllm:time_to_first_token_seconds_sum",
)


_GAUGES = _METRIC_LINES[:4]


@dataclass(frozen=True)
class PlannedRequest:
    at_s: float
    prompt_words: int
    max_tokens: int


@dataclass(frozen=True)
class Outcome:
    ttft_s: float | None
    tpot_s: float | None
    tokens: int
    e2e_s: float
    ok: bool


def load_schedule(duration_s: float, base_rate: float, seed: int = 0) -> list[PlannedRequest]:
    """Poisson arrivals: calm (first 40 %), a 4x burst (next 20 %), calm again.

    Prompts of 100-600 words and outputs of 32-192 tokens, from a fixed seed,
    so every run sends the same requests.
    """
    # ``not x > 0`` also refuses NaN (every comparison with it is false: a
    # NaN duration or rate used to loop for ever); inf would never end either.
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise ValueError(f"duration must be a finite number of seconds > 0, got {duration_s}")
    if not (math.isfinite(base_rate) and base_rate > 0):
        raise ValueError(f"base rate must be a finite number of requests/s > 0, got {base_rate}")
    rng = random.Random(seed)
    out: list[PlannedRequest] = []
    t = 0.0
    while True:
        phase = t / duration_s
        rate = base_rate * (4.0 if 0.4 <= phase < 0.6 else 1.0)
        t += rng.expovariate(rate)
        if t >= duration_s:
            break
        out.append(PlannedRequest(t, rng.randint(100, 600), rng.randint(32, 192)))
    return out


def summary_table(outcomes: Sequence[Outcome], wall_s: float) -> str:
    """The client's view as a small fixed-width table."""
    ok = [o for o in outcomes if o.ok]
    ttft = sorted(o.ttft_s for o in ok if o.ttft_s is not None)
    tpot = sorted(o.tpot_s for o in ok if o.tpot_s is not None)
    tokens = sum(o.tokens for o in ok)

    def pct(xs: list[float], q: float) -> str:
        if not xs:
            return "-"
        return f"{xs[min(len(xs) - 1, int(q * len(xs)))] * 1000:.0f} ms"

    rows = [
        ("requests sent / completed", f"{len(outcomes)} / {len(ok)}"),
        ("TTFT p50 / p90 / p99", f"{pct(ttft, 0.5)} / {pct(ttft, 0.9)} / {pct(ttft, 0.99)}"),
        ("TPOT p50 / p99", f"{pct(tpot, 0.5)} / {pct(tpot, 0.99)}"),
        ("TTFT mean", f"{statistics.fmean(ttft) * 1000:.0f} ms" if ttft else "-"),
        ("output tokens/s", f"{tokens / wall_s:.1f}"),
        ("requests/s", f"{len(ok) / wall_s:.2f}"),
        ("wall time", f"{wall_s:.1f} s"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = ["client view", "-" * (width + 24)]
    lines += [f"{k:<{width}}  {v}" for k, v in rows]
    return "\n".join(lines)


def metrics_excerpt(text: str, names: tuple[str, ...] = _METRIC_LINES) -> str:
    """The scaler-relevant lines of a vLLM /metrics page (samples only, no comments)."""
    keep = [line for line in text.splitlines() if line.startswith(names)]
    return "\n".join(keep)


async def _one(session: object, url: str, model: str, req: PlannedRequest) -> Outcome:
    import aiohttp

    assert isinstance(session, aiohttp.ClientSession)
    body = {
        "model": model,
        "prompt": " ".join(["data"] * req.prompt_words),
        "max_tokens": req.max_tokens,
        "stream": True,
    }
    start = time.perf_counter()
    first: float | None = None
    last = start
    tokens = 0
    done = False
    async with session.post(url + "/v1/completions", json=body) as r:
        if r.status != 200:
            return Outcome(None, None, 0, time.perf_counter() - start, False)
        async for line in r.content:
            if not line.startswith(b"data: "):
                continue
            if line.startswith(b"data: [DONE]"):
                done = True
                continue
            chunk = json.loads(line[6:])
            if chunk["choices"] and chunk["choices"][0]["text"]:
                last = time.perf_counter()
                first = first if first is not None else last
                tokens += 1
    ttft = None if first is None else first - start
    tpot = (last - first) / (tokens - 1) if first is not None and tokens > 1 else None
    return Outcome(ttft, tpot, tokens, time.perf_counter() - start, done)


async def run_demo(
    profile: str, duration_s: float, base_rate: float | None, out: TextIO, seed: int = 0
) -> int:
    """Start the emulator, drive the load, print the summary and /metrics excerpt."""
    import aiohttp
    from tqdm import tqdm

    from engine.emulator import EmulatorServer, EmulatorSettings

    settings = EmulatorSettings(profile=profile)
    prof = settings.build_profile()
    rate = base_rate if base_rate is not None else _default_rate(prof)
    plan = load_schedule(duration_s, rate, seed)
    async with EmulatorServer.running(settings) as server:
        model = settings.model_name(prof)
        print(
            f"prescaler demo: emulated {prof.name} ({model}) on {server.url}; "
            f"{len(plan)} streaming requests over {duration_s:g} s "
            f"(base {rate:.2f}/s, 4x burst in the middle)",
            file=out,
            flush=True,
        )
        peak_waiting = 0
        peak_running = 0
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=duration_s + 600)
        t0 = time.perf_counter()
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            bar = tqdm(
                total=len(plan),
                desc="requests",
                unit="req",
                file=sys.stderr,
                leave=False,
                mininterval=0.5,
                # A redrawn bar is noise in a CI log or a pipe: only on a terminal.
                disable=not sys.stderr.isatty(),
            )

            async def launch(req: PlannedRequest) -> Outcome:
                await asyncio.sleep(max(0.0, req.at_s - (time.perf_counter() - t0)))
                try:
                    return await _one(session, server.url, model, req)
                finally:
                    bar.update(1)

            tasks = [asyncio.create_task(launch(r)) for r in plan]
            peak_text = ""
            while not all(t.done() for t in tasks):
                replica = server.driver.replica
                if replica.num_waiting > peak_waiting or not peak_text:
                    async with session.get(server.url + "/metrics") as r:
                        peak_text = await r.text()
                peak_waiting = max(peak_waiting, replica.num_waiting)
                peak_running = max(peak_running, replica.num_running)
                bar.set_postfix(running=replica.num_running, waiting=replica.num_waiting)
                await asyncio.wait(tasks, timeout=0.25)
            outcomes = [t.result() for t in tasks]
            bar.close()
            wall = time.perf_counter() - t0
            async with session.get(server.url + "/metrics") as r:
                metrics_text = await r.text()
    print(summary_table(outcomes, wall), file=out)
    print(f"peak running / waiting seen: {peak_running} / {peak_waiting}", file=out)
    print("\nemulator /metrics at the longest queue (excerpt)", file=out)
    print(metrics_excerpt(peak_text, _GAUGES), file=out)
    print("\nemulator /metrics at the end (excerpt)", file=out)
    print(metrics_excerpt(metrics_text), file=out)
    print(
        "\nnext: `prescaler serve` runs the KEDA external scaler against replicas like this one; "
        "`prescaler engine profiles` lists the other hardware profiles.",
        file=out,
    )
    return 0 if all(o.ok for o in outcomes) else 1


def _default_rate(prof: object) -> float:
    """Half of what the replica sustains at a 32-sequence decode batch.

    The calm phase then runs a comfortable batch and the 4x burst outgrows the
    KV cache of a 24 GB card, so requests queue (and may be preempted).
    """
    itl = prof.decode_itl_s(32, 500)  # type: ignore[attr-defined]
    per_request_s = 112 * itl  # mean output of the schedule
    return max(0.2, round(32 / per_request_s / 2.0, 2))
