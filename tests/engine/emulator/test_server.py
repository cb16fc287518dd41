"""The emulator's HTTP API over a real socket: vLLM's bytes, errors and metrics."""

from __future__ import annotations

import json
import re
import urllib.request

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.emulator import EmulatorServer, EmulatorSettings
from engine.emulator.tokens import count_chat_tokens, count_prompt_tokens
from tests.support.emulator import async_emulator, running_emulator

MODEL = "meta-llama/Meta-Llama-3-8B-Instruct"


def _norm(raw: bytes) -> str:
    """Replace the wall-clock `created` field so bytes can be compared."""
    return re.sub(r'"created":\d+', '"created":0', raw.decode())


def _metrics(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def _one(metrics: dict[str, dict[tuple[tuple[str, str], ...], float]], name: str) -> float:
    [value] = metrics[name].values()
    return value


async def test_completion_stream_bytes_match_vllm() -> None:
    """Completion SSE: data: <compact json>\\n\\n per token, usage chunk, then [DONE]."""
    async with async_emulator() as srv, aiohttp.ClientSession() as s:
        body = {
            "model": MODEL,
            "prompt": "Hello world",
            "max_tokens": 2,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        async with s.post(srv.url + "/v1/completions", json=body) as r:
            assert r.status == 200
            assert r.headers["Content-Type"] == "text/event-stream; charset=utf-8"
            raw = await r.read()
    head = '{"id":"cmpl-00000000","object":"text_completion","created":0,"model":"' + MODEL + '",'
    assert _norm(raw) == (
        f'data: {head}"choices":[{{"index":0,"text":" The","logprobs":null,'
        '"finish_reason":null,"stop_reason":null}],"usage":null}\n\n'
        f'data: {head}"choices":[{{"index":0,"text":" emulated","logprobs":null,'
        '"finish_reason":"length","stop_reason":null}],"usage":null}\n\n'
        f'data: {head}"choices":[],"usage":{{"prompt_tokens":5,"total_tokens":7,'
        '"completion_tokens":2}}\n\n'
        "data: [DONE]\n\n"
    )


async def test_chat_stream_bytes_match_vllm() -> None:
    """Chat SSE: role chunk first, content deltas, finish_reason on the last, then [DONE]."""
    async with async_emulator() as srv, aiohttp.ClientSession() as s:
        body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2, "stream": True}
        async with s.post(srv.url + "/v1/chat/completions", json=body) as r:
            raw = await r.read()
    head = (
        '{"id":"chatcmpl-00000000","object":"chat.completion.chunk","created":0,"model":"'
        + MODEL
        + '",'
    )
    assert _norm(raw) == (
        f'data: {head}"choices":[{{"index":0,"delta":{{"role":"assistant","content":""}},'
        '"logprobs":null,"finish_reason":null}]}\n\n'
        f'data: {head}"choices":[{{"index":0,"delta":{{"content":" The"}},'
        '"logprobs":null,"finish_reason":null}]}\n\n'
        f'data: {head}"choices":[{{"index":0,"delta":{{"content":" emulated"}},'
        '"logprobs":null,"finish_reason":"length","stop_reason":null}]}\n\n'
        "data: [DONE]\n\n"
    )


async def test_non_streaming_responses_carry_usage() -> None:
    """Plain JSON answers: the whole text, finish_reason and usage."""
    async with async_emulator() as srv, aiohttp.ClientSession() as s:
        r = await s.post(srv.url + "/v1/completions", json={"prompt": [1, 2, 3], "max_tokens": 3})
        body = await r.json()
        assert body["object"] == "text_completion"
        assert body["choices"][0]["text"] == " The emulated replica"
        assert body["choices"][0]["finish_reason"] == "length"
        assert body["usage"]["prompt_tokens"] == 3 and body["usage"]["completion_tokens"] == 3
        msgs = [{"role": "user", "content": "Hello there"}]
        r = await s.post(srv.url + "/v1/chat/completions", json={"messages": msgs})
        body = await r.json()
        assert body["object"] == "chat.completion"
        assert body["choices"][0]["message"]["role"] == "assistant"
        assert body["choices"][0]["finish_reason"] == "stop"  # no max_tokens: default length
        assert body["usage"]["completion_tokens"] == 128
        assert body["usage"]["prompt_tokens"] == count_chat_tokens(msgs)


async def test_health_models_and_metrics_content_type() -> None:
    """/health is 200 and empty; /v1/models lists the served name; /metrics is text 0.0.4."""
    async with async_emulator(served_model_name="my-model") as srv, aiohttp.ClientSession() as s:
        r = await s.get(srv.url + "/health")
        assert r.status == 200 and await r.read() == b""
        models = await (await s.get(srv.url + "/v1/models")).json()
        assert models["object"] == "list"
        assert models["data"][0]["id"] == "my-model"
        assert models["data"][0]["max_model_len"] == 8192
        r = await s.get(srv.url + "/metrics")
        assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert 'model_name="my-model"' in await r.text()


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{not json", 400, "malformed JSON"),
        (b'{"prompt": "hi", "max_tokens": 0}', 400, "max_tokens must be an integer >= 1"),
        (b'{"prompt": "hi", "max_tokens": 9000}', 400, "maximum context length is 8192"),
        (b'{"max_tokens": 5}', 400, "prompt is required"),
        (b'{"model": "gpt-4", "prompt": "hi"}', 404, "The model `gpt-4` does not exist."),
    ],
)
async def test_errors_look_like_vllm(body: bytes, status: int, message: str) -> None:
    """Bad requests get vLLM's error object with the right code."""
    async with async_emulator() as srv, aiohttp.ClientSession() as s:
        r = await s.post(
            srv.url + "/v1/completions", data=body, headers={"Content-Type": "application/json"}
        )
        assert r.status == status
        err = await r.json()
        assert set(err) == {"object", "message", "type", "param", "code"}
        assert err["object"] == "error" and err["code"] == status and err["param"] is None
        assert err["type"] == ("BadRequestError" if status == 400 else "NotFoundError")
        assert message in err["message"]


