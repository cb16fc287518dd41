"""Engine death and client disconnects: every request ends, nothing is held.

An emulator whose model raised must answer every request in flight (a stream
gets vLLM's error event then ``[DONE]``, a plain request a 500) and refuse new
ones with 500 while ``/health`` is 503; a plain request whose client went away
must be aborted at once (slot and KV freed, counted as ``abort``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.emulator import EmulatorServer, EmulatorSettings
from tests.support.emulator import FAST_PROFILE, async_emulator

MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"
BOUND_S = 10.0  # generous: a loaded CI machine; a hang would take forever


class _BrokenReplica:
    """The emulator's replica with `advance_to` raising: a model fault on the clock task.

    A wrapper, not a patched method: the compiled replica (``make native``)
    does not let tests replace its methods.
    """

    def __init__(self, replica: Any) -> None:
        self._replica = replica

    def __getattr__(self, name: str) -> Any:
        return getattr(self._replica, name)

    def advance_to(self, t: float) -> list[Any]:
        raise RuntimeError("simulated engine fault")


class _NanProfile:
    """A profile whose step time turns NaN once `broken` is set (a bad profile)."""

    def __init__(self, profile: Any) -> None:
        self._profile = profile
        self.broken = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._profile, name)

    def step_time_s(self, prefill_tokens: int, decode_seqs: int, context_tokens: int) -> float:
        if self.broken:
            return float("nan")
        return float(self._profile.step_time_s(prefill_tokens, decode_seqs, context_tokens))


def _nan_profiles(monkeypatch: pytest.MonkeyPatch) -> list[_NanProfile]:
    """Emulators started from now on use a `_NanProfile`; the list fills as they start."""
    build = EmulatorSettings.build_profile
    made: list[_NanProfile] = []

    def build_wrapped(self: EmulatorSettings) -> Any:
        made.append(_NanProfile(build(self)))
        return made[-1]

    monkeypatch.setattr(EmulatorSettings, "build_profile", build_wrapped)
    return made


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def _metrics(s: aiohttp.ClientSession, srv: EmulatorServer) -> dict[str, float]:
    m = _samples(await (await s.get(srv.url + "/metrics")).text())
    labels = (("engine", "0"), ("finished_reason", "abort"), ("model_name", MODEL))
    return {
        "running": m[("vllm:num_requests_running", (("engine", "0"), ("model_name", MODEL)))],
        "waiting": m[("vllm:num_requests_waiting", (("engine", "0"), ("model_name", MODEL)))],
        "abort": m[("vllm:request_success_total", labels)],
    }


def _events(raw: bytes) -> list[Any]:
    out: list[Any] = []
    for block in raw.decode().strip().split("\n\n"):  # strip: readline left a "\n"
        block = block.strip()
        if block:
            assert block.startswith("data: "), block
            data = block[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


async def _in_flight(
    s: aiohttp.ClientSession, srv: EmulatorServer
) -> tuple[aiohttp.ClientResponse, asyncio.Task[aiohttp.ClientResponse]]:
    """One stream that has started and one plain request that is queued or running."""
    body = {"prompt": "long", "max_tokens": 4000, "stream": True}
    stream = await s.post(srv.url + "/v1/completions", json=body)
    assert stream.status == 200
    await stream.content.readline()  # the first token arrived: it is in the batch
    plain = asyncio.create_task(
        s.post(srv.url + "/v1/completions", json={"prompt": "x", "max_tokens": 4000})
    )
    for _ in range(200):
        if srv.driver.replica.num_outstanding == 2:
            break
        await asyncio.sleep(0.01)
    assert srv.driver.replica.num_outstanding == 2
    return stream, plain


async def _assert_everything_fails(
    s: aiohttp.ClientSession,
    srv: EmulatorServer,
    stream: aiohttp.ClientResponse,
    plain: asyncio.Task[aiohttp.ClientResponse],
) -> None:
    raw = await asyncio.wait_for(stream.read(), BOUND_S)  # ends: no hang
    events = _events(raw)
    assert events[-1] == "[DONE]"
    err = events[-2]["error"]
    assert err["object"] == "error" and err["code"] == 500
    assert err["type"] == "InternalServerError"
    assert "EngineCore encountered an issue" in err["message"]
    assert all("error" not in e for e in events[:-2])  # tokens before the failure
    r = await asyncio.wait_for(plain, BOUND_S)
    assert r.status == 500
    assert (await r.json())["type"] == "InternalServerError"
    assert (await s.get(srv.url + "/health")).status == 503
    for path, body in [
        ("/v1/completions", {"prompt": "new", "max_tokens": 3}),
        ("/v1/completions", {"prompt": "new", "max_tokens": 3, "stream": True}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ]:
        r = await asyncio.wait_for(s.post(srv.url + path, json=body), BOUND_S)
        assert r.status == 500, path
        assert (await r.json())["code"] == 500
    assert (await s.get(srv.url + "/metrics")).status == 200  # still scrapable
    assert not srv.driver.healthy and srv.driver.failure is not None


async def test_clock_failure_answers_in_flight_and_new_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The model raises on the clock task: streams end with an error, requests get 500."""
    async with async_emulator(max_num_seqs=1) as srv, aiohttp.ClientSession() as s:
        stream, plain = await _in_flight(s, srv)

        monkeypatch.setattr(srv.driver, "replica", _BrokenReplica(srv.driver.replica))
        await _assert_everything_fails(s, srv, stream, plain)
        assert isinstance(srv.driver.failure, RuntimeError)
    # leaving the block closed the server: stop() did not re-raise the failure


