"""A real Prometheus server for integration tests.

Why a real one: the scaler's grouped PromQL, range-query backfill and
staleness handling are only proven against the engine that evaluates them.
The fixture writes a config with the targets a test gives, starts
``prometheus`` on a free port with a throw-away TSDB, waits for ``/-/ready``
and stops it afterwards. Under CI (``tests.support.ci``) a missing binary fails the run
(never a silent skip); elsewhere the test is skipped with the reason.

Usage::

    with running_prometheus([Target("127.0.0.1:8001", {"namespace": "llm"})]) as prom:
        prom.wait_for_series('vllm:num_requests_waiting')
        prom.query('sum(vllm:num_requests_waiting)')
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.ci import fail_in_ci_else_skip

DEFAULT_BINARY = "/usr/bin/prometheus"


@dataclass(frozen=True)
class Target:
    """One scrape target (``host:port``) with the static labels Prometheus adds."""

    address: str
    labels: Mapping[str, str] = field(default_factory=dict)
    metrics_path: str = "/metrics"


def prometheus_binary() -> str:
    """Path of the ``prometheus`` binary; fail under CI, skip elsewhere when absent."""
    found = shutil.which("prometheus") or (
        DEFAULT_BINARY if Path(DEFAULT_BINARY).exists() else None
    )
    if found:
        return found
    reason = (
        "the `prometheus` binary is not installed (Debian package `prometheus`; "
        "`.ci/run` installs it)"
    )
    fail_in_ci_else_skip(reason)


def backfill_openmetrics(openmetrics: Path, data_dir: Path, timeout_s: float = 120.0) -> None:
    """Write TSDB blocks for an OpenMetrics file (timestamps in seconds, ``# EOF``)
    into ``data_dir``, the storage a ``PrometheusServer`` on the same ``workdir``
    then opens (``workdir / "data"``): history that a fresh server would need
    hours of scraping to gather. Uses ``promtool`` from the same package."""
    promtool = shutil.which("promtool") or str(Path(prometheus_binary()).with_name("promtool"))
    if not Path(promtool).exists():
        pytest.skip("`promtool` (Debian package `prometheus`) is not installed")
    data_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(data_dir)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"promtool failed ({done.returncode}): {done.stderr[-2000:]}")


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _as_target(item: Target | str) -> Target:
    return item if isinstance(item, Target) else Target(item)


def render_config(targets: Sequence[Target | str], scrape_interval_s: float) -> dict[str, Any]:
    """The prometheus.yml for ``targets``: one job, one static_config per target."""
    interval = f"{int(scrape_interval_s * 1000)}ms"
    groups: dict[str, list[dict[str, Any]]] = {}
    for item in map(_as_target, targets):
        groups.setdefault(item.metrics_path, []).append(
            {"targets": [item.address], "labels": dict(item.labels)}
        )
    jobs = []
    for index, (path, statics) in enumerate(sorted(groups.items())):
        jobs.append(
            {
                "job_name": f"vllm-{index}",
                "metrics_path": path,
                "scrape_interval": interval,
                "scrape_timeout": interval,
                "static_configs": statics,
            }
        )
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": jobs,
    }


class PrometheusServer:
    """A Prometheus process under test control (start, stop, restart on the same port)."""

    def __init__(
        self,
        targets: Sequence[Target | str],
        *,
        scrape_interval_s: float = 1.0,
        workdir: Path,
        port: int | None = None,
    ) -> None:
        self.binary = prometheus_binary()
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workdir = workdir
        self.config_path = workdir / "prometheus.yml"
        self.data_path = workdir / "data"
        self.log_path = workdir / "prometheus.log"
        self.scrape_interval_s = scrape_interval_s
        self.set_targets(targets)
        self._process: subprocess.Popen[bytes] | None = None

    def set_targets(self, targets: Sequence[Target | str]) -> None:
        """Rewrite the config; takes effect at the next (re)start."""
        config = render_config(targets, self.scrape_interval_s)
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=True))

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, timeout_s: float = 30.0) -> None:
        """Start the server and wait until ``/-/ready`` answers 200."""
        if self.running:
            return
        log = self.log_path.open("ab")
        self._process = subprocess.Popen(
            [
                self.binary,
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.data_path}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                # Over the 3-day fit window, so a backfilled history is kept.
                "--storage.tsdb.retention.time=5d",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"prometheus exited with {self._process.returncode}: {self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1.0) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"prometheus not ready after {timeout_s}s: {self.log_tail()}")

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL) and wait for it."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def log_tail(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>`` and return ``data`` (raises on an error status)."""
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=5.0) as resp:
            body = json.load(resp)
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus error: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query; the vector result."""
        return list(self.api("query", query=expr)["result"])

    def wait_for(self, expr: str, *, min_series: int = 1, timeout_s: float = 30.0) -> None:
        """Wait until ``expr`` returns at least ``min_series`` series."""
        deadline = time.monotonic() + timeout_s
        last: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, RuntimeError, ValueError):
                last = self.query(expr)
                if len(last) >= min_series:
                    return
            time.sleep(0.2)
        raise TimeoutError(
            f"{expr!r} gave {len(last)} series after {timeout_s}s, want {min_series}"
        )

    def wait_for_targets_up(self, count: int, timeout_s: float = 30.0) -> None:
        """Wait until ``count`` targets report ``up == 1``."""
        self.wait_for("up == 1", min_series=count, timeout_s=timeout_s)


@contextlib.contextmanager
def running_prometheus(
    targets: Sequence[Target | str] = (),
    *,
    scrape_interval_s: float = 1.0,
    workdir: Path | None = None,
) -> Iterator[PrometheusServer]:
    """Start a real Prometheus scraping ``targets``; stop it and delete its data afterwards."""
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="prom-")))
        server = PrometheusServer(targets, scrape_interval_s=scrape_interval_s, workdir=workdir)
        stack.callback(server.stop)
        server.start()
        yield server
