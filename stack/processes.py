"""The real processes of a stack run: Prometheus, ``prescaler serve``, ``prescaler emulate``.

Every child is started in its own session (a Ctrl-C in the terminal reaches
only the stack, which then stops each child itself, in order) and asked to
die with its parent (``PR_SET_PDEATHSIG``), so a stack killed outright leaves
nothing behind. Ports are taken from the kernel (bind to port 0) and
everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

__all__ = [
    "INSTALL_HINT",
    "Child",
    "EmulatorProcess",
    "PrometheusProcess",
    "ScalerProcess",
    "StackError",
    "free_port",
    "prescaler_argv",
    "prometheus_binary",
    "quiet_grpc_forks",
]

INSTALL_HINT = (
    "prescaler stack needs Prometheus: install it with `apt-get install -y prometheus` "
    "(Debian/Ubuntu; then `systemctl disable --now prometheus` stops the system service "
    "it starts), or put a `prometheus` binary on the PATH"
)
LOCALHOST = "127.0.0.1"


class StackError(RuntimeError):
    """A process of the stack could not start or died; the message says which and why."""


def prometheus_binary() -> str | None:
    """The ``prometheus`` binary on the PATH (or Debian's path), else None."""
    found = shutil.which("prometheus")
    if found:
        return found
    return "/usr/bin/prometheus" if Path("/usr/bin/prometheus").exists() else None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOCALHOST, 0))
        return int(sock.getsockname()[1])


GRPC_FORK_SUPPORT_ENV = "GRPC_ENABLE_FORK_SUPPORT"


def quiet_grpc_forks() -> None:
    """Turn gRPC's fork support off in this process (not its children) unless
    the environment says otherwise; call before gRPC loads.

    The stack forks its children while its gRPC client is busy; every child
    execs at once, so gRPC's fork handlers only print ``skipping fork()
    handlers`` on the stack's terminal."""
    global _CHILD_ENV_DROPS
    if GRPC_FORK_SUPPORT_ENV not in os.environ:
        os.environ[GRPC_FORK_SUPPORT_ENV] = "false"
        # only this process's gRPC client: the children (``prescaler serve``
        # among them) run with gRPC's settings as production has them
        _CHILD_ENV_DROPS = frozenset({GRPC_FORK_SUPPORT_ENV})


_CHILD_ENV_DROPS: frozenset[str] = frozenset()
"""Variables this process set for itself that its children must not inherit."""


def _child_env(extra: Mapping[str, str] | None) -> dict[str, str] | None:
    """The environment a child starts with: this process's, less what it set
    for itself alone, plus ``extra`` (None: inherit unchanged)."""
    if extra is None and not _CHILD_ENV_DROPS:
        return None
    env = {k: v for k, v in os.environ.items() if k not in _CHILD_ENV_DROPS}
    return {**env, **(extra or {})}


def _prctl() -> Any:
    try:
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):  # not glibc Linux: children cannot die with the stack
        return None


_PRCTL = _prctl()
"""Loaded and looked up here, in the parent: a child between fork and exec
must not ``dlopen`` or ``dlsym``, whose lock another of the stack's threads
may have held at the fork."""


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    if _PRCTL is not None:
        with contextlib.suppress(Exception):
            _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _fmt_s(seconds: float) -> str:
    """A Prometheus duration in whole milliseconds (at least 1 ms)."""
    return f"{max(1, round(seconds * 1000))}ms"


