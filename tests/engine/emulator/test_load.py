"""The emulator under concurrent streaming load: nothing lost, nothing stuck.

Whether the timing a client sees is faithful to the model is a wall-clock
figure, so it lives in the bench (`make bench`), which writes
bench-results/emulator.json; the default suite checks only correctness.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.emulator import EmulatorServer
from tests.engine.emulator import seed_loadtest
from tests.support.emulator import async_emulator, emulator_process

BENCH_DIR = Path(__file__).parents[3] / "bench-results"


@dataclass(frozen=True)
class Observed:
    ttft_s: float
    itl_s: float  # mean gap between tokens after the first
    tokens: int
    done: bool


async def _on_sent(
    session: aiohttp.ClientSession, ctx: Any, params: aiohttp.TraceRequestChunkSentParams
) -> None:
    ctx.trace_request_ctx["sent"] = time.perf_counter()


def _session(**kwargs: Any) -> aiohttp.ClientSession:
    """A client whose requests note when their body left the socket (trace hook)."""
    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(_on_sent)
    return aiohttp.ClientSession(trace_configs=[trace], **kwargs)


async def _stream(
    session: aiohttp.ClientSession, url: str, max_tokens: int, delay_s: float = 0.0
) -> Observed:
    """Send one streaming completion; time each token as the client sees it.

    TTFT is counted from when the request body was written to the socket, so
    that the client's own event loop queueing (100 coroutines sending at once
    from one thread) is not blamed on the server.
    """
    await asyncio.sleep(delay_s)
    body = {"prompt": "Explain the batch", "max_tokens": max_tokens, "stream": True}
    ctx: dict[str, float] = {"sent": time.perf_counter()}
    times: list[float] = []
    done = False
    async with session.post(url + "/v1/completions", json=body, trace_request_ctx=ctx) as r:
        assert r.status == 200
        async for line in r.content:
            if not line.startswith(b"data: "):
                continue
            if line.strip() == b"data: [DONE]":
                done = True
                continue
            chunk = json.loads(line[6:])
            if chunk["choices"] and chunk["choices"][0]["text"]:
                times.append(time.perf_counter())
    gaps = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 0.0
    return Observed(times[0] - ctx["sent"], gaps, len(times), done)


async def _ping(session: aiohttp.ClientSession, url: str) -> None:
    async with session.get(url + "/health") as r:
        await r.read()


async def _run(
    server: EmulatorServer | str,
    concurrency: int,
    max_tokens: int,
    warm: bool = False,
    stagger_s: float = 0.0,
) -> list[Observed]:
    """`concurrency` streams together; `warm` first opens the connections (keep-alive)
    so that TCP set-up is not counted in TTFT; stream i starts i x `stagger_s` late
    (a ramp, so the server's own HTTP parsing of a 100-request instant burst, about
    0.5 ms a request on a loaded machine, is not what the timing check measures)."""
    url = server if isinstance(server, str) else server.url
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    async with _session(connector=connector, timeout=timeout) as session:
        if warm:
            await asyncio.gather(*(_ping(session, url) for _ in range(concurrency)))
        return await asyncio.gather(
            *(_stream(session, url, max_tokens) for _ in range(concurrency))
        )


async def test_thousand_concurrent_streams_none_lost_none_stuck() -> None:
    """1,000 simultaneous streams on one process all finish with every token and [DONE]."""
    async with async_emulator("llama-3-8b@p5.48xlarge") as server:
        t0 = time.perf_counter()
        results = await asyncio.wait_for(_run(server, 1000, 8), timeout=120)
        wall = time.perf_counter() - t0
        replica = server.driver.replica
        server.driver.sync()
        snap = replica.metrics_snapshot()
    assert len(results) == 1000
    assert all(r.done and r.tokens == 8 for r in results)
    assert snap.success("length") == 1000 and snap.success("abort") == 0
    assert snap.generation_tokens == 8000
    assert replica.num_outstanding == 0 and replica.kv_blocks_used == 0
    print(f"1000 streams x 8 tokens: wall {wall:.2f} s")


async def _model_means(url: str) -> tuple[float, float]:
    """Mean TTFT and ITL the model itself recorded, read from the emulator's /metrics."""
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as r:
        text = await r.text()
    values: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            values[sample.name] = sample.value
    ttft = (
        values["vllm:time_to_first_token_seconds_sum"]
        / values["vllm:time_to_first_token_seconds_count"]
    )
    itl = (
        values["vllm:inter_token_latency_seconds_sum"]
        / values["vllm:inter_token_latency_seconds_count"]
    )
    return ttft, itl