async def test_metrics_count_what_was_served() -> None:
    """After N requests the counters and histograms add up to exactly what was sent."""
    async with async_emulator() as srv, aiohttp.ClientSession() as s:
        sizes = [3, 5, 8, 13]
        for n in sizes:
            body = {"prompt": "count me", "max_tokens": n, "stream": True}
            async with s.post(srv.url + "/v1/completions", json=body) as r:
                raw = await r.read()
                assert raw.count(b'"text":') == n
        m = _metrics(await (await s.get(srv.url + "/metrics")).text())
    prompt = count_prompt_tokens("count me")
    assert _one(m, "vllm:generation_tokens_total") == sum(sizes)
    assert _one(m, "vllm:prompt_tokens_total") == prompt * len(sizes)
    assert m["vllm:request_success_total"][
        (("engine", "0"), ("finished_reason", "length"), ("model_name", MODEL))
    ] == len(sizes)
    assert _one(m, "vllm:time_to_first_token_seconds_count") == len(sizes)
    assert _one(m, "vllm:inter_token_latency_seconds_count") == sum(sizes) - len(sizes)
    assert _one(m, "vllm:e2e_request_latency_seconds_count") == len(sizes)
    assert _one(m, "vllm:num_requests_running") == 0
    assert _one(m, "vllm:kv_cache_usage_perc") == 0


async def test_v0_metrics_names() -> None:
    """metrics_version v0 exposes gpu_cache_usage_perc and TPOT with model_name only."""
    async with async_emulator(metrics_version="v0") as srv, aiohttp.ClientSession() as s:
        text = await (await s.get(srv.url + "/metrics")).text()
    assert "vllm:gpu_cache_usage_perc{" in text and "kv_cache_usage_perc" not in text
    assert "vllm:time_per_output_token_seconds_bucket{" in text
    assert 'engine="0"' not in text


