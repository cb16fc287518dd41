"""vLLM's HTTP API on a real socket, backed by the replica model (aiohttp.web).

``/health``, ``/metrics`` (``engine.metrics``), ``/v1/models``,
``/v1/completions`` and ``/v1/chat/completions`` (SSE or plain JSON), with
vLLM's error bodies (400 for bad requests, 404 for an unknown model).
Once the replica model raised, ``/health`` is 503 and every generation
request, in flight or new, gets vLLM's 500 or stream error event. A dropped
connection cancels its handler, so the request is aborted at once as vLLM
does. ``max_tokens`` is produced exactly (as with ``ignore_eos``, finishing
with ``length``); without it ``default_max_tokens`` stands in for an EOS
(``stop``). Prompt lengths: ``engine.emulator.tokens``.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from engine.emulator import openai_format as fmt
from engine.emulator.driver import WALL_CLOCK, EngineDead, ModelClock, ReplicaDriver, TokenStream
from engine.emulator.tokens import count_chat_tokens, count_prompt_tokens, filler_text
from engine.metrics import (
    METRICS_VERSIONS,
    MetricsVersion,
    ServerInfo,
    content_type,
    render_metrics,
)
from engine.profiles import Profile, get_profile
from engine.replica import Replica, RequestRejected
from engine.validate import int_at_least

DEFAULT_PROFILE = "llama-3-8b@g5.xlarge"
#: vLLM's message when admission control turns a request away (HTTP 503).
QUEUE_FULL = (
    "The engine is currently busy and cannot accept new requests. "
    "Please try again later or on a different instance."
)


@dataclass(frozen=True)
class EmulatorSettings:
    """One emulated replica: which profile, under which name, with which overrides.

    `max_num_seqs`, `num_gpu_blocks`, `max_model_len` override the profile's
    vLLM settings (tests use a small `max_num_seqs` to make requests queue).
    `api_server_count` > 1 serves /metrics as vLLM's multiprocess registry
    does: no ``_created`` samples, and no scheduler-gauge samples before the
    first request (only ``# HELP``/``# TYPE`` lines).
    `max_num_queued_reqs` is vLLM's admission limit on requests in the system
    (waiting + running): one more is refused with 503 and counted in
    ``vllm:admission_rejections_total{reason="max_num_queued_reqs"}``.
    `clock` maps the model's time to the wall clock (the stack runs it faster).
    `stall_seed` seeds the replica's stalls (a profile's `stalls`), so emulated
    replicas side by side do not stall together.
    """

    profile: str = DEFAULT_PROFILE
    served_model_name: str | None = None
    metrics_version: MetricsVersion = "v1"
    max_num_seqs: int | None = None
    num_gpu_blocks: int | None = None
    max_model_len: int | None = None
    default_max_tokens: int = 128
    api_server_count: int = 1
    max_num_queued_reqs: int | None = None
    clock: ModelClock = WALL_CLOCK
    stall_seed: int = 0
    overrides: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.metrics_version not in METRICS_VERSIONS:
            raise ValueError(
                f"metrics_version must be one of {', '.join(METRICS_VERSIONS)}, "
                f"got {self.metrics_version!r}"
            )
        if self.default_max_tokens < 1:
            raise ValueError(f"default_max_tokens must be >= 1, got {self.default_max_tokens}")
        if self.api_server_count < 1:
            raise ValueError(f"api_server_count must be >= 1, got {self.api_server_count}")
        if self.max_num_queued_reqs is not None and self.max_num_queued_reqs < 1:
            raise ValueError(f"max_num_queued_reqs must be >= 1, got {self.max_num_queued_reqs}")

    def build_profile(self) -> Profile:
        """The profile with the overrides applied (ValueError naming a bad one)."""
        prof = get_profile(self.profile)
        changes: dict[str, Any] = {}
        if self.max_num_seqs is not None:
            changes["max_num_seqs"] = self.max_num_seqs
            changes["max_num_batched_tokens"] = max(
                prof.vllm.max_num_batched_tokens, self.max_num_seqs
            )
        if self.num_gpu_blocks is not None:
            changes["num_gpu_blocks"] = self.num_gpu_blocks
        if self.max_model_len is not None:
            changes["max_model_len"] = self.max_model_len
        return prof.with_vllm(**changes) if changes else prof

    def model_name(self, profile: Profile) -> str:
        return self.served_model_name or profile.model.hf_id


class _BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, err_type: str = "BadRequestError"):
        super().__init__(message)
        self.status = status
        self.err_type = err_type


def _error(message: str, status: int = 400, err_type: str = "BadRequestError") -> web.Response:
    return web.json_response(
        fmt.error_body(message, err_type, status), status=status, dumps=fmt.dumps
    )


def _engine_error(exc: EngineDead) -> web.Response:
    return _error(str(exc), 500, "InternalServerError")


_DRIVER = web.AppKey("driver", ReplicaDriver)
_STATE = web.AppKey("state", dict)


def create_app(settings: EmulatorSettings) -> web.Application:
    """The aiohttp application for one emulated replica (model clock starts on startup)."""
    profile = settings.build_profile()
    model = settings.model_name(profile)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    state: dict[str, Any] = {
        "settings": settings,
        "profile": profile,
        "model": model,
        "root": profile.model.hf_id,
        "started": time.time(),
        "stepped": False,
        "rejections": {},
    }
    app[_STATE] = state

    async def on_startup(app: web.Application) -> None:
        driver = ReplicaDriver(Replica(profile, stall_seed=settings.stall_seed), settings.clock)
        driver.start()
        app[_DRIVER] = driver

    async def on_cleanup(app: web.Application) -> None:
        await app[_DRIVER].stop()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    app.router.add_get("/health", _health)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/v1/models", _models)
    app.router.add_post("/v1/completions", _completions)
    app.router.add_post("/v1/chat/completions", _chat)
    return app


def driver_of(app: web.Application) -> ReplicaDriver:
    """The running model clock of an app (for tests and the demo)."""
    return app[_DRIVER]


async def _health(request: web.Request) -> web.Response:
    return web.Response(status=200 if request.app[_DRIVER].healthy else 503)


async def _metrics(request: web.Request) -> web.Response:
    driver = request.app[_DRIVER]
    state = request.app[_STATE]
    settings: EmulatorSettings = state["settings"]
    profile: Profile = state["profile"]
    driver.sync()
    replica = driver.replica
    server = ServerInfo(
        admission_rejections=tuple(state["rejections"].items()),
        block_size=profile.vllm.block_size,
        num_gpu_blocks=replica.limits.num_gpu_blocks,
        gpu_memory_utilization=profile.vllm.gpu_memory_utilization,
        max_model_len=profile.vllm.max_model_len,
    )
    body = render_metrics(
        replica.metrics_snapshot(),
        model_name=state["model"],
        version=settings.metrics_version,
        created=state["started"],
        server=server,
        multiprocess=settings.api_server_count > 1,
        fresh=not state["stepped"],
    )
    return web.Response(body=body, headers={"Content-Type": content_type(settings.metrics_version)})


async def _models(request: web.Request) -> web.Response:
    state = request.app[_STATE]
    body = fmt.models_body(
        state["model"],
        state["root"],
        int(state["started"]),
        state["profile"].vllm.max_model_len,
    )
    return web.json_response(body, dumps=fmt.dumps)


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=False)


async def _chat(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=True)


def _parse(body: Any, chat: bool, state: dict[str, Any]) -> tuple[int, int, str, bool, bool]:
    """(prompt tokens, output tokens, finished reason, stream, include usage) or _BadRequest."""
    if not isinstance(body, dict):
        raise _BadRequest("request body must be a JSON object")
    model = body.get("model")
    if model is not None and model != state["model"]:
        raise _BadRequest(f"The model `{model}` does not exist.", 404, "NotFoundError")
    try:
        if chat:
            prompt = count_chat_tokens(body.get("messages"))
        else:
            if "prompt" not in body:
                raise ValueError("prompt is required")
            prompt = count_prompt_tokens(body["prompt"])
    except ValueError as exc:
        raise _BadRequest(str(exc)) from exc
    if body.get("n", 1) != 1:
        raise _BadRequest("n must be 1 (the emulator produces one choice)")
    max_len = state["profile"].vllm.max_model_len
    max_tokens = body.get("max_completion_tokens") if chat else None
    if max_tokens is None:
        max_tokens = body.get("max_tokens")
    if max_tokens is not None:
        if not int_at_least(max_tokens, 1):
            raise _BadRequest(f"max_tokens must be an integer >= 1, got {max_tokens!r}")
        out, reason = max_tokens, "length"
    else:
        if prompt >= max_len:
            raise _BadRequest(
                f"This model's maximum context length is {max_len} tokens. However, your "
                f"request has {prompt} input tokens. Please reduce the length of the input "
                "messages."
            )
        out, reason = min(state["settings"].default_max_tokens, max_len - prompt), "stop"
    stream = bool(body.get("stream", False))
    opts = body.get("stream_options") or {}
    if not isinstance(opts, dict):
        raise _BadRequest("stream_options must be an object")
    include_usage = bool(opts.get("include_usage", False))
    if include_usage and not stream:
        raise _BadRequest("Stream options can only be defined when `stream=True`.")
    return prompt, out, reason, stream, include_usage


async def _generate(request: web.Request, chat: bool) -> web.StreamResponse:
    state = request.app[_STATE]
    driver = request.app[_DRIVER]
    try:
        body = json.loads(await request.read())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return _error(f"malformed JSON body: {exc}")
    try:
        prompt, out, reason, stream_mode, include_usage = _parse(body, chat, state)
    except _BadRequest as exc:
        return _error(str(exc), exc.status, exc.err_type)
    if driver.failure is not None:
        return _engine_error(EngineDead(driver.failure))
    if not driver.healthy:
        return _error("the engine is not running", 500, "InternalServerError")
    limit = state["settings"].max_num_queued_reqs
    if limit is not None:
        driver.sync()
        snap = driver.replica.metrics_snapshot()
        if snap.num_requests_waiting + snap.num_requests_running + 1 > limit:
            rejections = state["rejections"]
            rejections["max_num_queued_reqs"] = rejections.get("max_num_queued_reqs", 0) + 1
            return _error(QUEUE_FULL, 503, "ServiceUnavailableError")
    rid = driver.new_request_id("chatcmpl" if chat else "cmpl")
    state["stepped"] = True  # the engine logs a step: multiprocess pages get samples
    try:
        stream = driver.submit(rid, prompt, out, reason)
    except RequestRejected as exc:
        return _error(str(exc))
    except EngineDead as exc:
        return _engine_error(exc)
    reply = _Reply(stream, chat, rid, int(time.time()), state["model"], prompt, include_usage)
    try:
        if not stream_mode:
            return await _whole(reply)
        return await _sse(request, reply)
    except EngineDead as exc:  # plain request in flight when the engine died
        return _engine_error(exc)
    finally:
        driver.abort(stream)  # no-op once finished or failed; runs on cancellation too


@dataclass(frozen=True)
class _Reply:
    """What the answer to one generation request is written from: its stream of
    tokens, its kind and id, the body fields (created, model) and the usage asked."""

    stream: TokenStream
    chat: bool
    rid: str
    created: int
    model: str
    prompt: int
    include_usage: bool


async def _whole(reply: _Reply) -> web.Response:
    while True:
        _, rec = await reply.stream.wait()
        if rec is not None:
            break
    text = filler_text(0, rec.output_tokens)
    make = fmt.chat_response if reply.chat else fmt.completion_response
    body = make(
        reply.rid,
        reply.created,
        reply.model,
        text,
        rec.finished_reason,
        reply.prompt,
        rec.output_tokens,
    )
    return web.json_response(body, dumps=fmt.dumps)


async def _sse(request: web.Request, reply: _Reply) -> web.StreamResponse:
    resp = web.StreamResponse(
        status=200, headers={"Content-Type": "text/event-stream; charset=utf-8"}
    )
    await resp.prepare(request)
    with contextlib.suppress(ConnectionError):
        try:
            async for chunk in _events(reply):
                await resp.write(chunk)
        except EngineDead as exc:
            await resp.write(fmt.stream_error_event(str(exc), "InternalServerError", 500))
        await resp.write_eof()
    return resp


async def _events(reply: _Reply) -> AsyncIterator[bytes]:
    """The SSE bytes, one write per wake-up (all tokens that became due together)."""
    chat, rid, created, model = reply.chat, reply.rid, reply.created, reply.model
    sent = 0
    while True:
        n, rec = await reply.stream.wait()
        parts: list[bytes] = []
        if chat and sent == 0 and n > 0:
            parts.append(fmt.chat_role_chunk(rid, created, model))
        for i in range(sent, n):
            last = rec is not None and i == n - 1
            finish = rec.finished_reason if (last and rec is not None) else None
            text = filler_text(i, i + 1)
            if chat:
                parts.append(fmt.chat_chunk(rid, created, model, text, finish))
            else:
                parts.append(fmt.completion_chunk(rid, created, model, text, finish))
        sent = max(sent, n)
        if rec is not None:
            if reply.include_usage:
                parts.append(
                    fmt.usage_chunk(rid, created, model, chat, reply.prompt, rec.output_tokens)
                )
            parts.append(fmt.DONE_EVENT)
            yield b"".join(parts)
            return
        if parts:
            yield b"".join(parts)


class EmulatorServer:
    """A started emulator on a socket: `url`, `port`, `app`; `await close()` to stop.

    Start with ``await EmulatorServer.start(settings, host, port)`` (port 0
    picks a free port) or ``async with EmulatorServer.running(...) as server``.
    """

    def __init__(self, runner: web.AppRunner, host: str, port: int) -> None:
        self._runner = runner
        self.host = host
        self.port = port

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def app(self) -> web.Application:
        return self._runner.app

    @property
    def driver(self) -> ReplicaDriver:
        return driver_of(self.app)

    @classmethod
    async def start(
        cls, settings: EmulatorSettings, host: str = "127.0.0.1", port: int = 0
    ) -> EmulatorServer:
        runner = web.AppRunner(
            create_app(settings),
            access_log=None,
            shutdown_timeout=1.0,
            handler_cancellation=True,  # a dropped client aborts its request (vLLM does)
        )
        await runner.setup()
        site = web.TCPSite(runner, host, port, backlog=4096)
        await site.start()
        bound = runner.addresses[0][1]
        return cls(runner, host, int(bound))

    @classmethod
    @contextlib.asynccontextmanager
    async def running(
        cls, settings: EmulatorSettings, host: str = "127.0.0.1", port: int = 0
    ) -> AsyncIterator[EmulatorServer]:
        server = await cls.start(settings, host, port)
        try:
            yield server
        finally:
            await server.close()

    async def close(self) -> None:
        await self._runner.cleanup()


async def serve_forever(settings: EmulatorSettings, host: str, port: int) -> None:
    """Run until cancelled (the `prescaler emulate` command)."""
    import asyncio

    async with EmulatorServer.running(settings, host, port) as server:
        prof = server.app[_STATE]["profile"]
        count = settings.api_server_count
        servers = f", {count} API servers" if count > 1 else ""
        print(
            f"prescaler emulate: {prof.name} as {server.app[_STATE]['model']!r} "
            f"(metrics {settings.metrics_version}{servers}) on {server.url}",
            flush=True,
        )
        await asyncio.Event().wait()
