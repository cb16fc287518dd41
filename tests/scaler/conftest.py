"""Fixtures for the scaler's data-side tests: fake vLLM pages, a faulty
Prometheus proxy, a fake Kubernetes API, and the real Prometheus server.

Servers run on 127.0.0.1 port 0 in their own thread and event loop, so a
real Prometheus can scrape them while a test blocks, and so they keep
answering while the test's own loop is busy.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.support.prometheus import PrometheusServer, Target, running_prometheus

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ThreadedApp:
    """An aiohttp application served from a background thread on port 0."""

    def __init__(self, app: web.Application) -> None:
        self._app = app
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self.port = 0
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self._loop)

            async def setup() -> None:
                self._runner = web.AppRunner(self._app, access_log=None, shutdown_timeout=0.5)
                await self._runner.setup()
                site = web.TCPSite(self._runner, "127.0.0.1", 0)
                await site.start()
                self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

            self._loop.run_until_complete(setup())
            ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._runner.cleanup())  # type: ignore[union-attr]
            pending = asyncio.all_tasks(self._loop)  # e.g. a handler still sleeping
            for task in pending:
                task.cancel()
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("test server did not start")

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def stop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)


@dataclass
class Engine:
    """Counters and gauges of one vLLM engine (V1 has one per data-parallel rank)."""

    waiting: float = 0.0
    running: float = 0.0
    kv: float = 0.0
    success: float = 0.0
    prompt: float = 0.0
    generation: float = 0.0
    preemptions: float = 0.0
    per_second: dict[str, float] = field(default_factory=dict)
    """Counters that grow steadily: attribute name -> increase per second."""


@dataclass
class FakeVllm:
    """A vLLM ``/metrics`` page whose numbers and failure mode a test sets.

    ``mode``: ``ok``, ``refuse`` (HTTP 503), ``garbage`` (HTML), ``nan``,
    ``slow`` (sleeps ``delay_s``).
    """

    model: str = "llama"
    generation: str = "v1"
    engines: list[Engine] = field(default_factory=lambda: [Engine()])
    mode: str = "ok"
    delay_s: float = 5.0
    server: ThreadedApp | None = None
    started_at: float = field(default_factory=time.monotonic)

    def render(self) -> str:
        lines: list[str] = []

        def family(name: str, kind: str, attr: str, extra: str = "") -> None:
            lines.append(f"# HELP {name} test")
            lines.append(f"# TYPE {name} {kind}")
            for i, engine in enumerate(self.engines):
                labels = f'model_name="{self.model}"'
                if self.generation == "v1":
                    labels = f'engine="{i}",' + labels
                if extra:
                    labels += "," + extra
                value = getattr(engine, attr) + engine.per_second.get(attr, 0.0) * (
                    time.monotonic() - self.started_at
                )
                if self.mode == "nan" and attr == "waiting":
                    value = float("nan")
                lines.append(f"{name}{{{labels}}} {value}")

        family("vllm:num_requests_running", "gauge", "running")
        family("vllm:num_requests_waiting", "gauge", "waiting")
        if self.generation == "v1":
            family("vllm:kv_cache_usage_perc", "gauge", "kv")
            family("vllm:num_preemptions_total", "counter", "preemptions")
        else:
            family("vllm:gpu_cache_usage_perc", "gauge", "kv")
        family("vllm:request_success_total", "counter", "success", 'finished_reason="stop"')
        family("vllm:prompt_tokens_total", "counter", "prompt")
        family("vllm:generation_tokens_total", "counter", "generation")
        return "\n".join(lines) + "\n"

    def app(self) -> web.Application:
        async def metrics(_request: web.Request) -> web.StreamResponse:
            if self.mode == "refuse":
                return web.Response(status=503, text="engine dead")
            if self.mode == "garbage":
                return web.Response(text="<html><body>Not metrics</body></html>")
            if self.mode == "slow":
                await asyncio.sleep(self.delay_s)
            return web.Response(
                body=self.render().encode(),
                headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
            )

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        return app

    def start(self) -> FakeVllm:
        self.server = ThreadedApp(self.app())
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"{self.server.url}/metrics"

    @property
    def address(self) -> str:
        assert self.server is not None
        return self.server.address

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()


class PrometheusProxy:
    """Forwards the Prometheus HTTP API, or fails on purpose; counts queries.

    ``mode``: ``pass``, ``slow`` (sleep ``delay_s`` then forward), ``error``
    (HTTP 500), ``nan`` (every sample value ``NaN``), ``empty`` (no series),
    ``garbage`` (not JSON). A query holding ``slow_if`` (when set) is slow
    whatever the mode.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.mode = "pass"
        self.delay_s = 10.0
        self.slow_if: str | None = None
        self.queries: list[str] = []
        self._session: aiohttp.ClientSession | None = None
        self.server = ThreadedApp(self._app())

    @property
    def url(self) -> str:
        return self.server.url

    def _app(self) -> web.Application:
        async def forward(request: web.Request) -> web.StreamResponse:
            form: dict[str, Any] = dict(request.query)
            if request.method == "POST":
                form.update(dict(await request.post()))
            if request.path.startswith("/api/v1/query"):
                self.queries.append(str(form.get("query", "")))
            mode = self.mode
            if mode == "slow" or (self.slow_if and self.slow_if in str(form.get("query", ""))):
                await asyncio.sleep(self.delay_s)
            if mode == "error":
                return web.Response(status=500, text="internal error")
            if mode == "garbage":
                return web.Response(text="<html>oops</html>", content_type="text/html")
            if self._session is None:
                self._session = aiohttp.ClientSession()
            async with self._session.post(self.upstream + request.path, data=form) as upstream:
                body = await upstream.json(content_type=None)
                status = upstream.status
            if mode in ("nan", "empty") and isinstance(body.get("data"), dict):
                result = body["data"].get("result", [])
                if mode == "empty":
                    body["data"]["result"] = []
                else:
                    for item in result:
                        if "value" in item:
                            item["value"][1] = "NaN"
                        for pair in item.get("values", []):
                            pair[1] = "NaN"
            return web.json_response(body, status=status)

        app = web.Application()
        app.router.add_route("*", "/api/v1/{tail:.*}", forward)

        async def close_session(_app: web.Application) -> None:
            if self._session is not None:
                await self._session.close()

        app.on_cleanup.append(close_session)
        return app

    def stop(self) -> None:
        self.server.stop()


@pytest.fixture
def fake_vllm() -> Iterator[Callable[..., FakeVllm]]:
    """Factory of fake vLLM replicas, all stopped at the end of the test."""
    started: list[FakeVllm] = []

    def make(**kwargs: Any) -> FakeVllm:
        replica = FakeVllm(**kwargs).start()
        started.append(replica)
        return replica

    yield make
    for replica in started:
        replica.stop()


@pytest.fixture
def prometheus_server() -> Iterator[Callable[..., PrometheusServer]]:
    """Factory: ``prometheus_server([Target(...), ...])`` -> a started real Prometheus."""
    import contextlib

    with contextlib.ExitStack() as stack:

        def make(targets: list[Target | str], scrape_interval_s: float = 1.0) -> PrometheusServer:
            return stack.enter_context(
                running_prometheus(targets, scrape_interval_s=scrape_interval_s)
            )

        yield make


__all__ = [
    "Engine",
    "FakeVllm",
    "PrometheusProxy",
    "Target",
    "ThreadedApp",
]