async def _timing_errors(results: list[Observed], url: str) -> tuple[float, float, dict]:
    model_ttft, model_itl = await _model_means(url)
    client_ttft = statistics.fmean(r.ttft_s for r in results)
    client_itl = statistics.fmean(r.itl_s for r in results)
    figures = {
        "model_ttft_mean_s": model_ttft,
        "client_ttft_mean_s": client_ttft,
        "model_itl_mean_s": model_itl,
        "client_itl_mean_s": client_itl,
        "ttft_rel_error": client_ttft / model_ttft - 1,
        "itl_rel_error": client_itl / model_itl - 1,
    }
    return client_ttft / model_ttft - 1, client_itl / model_itl - 1, figures


async def test_100_concurrent_streams_complete_and_the_model_records_their_timing() -> None:
    """100 warmed, ramped streams all finish and the model's latency histograms hold them.

    How closely the client's timing follows the model's is a wall-clock figure
    that depends on the machine, so it is measured by the bench below (`make
    bench`, bench-results/emulator.json), not asserted here.
    """
    async with async_emulator("llama-3-8b@g5.xlarge") as server:
        results = await _run(server, 100, 24, warm=True, stagger_s=0.01)
        model_ttft, model_itl = await _model_means(server.url)
    assert all(r.done and r.tokens == 24 for r in results)
    assert all(r.ttft_s > 0 and r.itl_s > 0 for r in results)
    assert model_ttft > 0 and model_itl > 0


@pytest.mark.bench
async def test_bench_emulator_timing_within_10_percent() -> None:
    """Bench: at 100 concurrent streams TTFT and ITL are within 10 % of the model."""
    with emulator_process("llama-3-8b@g5.xlarge") as url:
        t0 = time.perf_counter()
        results = await _run(url, 100, 64, warm=True, stagger_s=0.01)
        wall = time.perf_counter() - t0
        ttft_err, itl_err, figures = await _timing_errors(results, url)
    with emulator_process("llama-3-8b@g5.xlarge") as url:
        burst = await _run(url, 100, 64, warm=True)
        _, _, burst_figures = await _timing_errors(burst, url)
    with emulator_process("llama-3-8b@p5.48xlarge") as url:
        t1 = time.perf_counter()
        big = await _run(url, 1000, 16)
        wall_1000 = time.perf_counter() - t1
    figures.update(
        {
            "profile": "llama-3-8b@g5.xlarge",
            "server": "separate process (prescaler emulate)",
            "concurrency": 100,
            "max_tokens": 64,
            "wall_s": wall,
            "streams_1000_wall_s": wall_1000,
            "streams_1000_complete": sum(r.done and r.tokens == 16 for r in big),
            "ramp_s_between_starts": 0.01,
            "instant_burst_ttft_rel_error": burst_figures["ttft_rel_error"],
            "instant_burst_itl_rel_error": burst_figures["itl_rel_error"],
        }
    )
    BENCH_DIR.mkdir(exist_ok=True)
    (BENCH_DIR / "emulator.json").write_text(json.dumps(figures, indent=2) + "\n")
    print("\nemulator bench")
    for k, v in figures.items():
        print(f"  {k:28s} {v}")
    assert abs(ttft_err) < 0.10 and abs(itl_err) < 0.10
    assert figures["streams_1000_complete"] == 1000


async def test_seed_load_test_script_runs_against_the_emulator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The seed's aiohttp load test runs unchanged (URL aside) and reports its table."""
    async with async_emulator(
        "mistral-7b@p5.48xlarge", served_model_name="mistralai/Mistral-7B-Instruct-v0.2"
    ) as server:
        monkeypatch.setattr(seed_loadtest, "URL", server.url + "/v1/completions")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            await seed_loadtest.main(concurrency=20)
        snap = server.driver.replica.metrics_snapshot()
    text = out.getvalue()
    assert "--- Benchmark Results (Concurrency: 20) ---" in text
    ttft_p50 = float(re.search(r"TTFT  - P50: ([0-9.]+)ms", text).group(1))  # type: ignore[union-attr]
    assert 0 < ttft_p50 < 5000
    assert snap.success("length") == 20
    assert snap.generation_tokens == 20 * seed_loadtest.PAYLOAD["max_tokens"]
