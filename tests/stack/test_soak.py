"""Soak (opt-in, ``-m soak``): ten minutes of wall time, memory flat in every process.

The whole shipped trace (58 min) at ``--speed 5.8``: the stack process (load
generator, controller), Prometheus, ``prescaler serve`` with its decider
process and every emulator replica that lives through the run are sampled
every 10 s (``VmRSS`` of ``/proc/PID/status``). A leak
grows without bound; a cache or a TSDB head block levels off. So each
process's mean over the last two minutes may exceed its mean over minutes
two to four (after start-up) by at most 25 % + 20 MiB. The samples go to
``bench-results/stack_soak.json``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from stack.run import StackRun
from tests.stack.support import short_run

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_WALL_S = 10.0


def _rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _processes(run: StackRun) -> dict[str, int]:
    out = {"stack": os.getpid()}
    if run.prometheus is not None and run.prometheus.child.pid:
        out["prometheus"] = run.prometheus.child.pid
    for scaler in run.scalers:
        if scaler.child.pid:
            out[scaler.name] = scaler.child.pid
            for k, child in enumerate(_children(scaler.child.pid)):
                out[f"{scaler.name}.child{k}"] = child
    if run.control is not None:
        for replica in run.control.replicas():
            if replica.process.child.pid:
                out[f"replica-pid{replica.process.child.pid}"] = replica.process.child.pid
    return out


@pytest.mark.soak
@pytest.mark.timeout(1200)
@pytest.mark.usefixtures("prometheus")
def test_soak_memory_flat() -> None:
    """No process's resident memory keeps growing over ten minutes of load."""
    run = short_run(speed=5.8, duration_s=3480.0, rate_scale=0.5)
    samples: dict[str, list[tuple[float, int]]] = {}

    async def sample(r: StackRun) -> None:
        t0 = time.monotonic()
        while True:
            for name, pid in _processes(r).items():
                rss = _rss_kib(pid)
                if rss is not None:
                    samples.setdefault(name, []).append((time.monotonic() - t0, rss))
            await asyncio.sleep(SAMPLE_WALL_S)

    run.during.append(sample)
    try:
        run.run()
    finally:
        run.cleanup()
    out = ROOT / "bench-results" / "stack_soak.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(samples, indent=1) + "\n")
    end = max(t for series in samples.values() for t, _ in series)
    grown: dict[str, tuple[float, float]] = {}
    for name, series in samples.items():
        early = [v for t, v in series if 120.0 <= t <= 240.0]
        late = [v for t, v in series if t >= end - 120.0]
        if len(early) < 3 or len(late) < 3:
            continue  # a replica that did not live through the run
        a, b = sum(early) / len(early), sum(late) / len(late)
        if b > 1.25 * a + 20 * 1024:
            grown[name] = (a / 1024, b / 1024)
    assert not grown, f"resident memory grew (MiB, early -> late): {grown}"