async def test_small_max_num_seqs_makes_requests_wait() -> None:
    """With max_num_seqs=1 a second request is counted in num_requests_waiting."""
    async with async_emulator(max_num_seqs=1) as srv, aiohttp.ClientSession() as s:
        body = {"prompt": "long", "max_tokens": 400, "stream": True}
        r1 = await s.post(srv.url + "/v1/completions", json=body)
        r2 = await s.post(srv.url + "/v1/completions", json=body)
        await r1.content.readline()
        m = _metrics(await (await s.get(srv.url + "/metrics")).text())
        assert _one(m, "vllm:num_requests_running") == 1
        assert _one(m, "vllm:num_requests_waiting") == 1
        assert 0 < _one(m, "vllm:kv_cache_usage_perc") < 1
        r1.close()
        r2.close()


async def test_client_disconnect_aborts_the_request() -> None:
    """A client that goes away mid-stream frees its slot and is counted as abort."""
    async with async_emulator(max_num_seqs=1) as srv, aiohttp.ClientSession() as s:
        body = {"prompt": "bye", "max_tokens": 2000, "stream": True}
        r = await s.post(srv.url + "/v1/completions", json=body)
        await r.content.readline()
        r.close()
        for _ in range(100):
            m = _metrics(await (await s.get(srv.url + "/metrics")).text())
            if _one(m, "vllm:num_requests_running") == 0:
                break
            await _sleep(0.02)
        assert _one(m, "vllm:num_requests_running") == 0
        assert (
            m["vllm:request_success_total"][
                (("engine", "0"), ("finished_reason", "abort"), ("model_name", MODEL))
            ]
            == 1
        )


async def _sleep(s: float) -> None:
    import asyncio

    await asyncio.sleep(s)


def test_sync_helper_serves_in_a_thread() -> None:
    """running_emulator yields a URL that plain blocking clients can use."""
    with running_emulator(metrics_version="v0", served_model_name="m") as url:
        with urllib.request.urlopen(url + "/health") as resp:
            assert resp.status == 200
        req = urllib.request.Request(
            url + "/v1/completions",
            data=json.dumps({"model": "m", "prompt": "x", "max_tokens": 4}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req) as resp:
            assert json.load(resp)["usage"]["completion_tokens"] == 4


async def test_settings_are_validated() -> None:
    """A bad metrics version or an unknown profile is refused before serving."""
    with pytest.raises(ValueError, match="metrics_version"):
        EmulatorSettings(metrics_version="v9")  # type: ignore[arg-type]
    with pytest.raises((ValueError, KeyError)):
        await EmulatorServer.start(EmulatorSettings(profile="no-such@thing"))


async def test_admission_limit_refuses_and_counts_like_vllm() -> None:
    """``max_num_queued_reqs``: a request that would make more than the limit
    waiting + running is refused with 503 (so a load balancer retries
    elsewhere) and counted in ``vllm:admission_rejections_total``, which the
    scaler reads as turned-away demand (metric set ``v0.32``)."""
    async with (
        async_emulator(max_num_seqs=1, max_num_queued_reqs=2, metrics_version="v0.32") as srv,
        aiohttp.ClientSession() as s,
    ):
        body = {"prompt": [1, 2, 3], "max_tokens": 2000, "stream": True}
        held = [await s.post(srv.url + "/v1/completions", json=body) for _ in range(2)]
        try:
            async with s.post(srv.url + "/v1/completions", json=body) as r:
                assert r.status == 503
                err = await r.json()
            assert err["code"] == 503 and "busy" in err["message"]
            async with s.get(srv.url + "/metrics") as r:
                metrics = _metrics(await r.text())
        finally:
            for response in held:
                response.close()
    rejected = metrics["vllm:admission_rejections_total"]
    assert rejected[(("model_name", MODEL), ("reason", "max_num_queued_reqs"))] == 1.0
    assert rejected[(("model_name", MODEL), ("reason", "max_num_queued_tokens"))] == 0.0
