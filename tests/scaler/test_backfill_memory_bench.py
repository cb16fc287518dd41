"""Benchmark: the peak memory of a restart's backfill reads, 1,000 ScaledObjects
with distinct selections and a 3-day fit window each.

After a restart every object registers at once and ``scaler.refresh``
backfills them ``BACKFILL_CHUNK`` at a time through ``scaler.backfill.read_backfill``,
whose history reads page ``query_range`` at 10,000 points and read a source's
selections ``BACKFILL_BATCH`` at a time. A real Prometheus holding three days
of 1,000 namespaces' vLLM series takes longer to build than a bench may run,
so the reads go over real HTTP to a fake Prometheus (its own process) that
answers every range query as Prometheus would for this fleet: one series per
namespace the query's matchers select (``namespace="ns-7"`` or a
``namespace=~"ns-1|ns-7"`` alternation; every namespace when the query names
none), each with the page's samples as Prometheus writes them (``[time,
"value"]``). The backfill runs in a process of its own, whose kernel
high-water mark (``VmHWM``) is the figure.

Run with ``pytest -m bench tests/scaler/test_backfill_memory_bench.py``;
``BENCH_BACKFILL_OBJECTS`` (1000) sets the fleet, ``BENCH_BACKFILL_TIMEOUT_S``
the source's timeout (the scaler's 3 s by default). Writes
``bench-results/scaler-backfill-memory.json`` (``BENCH_BACKFILL_RESULTS``
names another file).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import subprocess
import sys
import time
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = (
    ROOT / "bench-results" / os.environ.get("BENCH_BACKFILL_RESULTS", "scaler-backfill-memory.json")
)
NAMESPACE = re.compile(r"ns-(\d+)")


# ------------------------------------------------------------ fake Prometheus


@lru_cache(maxsize=8)
def _page_values(start_s: float, end_s: float, step_s: float) -> str:
    """One series' ``values`` for a page, as Prometheus writes them; every
    series of the fleet shares it (the parsing cost is the client's)."""
    n = round((end_s - start_s) / step_s) + 1
    return ",".join(
        f'[{start_s + i * step_s:.3f},"{2.0 + math.sin(i / 240.0):.10g}"]' for i in range(n)
    )


def _instant_value(at_s: float) -> str:
    return f'[{at_s:.3f},"{2.0 + math.sin(at_s / 3600.0):.10g}"]'


def _series_labels(query: str, namespace: int) -> dict[str, str]:
    labels = {"model_name": "llama", "namespace": f"ns-{namespace}"}
    if "cache_config_info" in query:  # kv_cache: per replica and cache config
        labels.update(instance=f"10.0.{namespace // 250}.{namespace % 250}:8000")
        labels.update(num_gpu_blocks="4096", block_size="16")
    return labels


def _answer(query: str, namespaces: int, values: str, *, matrix: bool) -> bytes:
    """The JSON body Prometheus would send for ``query`` over this fleet."""
    if "sleep_state" in query or "last_over_time" in query:
        groups: list[dict[str, str]] = []  # nobody asleep, nobody lost
    elif query.strip() == "count(up)":
        groups = [{}]
    else:
        named = sorted({int(n) for n in NAMESPACE.findall(query)})
        chosen = named if named else range(namespaces)
        groups = [_series_labels(query, k) for k in chosen if k < namespaces]
    key = "values" if matrix else "value"
    result = ",".join(f'{{"metric":{json.dumps(g)},"{key}":{values}}}' for g in groups)
    kind = "matrix" if matrix else "vector"
    return (f'{{"status":"success","data":{{"resultType":"{kind}","result":[{result}]}}}}').encode()


def _serve_fake_prometheus(port: int, namespaces: int) -> None:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            query = form.get("query", "")
            if self.path.endswith("/query_range"):
                values = (
                    "["
                    + _page_values(float(form["start"]), float(form["end"]), float(form["step"]))
                    + "]"
                )
                body = _answer(query, namespaces, values, matrix=True)
            else:
                body = _answer(query, namespaces, _instant_value(float(form["time"])), matrix=False)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print("READY", flush=True)
    server.serve_forever()


# ------------------------------------------------------------ the backfill


def _status_kb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return float(line.split()[1])
    return math.nan


async def _backfill(address: str, objects: int, timeout_s: float) -> dict[str, Any]:
    """Register ``objects`` ScaledObjects (one namespace each) as a restarted
    scaler does, then read their backfill chunk by chunk as
    ``scaler.refresh`` does, dropping each chunk's answer once read (the
    refresh replays it into the trackers, then lets it go)."""
    from decision.settings import parse_settings
    from decision.tracker_data import TrackerConfig
    from scaler.backfill import BACKFILL_BATCH, BACKFILL_CHUNK, read_backfill
    from scaler.registry import ObjectRegistry
    from scaler.source_reader import SourceReader
    from scaler.sources.prometheus import PrometheusSource

    config = TrackerConfig()
    registry = ObjectRegistry(config)
    for k in range(objects):
        settings = parse_settings(
            {
                "prometheusAddress": address,
                "selector": f'namespace="ns-{k}"',
                "model": "llama",
                "scaleDownStabilizationSeconds": "60",
            }
        )
        registry.register(f"team-{k % 20}", f"so-{k}", settings)
    ring_points = next(iter(registry)).tracker.series.capacity
    source = PrometheusSource(address, timeout_s=timeout_s)
    reader = SourceReader(lambda spec: source)
    rss_registered_kb = _status_kb("VmRSS")
    hwm_registered_kb = _status_kb("VmHWM")
    tick = math.floor(time.time() / config.refresh_interval_s) * config.refresh_interval_s
    with_history = 0
    history_points = 0
    chunks = 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while entries := registry.take_pending(BACKFILL_CHUNK):
        items = await read_backfill(
            reader,
            entries,
            tick,
            refresh_interval_s=config.refresh_interval_s,
            forecast_step_s=config.step_s,
        )
        for item in items:
            if item.history is not None and len(item.history):
                with_history += 1
                history_points = max(history_points, len(item.history))
        chunks += 1
        del items
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    await source.close()
    hwm_kb = _status_kb("VmHWM")
    return {
        "objects": objects,
        "distinct_selections": objects,
        "fit_window_s": config.fit_window_s,
        "ring_points": ring_points,
        "history_points_per_object": history_points,
        "objects_with_history": with_history,
        "backfill_chunk": BACKFILL_CHUNK,
        "backfill_batch": BACKFILL_BATCH,
        "chunks": chunks,
        "source_timeout_s": timeout_s,
        "prometheus_queries": source.queries_sent,
        "read_wall_s": round(wall, 1),
        "read_cpu_s": round(cpu, 1),
        "rss_after_registration_mb": round(rss_registered_kb / 1024, 1),
        "vmhwm_after_registration_mb": round(hwm_registered_kb / 1024, 1),
        "vmhwm_after_backfill_reads_mb": round(hwm_kb / 1024, 1),
        "backfill_reads_peak_above_registration_mb": round(
            (hwm_kb - max(rss_registered_kb, hwm_registered_kb)) / 1024, 1
        ),
    }


def _main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="role", required=True)
    fake = sub.add_parser("fake-prometheus")
    fake.add_argument("--port", type=int, required=True)
    fake.add_argument("--namespaces", type=int, required=True)
    run = sub.add_parser("backfill")
    run.add_argument("--address", required=True)
    run.add_argument("--objects", type=int, required=True)
    run.add_argument("--timeout-s", type=float, required=True)
    args = parser.parse_args(argv)
    if args.role == "fake-prometheus":
        _serve_fake_prometheus(args.port, args.namespaces)
    else:
        print(json.dumps(asyncio.run(_backfill(args.address, args.objects, args.timeout_s))))


