"""Does this machine itself run slower after it has been idle, with no vLLM?

Why: the pinned CPU vLLM took longer to a first token the longer it had been
idle (8 - 9 ms straight after a request, 45 - 52 ms after 3 s), and by
different amounts in different parts of one run. If a fixed piece of work
on the same pinned core slows after an idle pause by as much, the wake-up
is the machine's (the virtual CPU's idle states, caches emptied by other
tenants), not vLLM's, and no fit of one run can place the next run's.

Each workload (a pure-Python loop, a small matrix product, a pass over a
buffer larger than the caches) is run once after each idle pause, the
pauses shuffled, pinned to one CPU, nothing else running. Per run it keeps
the wall time, the thread's CPU time (a wall time that grows while the CPU
time does not is waiting to be scheduled; both growing is slower work) and
how far the sleep overshot.

Run: ``.venv/bin/python -m lab.cpu_idle_wake OUT.json [CPU]`` (CPU: the core
to pin to, the last one by default, as the profile-fit bench's server).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.percentile import percentile

PAUSES_S = (0.0, 0.02, 0.1, 0.3, 0.7, 1.5, 3.0)
"""The profile-fit bench's idle pauses."""
REPEATS = 12


def _python_loop() -> float:
    """Interpreter work: dict and list traffic, as a scheduler step does."""
    table: dict[int, int] = {}
    total = 0
    for i in range(20_000):
        table[i & 1023] = table.get(i & 1023, 0) + i
        total += len(str(i))
    return float(total + len(table))


def workloads() -> dict[str, Callable[[], float]]:
    """The three workloads; numpy is imported here so that ``main`` can hold
    its BLAS to one thread first (the pinned core is the only one)."""
    import numpy as np

    matrix = np.random.default_rng(0).standard_normal((192, 192))
    buffer = np.ones(8 * 1024 * 1024)  # 64 MB of float64, above the L3

    def matmul() -> float:
        """A small dense product, as a tiny model's layers are."""
        out = matrix
        for _ in range(10):
            out = np.tanh(out @ matrix * 0.01)
        return float(out[0, 0])

    def memory_pass() -> float:
        """One pass over a buffer larger than the last-level cache."""
        return float(buffer[::8].sum())

    return {"python_loop": _python_loop, "matmul": matmul, "memory_pass": memory_pass}


def measure(work: Callable[[], float], pauses: list[float]) -> list[dict[str, float]]:
    """Run ``work`` after each pause; wall, CPU time and oversleep per run."""
    rows = []
    for pause in pauses:
        asked = time.perf_counter()
        time.sleep(pause)
        woke = time.perf_counter()
        cpu0 = time.thread_time()
        work()
        cpu1 = time.thread_time()
        done = time.perf_counter()
        rows.append({
            "pause_s": pause, "wall_s": done - woke, "cpu_s": cpu1 - cpu0,
            "oversleep_s": woke - asked - pause,
        })  # fmt: skip
    return rows


def summary(rows: list[dict[str, float]]) -> list[dict[str, float]]:
    """Per pause: median and p90 wall, median CPU time and oversleep (ms)."""
    table = []
    for pause in PAUSES_S:
        mine = [r for r in rows if r["pause_s"] == pause]
        if not mine:
            continue
        walls = [r["wall_s"] for r in mine]
        table.append({
            "pause_s": pause, "runs": len(mine),
            "wall_p50_ms": round(1e3 * statistics.median(walls), 3),
            "wall_p90_ms": round(1e3 * percentile(walls, 90), 3),
            "cpu_p50_ms": round(1e3 * statistics.median(r["cpu_s"] for r in mine), 3),
            "oversleep_p50_ms": round(1e3 * statistics.median(r["oversleep_s"] for r in mine), 3),
        })  # fmt: skip
    return table


def run(rng: random.Random, repeats: int = REPEATS) -> dict[str, Any]:
    """Every workload after every pause, ``repeats`` times, shuffled."""
    out: dict[str, Any] = {}
    for name, work in workloads().items():
        for _ in range(5):  # warm-up, not kept
            work()
        order = [p for p in PAUSES_S for _ in range(repeats)]
        rng.shuffle(order)
        rows = measure(work, order)
        out[name] = {"summary": summary(rows), "runs": rows}
    return out


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        sys.stderr.write("usage: python -m lab.cpu_idle_wake OUT.json [CPU]\n")
        return 2
    cpu = int(argv[1]) if len(argv) == 2 else max(os.sched_getaffinity(0))
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")
    os.sched_setaffinity(0, {cpu})
    loadavg_before = os.getloadavg()[0]
    results = run(random.Random(0))
    for name, result in results.items():
        for line in result["summary"]:
            print(name, ", ".join(f"{k} {v:g}" for k, v in line.items()), flush=True)
    doc = {
        "cpu": cpu, "loadavg_1m_before": loadavg_before,
        "loadavg_1m_after": os.getloadavg()[0], "repeats": REPEATS, **results,
    }  # fmt: skip
    Path(argv[0]).parent.mkdir(parents=True, exist_ok=True)
    Path(argv[0]).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