@dataclass
class Child:
    """One child process with its log file."""

    name: str
    argv: Sequence[str]
    log_path: Path
    env: Mapping[str, str] | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log: IO[bytes] = self.log_path.open("ab")
        try:
            self.process = subprocess.Popen(
                list(self.argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
                env=_child_env(self.env),
            )
        except OSError as exc:
            raise StackError(f"{self.name}: cannot start {self.argv[0]}: {exc}") from exc
        finally:
            log.close()

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def kill(self) -> None:
        """SIGKILL at once (a crash, for chaos tests)."""
        if self.alive:
            assert self.process is not None
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout_s``; waits."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _get(url: str, timeout_s: float = 1.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (urllib.error.URLError, OSError, TimeoutError):
        return 0


def wait_http(child: Child, url: str, timeout_s: float) -> None:
    """Wait until ``url`` answers 200; a StackError naming the child otherwise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not child.alive:
            raise StackError(f"{child.name} exited: {child.log_tail()}")
        if _get(url) == 200:
            return
        time.sleep(0.05)
    raise StackError(f"{child.name} not ready after {timeout_s:g} s: {child.log_tail()}")


class PrometheusProcess:
    """Prometheus scraping the vLLM replicas (a file_sd list the stack rewrites)
    and the scaler(s), every ``scrape_interval_s`` wall seconds."""

    def __init__(
        self,
        workdir: Path,
        *,
        scrape_interval_s: float,
        lookback_delta_s: float,
        scaler_targets: Sequence[str] = (),
        port: int | None = None,
        vllm_labels: Mapping[str, str] | None = None,
    ) -> None:
        binary = prometheus_binary()
        if binary is None:
            raise StackError(INSTALL_HINT)
        self.workdir = workdir
        self.port = port or free_port()
        self.url = f"http://{LOCALHOST}:{self.port}"
        self.data_path = workdir / "data"
        self.config_path = workdir / "prometheus.yml"
        self.targets_path = workdir / "vllm-targets.json"
        self.scrape_interval_s = scrape_interval_s
        self.vllm_labels = dict(vllm_labels or {})
        self._targets: dict[str, dict[str, str]] = {}
        self.extra_targets: dict[str, dict[str, str]] = {}
        """Scrape targets kept beside the replicas' (chaos tests: a slow or broken one)."""
        workdir.mkdir(parents=True, exist_ok=True)
        self.set_targets({})
        interval = _fmt_s(scrape_interval_s)
        config: dict[str, Any] = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [
                {
                    "job_name": "vllm",
                    "scrape_interval": interval,
                    "scrape_timeout": interval,
                    "file_sd_configs": [
                        {"files": [str(self.targets_path)], "refresh_interval": "1s"}
                    ],
                },
                {
                    "job_name": "prescaler",
                    "scrape_interval": interval,
                    "scrape_timeout": interval,
                    "static_configs": [{"targets": list(scaler_targets)}],
                },
            ],
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.child = Child(
            "prometheus",
            [
                binary,
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.data_path}",
                f"--web.listen-address={LOCALHOST}:{self.port}",
                "--storage.tsdb.retention.time=30d",
                f"--query.lookback-delta={_fmt_s(lookback_delta_s)}",
                "--log.level=warn",
            ],
            workdir / "prometheus.log",
        )

    def set_targets(self, targets: Mapping[str, Mapping[str, str]]) -> None:
        """Replace the vLLM scrape targets (``host:port`` -> extra labels), atomically."""
        self._targets = {k: dict(v) for k, v in targets.items()}
        every = {**self.extra_targets, **self._targets}
        groups = [
            {"targets": [address], "labels": {**self.vllm_labels, **labels}}
            for address, labels in sorted(every.items())
        ]
        tmp = self.targets_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(groups))
        os.replace(tmp, self.targets_path)

    def start(self, timeout_s: float = 30.0) -> None:
        self.child.start()
        wait_http(self.child, f"{self.url}/-/ready", timeout_s)

    def stop(self) -> None:
        self.child.stop(timeout_s=15.0)

    def kill(self) -> None:
        self.child.kill()

    def query(self, expr: str, timeout_s: float = 2.0) -> list[dict[str, Any]]:
        """Instant query (raises OSError / ValueError on failure)."""
        from urllib.parse import urlencode

        url = f"{self.url}/api/v1/query?{urlencode({'query': expr})}"
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            body = json.load(resp)
        if body.get("status") != "success":
            raise ValueError(f"prometheus: {body}")
        return list(body["data"]["result"])


def prescaler_argv(speed: float, command: Sequence[str]) -> list[str]:
    """``prescaler COMMAND...`` in a new interpreter; at ``speed`` != 1 through
    :mod:`stack.speed`, which hands the command the faster clock."""
    launcher = ["prescaler.cli"] if speed == 1.0 else ["stack.speed", "--speed", repr(speed)]
    return [sys.executable, "-m", *launcher, *command]


class ScalerProcess:
    """``prescaler serve`` on a free gRPC port and a free metrics port."""

    def __init__(
        self, workdir: Path, flags: Sequence[str], name: str = "scaler", speed: float = 1.0
    ) -> None:
        self.port = free_port()
        self.metrics_port = free_port()
        self.name = name
        serve = ["serve", "--host", LOCALHOST, "--port", str(self.port)]
        serve += ["--metrics-port", str(self.metrics_port), *flags]
        self.child = Child(name, prescaler_argv(speed, serve), workdir / f"{name}.log")

    @property
    def address(self) -> str:
        return f"{LOCALHOST}:{self.port}"

    @property
    def metrics_address(self) -> str:
        return f"{LOCALHOST}:{self.metrics_port}"

    def start(self, timeout_s: float = 60.0) -> None:
        self.child.start()
        wait_http(self.child, f"http://{self.metrics_address}/metrics", timeout_s)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection((LOCALHOST, self.port), 1):
                return
            time.sleep(0.05)
        raise StackError(f"{self.name}: gRPC port {self.port} not open: {self.child.log_tail()}")

    def stop(self) -> None:
        self.child.stop(timeout_s=15.0)


class EmulatorProcess:
    """``prescaler emulate`` (through :mod:`stack.speed` at ``speed`` != 1)."""

    def __init__(
        self,
        workdir: Path,
        index: int,
        *,
        profile: str,
        speed: float,
        served_model_name: str | None = None,
    ) -> None:
        self.port = free_port()
        self.index = index
        args = ["emulate", "--profile", profile, "--host", LOCALHOST, "--port", str(self.port)]
        args += ["--stall-seed", str(index)]  # a profile with stalls: each replica its own
        if served_model_name:
            args += ["--served-model-name", served_model_name]
        self.child = Child(
            f"replica-{index}",
            prescaler_argv(speed, args),
            workdir / "replicas" / f"replica-{index}.log",
        )
        self._serving = False

    @property
    def address(self) -> str:
        return f"{LOCALHOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def start(self) -> None:
        self._serving = False
        self.child.start()

    def serving(self) -> bool:
        """The process logged that it serves (no network round trip: cheap to ask often)."""
        if not self._serving and self.child.alive:
            self._serving = " on http://" in self.child.log_tail(4000)
        return self._serving and self.child.alive

    def healthy(self) -> bool:
        return self.child.alive and _get(f"{self.url}/health", 0.5) == 200

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        wait_http(self.child, f"{self.url}/health", timeout_s)

    def stop(self) -> None:
        self.child.stop(timeout_s=5.0)

    def kill(self) -> None:
        self.child.kill()
