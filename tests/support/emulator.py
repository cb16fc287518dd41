"""Start emulated vLLM replicas from any test (sync or async).

Each replica is `engine.emulator` on 127.0.0.1 and a free port, timed by an
engine profile, with vLLM's HTTP API and /metrics.

Synchronous tests (the server runs on its own event loop in a daemon thread)::

    from tests.support.emulator import running_emulator

    with running_emulator(profile="llama-3-8b@p5.48xlarge", metrics_version="v1") as url:
        urllib.request.urlopen(url + "/metrics")  # url is "http://127.0.0.1:PORT"

    with running_emulators(3, max_num_seqs=2) as urls:  # several replicas at once
        ...

A separate process (its own CPU core and GIL; what timing benchmarks want;
runs ``python -m prescaler.cli emulate --port 0``)::

    with emulator_process(profile="llama-3-8b@g5.xlarge") as url:
        ...

Async tests (the server runs on the test's own loop)::

    async with async_emulator(metrics_version="v0") as server:
        server.url, server.driver.replica      # the model itself, for assertions

To make requests queue (``vllm:num_requests_waiting > 0``) pass a small
``max_num_seqs`` (e.g. 1 or 2) and send long outputs (``max_tokens`` large,
``"stream": true``); ``num_gpu_blocks`` (with a small ``max_model_len``) makes
the KV cache fill and preempt. ``served_model_name`` changes the model name
clients must send and the metrics' ``model_name`` label (default: the
profile's Hugging Face id, e.g. ``meta-llama/Meta-Llama-3-8B-Instruct``).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any

from engine.emulator import EmulatorServer, EmulatorSettings

FAST_PROFILE = "llama-3-8b@p5.48xlarge"


def _settings(profile: str, **kwargs: Any) -> EmulatorSettings:
    return EmulatorSettings(profile=profile, **kwargs)


@contextlib.asynccontextmanager
async def async_emulator(
    profile: str = FAST_PROFILE, **kwargs: Any
) -> AsyncIterator[EmulatorServer]:
    """An emulator on the running loop; yields the `EmulatorServer` (`.url`, `.driver`)."""
    async with EmulatorServer.running(_settings(profile, **kwargs)) as server:
        yield server


@contextlib.contextmanager
def running_emulators(
    count: int, profile: str = FAST_PROFILE, **kwargs: Any
) -> Iterator[list[str]]:
    """`count` emulators served from one background thread; yields their base URLs."""
    settings = _settings(profile, **kwargs)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    servers: list[EmulatorServer] = []
    errors: list[BaseException] = []
    stop: asyncio.Event | None = None

    async def main() -> None:
        nonlocal stop
        stop = asyncio.Event()
        try:
            for _ in range(count):
                servers.append(await EmulatorServer.start(settings))
        except BaseException as exc:
            errors.append(exc)
            ready.set()
            for s in servers:
                await s.close()
            return
        ready.set()
        await stop.wait()
        for s in servers:
            await s.close()

    thread = threading.Thread(
        target=loop.run_until_complete, args=(main(),), name="emulator", daemon=True
    )
    thread.start()
    ready.wait(30)
    try:
        if errors:
            raise errors[0]
        if len(servers) != count:
            raise TimeoutError("emulator did not start within 30 s")
        yield [s.url for s in servers]
    finally:
        if stop is not None:
            loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


@contextlib.contextmanager
def running_emulator(profile: str = FAST_PROFILE, **kwargs: Any) -> Iterator[str]:
    """One emulator in a background thread; yields its base URL ``http://127.0.0.1:PORT``.

    Keyword arguments are `EmulatorSettings` fields: ``metrics_version``
    ("v1" | "v0"), ``served_model_name``, ``max_num_seqs``, ``num_gpu_blocks``,
    ``max_model_len``, ``default_max_tokens``.
    """
    with running_emulators(1, profile, **kwargs) as urls:
        yield urls[0]


_FLAGS = {
    "served_model_name": "--served-model-name",
    "metrics_version": "--metrics-version",
    "max_num_seqs": "--max-num-seqs",
    "num_gpu_blocks": "--num-gpu-blocks",
    "max_model_len": "--max-model-len",
    "default_max_tokens": "--default-max-tokens",
}


@contextlib.contextmanager
def emulator_process(
    profile: str = FAST_PROFILE, startup_timeout_s: float = 60.0, **kwargs: Any
) -> Iterator[str]:
    """`prescaler emulate` in a child process on a free port; yields its base URL."""
    cmd = [sys.executable, "-m", "prescaler.cli", "emulate", "--profile", profile, "--port", "0"]
    for key, value in kwargs.items():
        if key not in _FLAGS:
            raise ValueError(f"unknown emulator option {key!r}; expected one of {sorted(_FLAGS)}")
        if value is not None:
            cmd += [_FLAGS[key], str(value)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if " on http://" not in line:
            proc.kill()
            _, err = proc.communicate(timeout=10)
            raise RuntimeError(f"emulator did not start: {line!r} {err[-2000:]}")
        url = line.rsplit(" on ", 1)[1].strip()
        deadline = time.monotonic() + startup_timeout_s
        while True:
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
