"""``engine.load_client`` against servers on real sockets: the project's emulator, and
a small stand-in that streams what a real vLLM may (several tokens in one chunk,
no usage, a 200 that brings no token), which the emulator never does."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import statistics
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from engine.load_cli import summary
from engine.load_client import LoadError, LoadSpec, run_load
from engine.profile_check import check_profile
from engine.profiles import get_profile
from tests.support.emulator import async_emulator


class _BrokenReplica:
    """The emulator's replica with a model fault on its clock: streams get vLLM's error
    event after their 200 (a wrapper: the compiled replica's methods cannot be patched)."""

    def __init__(self, replica: Any) -> None:
        self._replica = replica

    def __getattr__(self, name: str) -> Any:
        return getattr(self._replica, name)

    def advance_to(self, t: float) -> list[Any]:
        raise RuntimeError("simulated engine fault")


async def test_the_emulator_s_usage_gives_the_output_lengths() -> None:
    """The load asks for usage (as ``vllm bench serve`` does) and takes the server's count."""
    spec = LoadSpec(num_requests=6, prompt_tokens=40, output_tokens=5, max_concurrency=3)
    async with async_emulator() as srv:
        doc = await run_load(srv.url, spec)
    assert doc["completed"] == 6 and doc["failed"] == 0
    assert doc["output_token_counts"] == "usage"
    assert doc["output_lens"] == [5] * 6 and doc["errors"] == [""] * 6
    assert all(t > 0 for t in doc["ttfts"]) and all(len(g) == 4 for g in doc["itls"])
    assert "note:" not in summary(doc)


async def test_an_engine_fault_fails_each_stream_with_the_server_s_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 200 whose stream brings vLLM's error event and no token is a failed request,
    and the load says what the server said."""
    spec = LoadSpec(num_requests=2, prompt_tokens=20, output_tokens=4)
    async with async_emulator() as srv:
        monkeypatch.setattr(srv.driver, "replica", _BrokenReplica(srv.driver.replica))
        with pytest.raises(LoadError, match=r"error event in the stream: .*EngineCore"):
            await run_load(srv.url, spec)


@contextlib.asynccontextmanager
async def _stand_in(*, usage: bool) -> AsyncIterator[str]:
    """Every third request gets a 200 and ``[DONE]`` only; the others stream their
    tokens two to a chunk, then usage when asked for and ``usage`` is set."""
    seen = {"n": 0}

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m"}]})

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen["n"] += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if seen["n"] % 3 != 0:
            out = body["max_tokens"]
            for i in range(0, out, 2):
                chunk = {"choices": [{"index": 0, "text": "ab"[: min(2, out - i)]}]}
                await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            if usage and body.get("stream_options", {}).get("include_usage"):
                tail = {"choices": [], "usage": {"completion_tokens": out}}
                await resp.write(f"data: {json.dumps(tail)}\n\n".encode())
        await resp.write(b"data: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_a_200_without_a_token_is_a_failure_and_usage_counts_coalesced_tokens() -> None:
    """A token-less 200 is failed with its reason and kept out of TTFT (it was measured as
    TTFT 0 before); a chunk of two tokens counts two, from the usage."""
    spec = LoadSpec(num_requests=6, prompt_tokens=10, output_tokens=6, max_concurrency=1)
    async with _stand_in(usage=True) as url:
        doc = await run_load(url, spec)
    assert doc["completed"] == 4 and doc["failed"] == 2
    failed = [i for i, e in enumerate(doc["errors"]) if e]
    assert failed == [2, 5]  # one client: the third and sixth requests sent
    assert all(doc["errors"][i] == "HTTP 200 but the stream carried no token" for i in failed)
    ok = [i for i in range(6) if i not in failed]
    assert [doc["output_lens"][i] for i in ok] == [6] * 4  # three chunks each
    assert doc["output_token_counts"] == "usage" and doc["total_output_tokens"] == 24
    ok_ttfts = [doc["ttfts"][i] for i in ok]
    assert doc["median_ttft_ms"] == pytest.approx(statistics.median(ok_ttfts) * 1e3)
    assert all(len(doc["itls"][i]) == 2 for i in ok)  # a gap per chunk, as vLLM's bench
    # the check measures TTFT over the same successful requests it replays
    check = check_profile(get_profile("llama-3-8b@g5.xlarge"), doc, "run.json")
    assert check.load.num_requests == 4 and check.requests_in_run == 4


async def test_without_usage_the_output_is_counted_per_chunk_and_the_summary_says_so() -> None:
    """A server that sends no usage: one token a chunk (too few here), and a note."""
    spec = LoadSpec(num_requests=2, prompt_tokens=10, output_tokens=6)
    async with _stand_in(usage=False) as url:
        doc = await run_load(url, spec)
    assert doc["output_lens"] == [3, 3] and doc["output_token_counts"] == "chunks"
    assert "counted one per streamed chunk" in summary(doc)


async def test_all_at_once_means_every_request_in_flight_together() -> None:
    """No hidden cap (aiohttp's pool holds 100 connections by default): 150 requests
    without ``max_concurrency`` are all open on the server at the same moment."""
    n = 150
    state = {"open": 0, "peak": 0}
    everyone = asyncio.Event()

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m"}]})

    async def completions(request: web.Request) -> web.StreamResponse:
        state["open"] += 1
        state["peak"] = max(state["peak"], state["open"])
        if state["open"] == n:
            everyone.set()
        with contextlib.suppress(TimeoutError):  # a cap would stall here: fail, not hang
            await asyncio.wait_for(everyone.wait(), 10.0)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chunk = {"choices": [{"index": 0, "text": "a"}], "usage": {"completion_tokens": 1}}
        await resp.write(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())
        state["open"] -= 1
        return resp

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        doc = await run_load(url, LoadSpec(num_requests=n, prompt_tokens=4, output_tokens=1))
    finally:
        await runner.cleanup()
    assert state["peak"] == n and doc["completed"] == n


def test_idle_pauses_are_each_used_as_often_in_a_seeded_order() -> None:
    spec = LoadSpec(num_requests=13, prompt_tokens=8, output_tokens=2, idle_pauses_s=(0, 0.1, 1))
    pauses = spec.pauses()
    assert len(pauses) == 12 and sorted(pauses) == [0] * 4 + [0.1] * 4 + [1] * 4
    assert pauses == spec.pauses() != dataclasses.replace(spec, seed=1).pauses()
    for bad in ({"request_rate": 1.0}, {"max_concurrency": 2}, {"idle_pauses_s": (-1.0,)}):
        with pytest.raises(ValueError, match="load: idle pauses"):
            LoadSpec(**{"num_requests": 3, "prompt_tokens": 8, "output_tokens": 2,
                        "idle_pauses_s": (0.1,), **bad})  # type: ignore[arg-type]  # fmt: skip


async def test_idle_pauses_send_one_request_after_the_last_ended() -> None:
    spec = LoadSpec(num_requests=5, prompt_tokens=16, output_tokens=3, idle_pauses_s=(0.05, 0.2))
    async with async_emulator() as srv:
        doc = await run_load(srv.url, spec)
    rows = zip(doc["start_times"], doc["ttfts"], doc["itls"], strict=True)
    ends = [start + ttft + sum(gaps) for start, ttft, gaps in rows]
    for i, pause in enumerate(spec.pauses(), start=1):
        assert doc["start_times"][i] >= ends[i - 1] + pause - 1e-3
    assert doc["max_concurrency"] == 1 and doc["idle_pauses_s"] == [0.05, 0.2]
