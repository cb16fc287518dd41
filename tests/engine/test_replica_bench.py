"""Bench: how fast the replica model replays requests (events/s, steps/s, requests/s)."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

from engine.profiles import get_profile
from engine.requests import Request
from tests.support.replica_runs import run_requests

BENCH_DIR = Path(__file__).parents[2] / "bench-results"


def _poisson(n: int, rate: float, seed: int) -> list[Request]:
    rng = random.Random(seed)
    t = 0.0
    out = []
    for i in range(n):
        t += rng.expovariate(rate)
        prompt = min(4000, int(rng.lognormvariate(6.0, 1.0)) + 1)  # median ~400 tokens
        output = min(2000, int(rng.lognormvariate(5.0, 0.8)) + 1)  # median ~150 tokens
        out.append(Request(f"r{i}", t, prompt, output))
    return out


@pytest.mark.bench
def test_bench_replica_replay_speed() -> None:
    """Replay Poisson traffic near each profile's capacity; report throughput of the model."""
    cases = [
        ("llama-3-8b@p5.48xlarge", 20.0, 100_000, True),
        ("llama-3-8b@g5.xlarge", 2.5, 30_000, True),
        ("llama-3-8b@g5.xlarge", 2.5, 3_000, False),
    ]
    rows = []
    for name, rate, n, jump in cases:
        reqs = _poisson(n, rate, seed=7)
        t0 = time.perf_counter()
        rep, records = run_requests(get_profile(name), reqs, jump=jump)
        wall = time.perf_counter() - t0
        assert len(records) == n
        ttfts = sorted(r.ttft_s or 0.0 for r in records)
        rows.append(
            {
                "profile": name,
                "jump": jump,
                "requests": n,
                "arrival_rate_per_s": rate,
                "simulated_s": rep.now,
                "wall_s": wall,
                "requests_per_s": n / wall,
                "steps_per_s": rep.steps_run / wall,
                "events_per_s": rep.events_run / wall,
                "steps_per_event": rep.steps_run / rep.events_run,
                "preemptions": rep.preemptions_total,
                "ttft_p50_s": ttfts[n // 2],
                "ttft_p99_s": ttfts[int(n * 0.99)],
            }
        )
    BENCH_DIR.mkdir(exist_ok=True)
    (BENCH_DIR / "replica.json").write_text(json.dumps(rows, indent=2) + "\n")
    print()
    print(f"{'profile':26s} {'jump':>5s} {'req':>7s} {'wall s':>7s} {'req/s':>8s} "
          f"{'steps/s':>9s} {'events/s':>9s} {'steps/ev':>8s} {'ttft p50':>8s}")  # fmt: skip
    for r in rows:
        print(f"{r['profile']:26s} {r['jump']!s:>5s} {r['requests']:>7d} {r['wall_s']:>7.2f} "
              f"{r['requests_per_s']:>8.0f} {r['steps_per_s']:>9.0f} {r['events_per_s']:>9.0f} "
              f"{r['steps_per_event']:>8.1f} {r['ttft_p50_s']:>8.3f}")  # fmt: skip
    assert rows[0]["requests_per_s"] > 2_000