# ------------------------------------------------------------ the test


@pytest.mark.bench
@pytest.mark.timeout(3600)
def test_restart_backfill_of_a_thousand_distinct_objects_stays_bounded() -> None:
    from tests.support.prometheus import free_port

    objects = int(os.environ.get("BENCH_BACKFILL_OBJECTS", "1000"))
    timeout_s = float(os.environ.get("BENCH_BACKFILL_TIMEOUT_S", "3.0"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    port = free_port()
    fake = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.scaler.test_backfill_memory_bench",
            "fake-prometheus",
            "--port",
            str(port),
            "--namespaces",
            str(objects),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert fake.stdout is not None
        assert fake.stdout.readline().strip() == "READY"
        load_before = os.getloadavg()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tests.scaler.test_backfill_memory_bench",
                "backfill",
                "--address",
                f"http://127.0.0.1:{port}",
                "--objects",
                str(objects),
                "--timeout-s",
                str(timeout_s),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=3000,
            check=False,
        )
        load_after = os.getloadavg()
    finally:
        fake.terminate()
        fake.wait(15)
        if fake.stdout is not None:
            fake.stdout.close()
    assert done.returncode == 0, done.stderr[-3000:]
    summary: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    summary["load_average_1_5_15_before"] = [round(x, 2) for x in load_before]
    summary["load_average_1_5_15_after"] = [round(x, 2) for x in load_after]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\nbackfill memory bench ({RESULTS})")
    for key, value in summary.items():
        print(f"  {key:<45}  {value}")
    # Every object read its whole ring: the backfill did not time out.
    assert summary["objects_with_history"] == objects
    # What a restart adds on top of the registered trackers is bounded by a
    # chunk, not by the fleet: well under the scaler's 2 GiB limit.
    assert summary["backfill_reads_peak_above_registration_mb"] < 512


if __name__ == "__main__":
    _main(sys.argv[1:])
