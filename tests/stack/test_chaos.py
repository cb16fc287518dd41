"""Faults injected into a live stack run, one at a time, at separate trace times.

One run (200 s of trace at ``--speed 10``, two ``prescaler serve`` replicas
behind KEDA's round-robin channel) carries every fault; each test checks one.
The last fault's checks end at t=130 s: the 70 s after them (7 s of wall
time) are room for a slow Prometheus restart, since the faults' coroutine is
cancelled when the trace ends:

- Prometheus is killed during load at t=30 s and restarted on the same port
  and data at t=60 s: the scaler answers from memory (a failing source gives
  no reading and the last answer holds, docs/architecture.md "What happens
  when data goes missing"), its answer does not fall during the gap, and
  ``prescaler_source_up`` is back to 1 after the restart;
- one of the two scaler replicas is SIGKILLed at t=90 s while the controller
  round-robins: gRPC's round_robin policy (grpc/grpc doc/load-balancing.md)
  moves on to the live one, so no poll fails beyond one retry;
- an emulator replica is SIGKILLed at t=110 s with streams in flight: the
  load generator sees the streams cut and sends each again once, and every
  request still ends exactly once (completed, timed out or failed; stopped
  if still streaming when the run ends);
- all along, two extra targets in the vLLM scrape job, one slower than the
  scrape timeout and one answering garbage: Prometheus marks both down
  (``up == 0``), and the scaler neither fails nor counts them as replicas.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import io
import socketserver
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from simulations.simulation import COMPLETED, PENDING, REJECTED, TIMED_OUT
from stack.loadgen import STOPPED
from stack.processes import free_port
from stack.run import StackRun
from tests.stack.support import short_run

SPEED = 10.0
PROM_DOWN_S, PROM_UP_S = 30.0, 60.0
SCALER_KILL_S = 90.0
REPLICA_KILL_S = 110.0
RATE_WINDOW_S = 60.0
"""The scaler's rate() window: the warm-up waits one (120 s, the shipped one, is 6 s more
of wall time at x10; no fault here depends on its length)."""


class _Slow(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        time.sleep(5.0)  # longer than any scrape timeout of the run
        with contextlib.suppress(OSError):  # Prometheus gave up long ago
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"vllm:num_requests_waiting 99\n")

    def log_message(self, *args: Any) -> None:
        return None


class _Garbage(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        # (a leading NUL would read as an empty page: the text parser stops there)
        self.wfile.write(b"<html>not metrics</html>\nvllm:num_requests_waiting{ oops 1\n")

    def log_message(self, *args: Any) -> None:
        return None


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


@dataclass
class Observed:
    run: StackRun
    desired_before_gap: float = float("nan")
    desired_in_gap: list[float] = field(default_factory=list)
    polls_errors_at_scaler_kill: int = 0
    inflight_at_replica_kill: int = 0
    killed_replica: bool = False
    source_up_after: list[float] = field(default_factory=list)
    junk_up: dict[str, float] = field(default_factory=dict)
    scaler_ready: list[float] = field(default_factory=list)
    view: list[str] = field(default_factory=list)


async def _until(run: StackRun, trace_s: float) -> None:
    assert run.clock is not None
    delay = run.clock.wall_at(trace_s) - time.monotonic()
    if delay > 0:
        await asyncio.sleep(delay)


async def _chaos(obs: Observed, slow: str, garbage: str) -> None:
    run = obs.run
    prom, control = run.prometheus, run.control
    assert prom is not None and control is not None
    # Prometheus down during load, then back on the same port and data
    await _until(run, PROM_DOWN_S)
    obs.view = run.view_lines()
    obs.desired_before_gap = control.desired
    prom.kill()
    t_up = PROM_UP_S
    while run.clock is not None and run.clock.now() < t_up:
        obs.desired_in_gap.append(control.desired)
        await asyncio.sleep(0.2)
    await asyncio.to_thread(prom.start)
    # one of the two scalers dies
    await _until(run, SCALER_KILL_S)
    obs.polls_errors_at_scaler_kill = control.counters.poll_errors
    run.scalers[0].child.kill()
    # an emulator replica dies with streams in flight
    await _until(run, REPLICA_KILL_S)
    busiest = max(control.routable(), key=lambda r: r.outstanding, default=None)
    if busiest is not None:
        obs.inflight_at_replica_kill = busiest.outstanding
        busiest.process.child.kill()
        obs.killed_replica = True
    await _until(run, REPLICA_KILL_S + 20.0)
    for expr, sink in (
        ("prescaler_source_up", obs.source_up_after),
        ("prescaler_ready_replicas", obs.scaler_ready),
    ):
        result = await asyncio.to_thread(prom.query, expr)
        sink.extend(float(r["value"][1]) for r in result)
    for name, address in (("slow", slow), ("garbage", garbage)):
        result = await asyncio.to_thread(prom.query, f'up{{instance="{address}"}}')
        obs.junk_up[name] = float(result[0]["value"][1]) if result else float("nan")


@pytest.fixture(scope="module")
def chaos() -> Iterator[Observed]:
    from stack.processes import prometheus_binary
    from tests.support.ci import fail_in_ci_else_skip

    if prometheus_binary() is None:
        fail_in_ci_else_skip("the `prometheus` binary is not installed")
    servers = [_Server(("127.0.0.1", free_port()), h) for h in (_Slow, _Garbage)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for t in threads:
        t.start()
    slow, garbage = (f"127.0.0.1:{s.server_address[1]}" for s in servers)
    run = short_run(speed=SPEED, duration_s=200.0, scaler_replicas=2, rate_window_s=RATE_WINDOW_S)
    obs = Observed(run)
    original_start = run._start

    def start_with_junk() -> None:
        original_start()
        assert run.prometheus is not None
        run.prometheus.extra_targets = {slow: {"pod": "slow"}, garbage: {"pod": "garbage"}}
        run.prometheus.set_targets(run.prometheus._targets)

    run._start = start_with_junk  # type: ignore[method-assign]
    run.during.append(lambda r: _chaos(obs, slow, garbage))
    try:
        run.run()
        yield obs
    finally:
        run.cleanup()
        for s in servers:
            s.shutdown()
            s.server_close()


def test_prometheus_gap_holds_and_recovers(chaos: Observed) -> None:
    """With Prometheus gone the scaler holds its last answer (never lower) and reports
    its source up again once Prometheus is back."""
    before = chaos.desired_before_gap
    assert np.isfinite(before)
    assert chaos.desired_in_gap and min(chaos.desired_in_gap) >= before
    assert chaos.source_up_after and min(chaos.source_up_after) == 1.0
    tl = chaos.run.control.counters.timeline  # type: ignore[union-attr]
    t, spec = np.asarray(tl["t"]), np.asarray(tl["spec"])
    start = spec[t <= PROM_DOWN_S][-1]
    during = spec[(t > PROM_DOWN_S) & (t <= PROM_UP_S + 30.0)]
    assert during.size and during.min() >= start, "the gap caused a scale-down"


def test_scaler_replica_killed_costs_at_most_a_retry(chaos: Observed) -> None:
    """Killing one of two scaler replicas fails no KEDA poll and no HPA read."""
    control = chaos.run.control
    assert control is not None
    assert control.counters.poll_errors == chaos.polls_errors_at_scaler_kill == 0
    assert control.counters.hpa_metric_errors == 0


def test_killed_replica_requests_retried_and_each_ends_once(chaos: Observed) -> None:
    """Streams cut by a dead replica are sent again once; every request ended once."""
    assert chaos.killed_replica and chaos.inflight_at_replica_kill >= 1
    lg = chaos.run.loadgen
    assert lg is not None
    lg.check()  # raises if a request never ended or ended twice
    assert lg.retried >= 1
    status = lg.status
    assert not np.any(status == PENDING)
    ends = (COMPLETED, TIMED_OUT, REJECTED, STOPPED)
    assert sum(int(np.count_nonzero(status == s)) for s in ends) == lg.n
    assert chaos.run.control.counters.crashes == 1  # type: ignore[union-attr]


def test_slow_and_garbage_targets_are_down_and_ignored(chaos: Observed) -> None:
    """Prometheus marks a too-slow and a garbage target down; the scaler counts only
    the real replicas as Ready and never failed a poll over them."""
    assert chaos.junk_up == {"slow": 0.0, "garbage": 0.0}
    control = chaos.run.control
    assert control is not None
    assert chaos.scaler_ready and max(chaos.scaler_ready) <= control.cluster.ready_replicas
    assert control.counters.poll_errors == 0


def test_live_view_shows_the_loop(chaos: Observed) -> None:
    """The live view's lines carry demand, queue, replicas, the forecast band and TTFT p99."""
    text = "\n".join(chaos.view)
    for label in ("demand", "queue", "replicas", "forecast", "TTFT p99"):
        assert label in text, text


def test_addresses_are_printed_at_start(chaos: Observed) -> None:
    """Before the trace starts the run names where Prometheus, each scaler's gRPC
    port and metrics, and the work directory are, and says it is warming up."""
    run = chaos.run
    assert run.prometheus is not None
    assert isinstance(run.out, io.StringIO)
    text = run.out.getvalue()
    head = text.split("replaying")[0]
    assert f"Prometheus       {run.prometheus.url}" in head
    for scaler in run.scalers:
        assert f"scaler gRPC      {scaler.address}" in head
        assert f"http://{scaler.metrics_address}/metrics" in head
    assert "warming up:" in head and "work directory" in head
    assert "replaying 200 s of trace at x10" in text