async def test_nan_step_time_fails_every_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """A NaN step time (bad profile) surfaces on the next batch change, failing all."""
    profiles = _nan_profiles(monkeypatch)
    async with async_emulator(max_num_seqs=2) as srv, aiohttp.ClientSession() as s:
        stream, plain = await _in_flight(s, srv)
        (profile,) = profiles
        profile.broken = True
        # the next batch change (this submission) makes the model plan a NaN step
        r = await asyncio.wait_for(
            s.post(srv.url + "/v1/completions", json={"prompt": "y", "max_tokens": 5}), BOUND_S
        )
        assert r.status == 500
        assert "step time must be > 0" in (await r.json())["message"]
        await _assert_everything_fails(s, srv, stream, plain)
        assert isinstance(srv.driver.failure, ValueError)


async def test_server_close_after_failure_does_not_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    """stop()/close() after an engine failure return normally (cleanup must not raise)."""
    profiles = _nan_profiles(monkeypatch)
    srv = await EmulatorServer.start(EmulatorSettings(profile=FAST_PROFILE))
    try:
        async with aiohttp.ClientSession() as s:
            (profile,) = profiles
            profile.broken = True
            r = await s.post(srv.url + "/v1/completions", json={"prompt": "z", "max_tokens": 2})
            assert r.status == 500
            assert (await s.get(srv.url + "/health")).status == 503
    finally:
        await asyncio.wait_for(srv.close(), BOUND_S)


async def test_plain_request_aborted_when_client_times_out() -> None:
    """A non-streaming client that gives up frees its slot and counts as abort."""
    async with async_emulator(max_num_seqs=1) as srv, aiohttp.ClientSession() as s:
        before = await _metrics(s, srv)
        assert before["abort"] == 0
        body = {"prompt": "slow", "max_tokens": 3000}
        with pytest.raises(asyncio.TimeoutError):
            await s.post(
                srv.url + "/v1/completions",
                json=body,
                timeout=aiohttp.ClientTimeout(total=0.5),
            )
        for _ in range(int(BOUND_S / 0.05)):
            m = await _metrics(s, srv)
            if m["abort"] == 1:
                break
            await asyncio.sleep(0.05)
        assert m["abort"] == 1
        assert m["running"] == 0 and m["waiting"] == 0
        assert srv.driver.replica.num_outstanding == 0
        assert srv.driver.replica.kv_blocks_used == 0
        # the slot is free again: a short request is served at once
        r = await s.post(srv.url + "/v1/completions", json={"prompt": "next", "max_tokens": 2})
        assert r.status == 200
