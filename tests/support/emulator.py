"""Emulated vLLM replicas for any test, so no test needs a real GPU server.

Each is `engine.emulator` on 127.0.0.1 and a free port, timed by an engine
profile, with vLLM's HTTP API and /metrics: :func:`running_emulator` and
:func:`running_emulators` (sync tests: a daemon thread's own loop),
:func:`async_emulator` (the test's loop; yields the server, its ``.driver``
for assertions) and :func:`emulator_process` (``prescaler emulate`` in a
child: its own core and GIL, what timing benches want).

Keyword arguments are :class:`EmulatorSettings` fields: a small
``max_num_seqs`` with long streamed outputs makes requests queue,
``num_gpu_blocks`` (with a small ``max_model_len``) fills the KV cache,
``served_model_name`` renames the model clients send and ``/metrics`` labels.
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
