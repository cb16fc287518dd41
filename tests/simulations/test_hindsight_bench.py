"""Benchmark (``-m bench``): the hindsight schedule on a week at its real rate.

The shipped week of the Azure LLM inference trace 2024's coding service
(``simulations/data/azure_llm2024_coding_per_minute.csv``, requests per
minute) at its real rate, and at four times it (a fleet of about 300 at the
peak), with the shipped conversation trace's request shape on
``llama-3-8b@g5.xlarge``. Timed on one core, apart:

- the schedule: the demand to replicas' worth of load, one plan, and the
  planning side of a calibration (40 factors), against the 60 s target;
- the replay that calibrates it: one replay of a ten-minute slice at the
  real rate, given per simulated hour (a week's calibration replays the
  whole week a few dozen times: the simulator's cost, not the schedule's).

Writes ``bench-results/hindsight_speed.json``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from engine.profiles import get_profile
from simulations.hindsight import plan
from simulations.hindsight_run import timing
from simulations.policies import HINDSIGHT_STEP_S, PolicySpec, make_controller, step_load
from simulations.runner import attainment
from simulations.servable import workload_capacity
from simulations.simulation import SimConfig, Simulation
from simulations.traffic import DEFAULT_TOKENS_TRACE, TrafficOptions, load_workload

pytestmark = [pytest.mark.bench, pytest.mark.timeout(1800)]

RESULTS = Path(__file__).resolve().parents[2] / "bench-results"
WEEK = (
    Path(__file__).resolve().parents[2]
    / "simulations"
    / "data"
    / ("azure_llm2024_coding_per_minute.csv")
)
PROFILE = "llama-3-8b@g5.xlarge"
TARGET_S = 60.0
"""The schedule of a week, computed on one core, within this."""
FACTORS = 40
SLICE_START_S = 3 * 86_400.0 + 14 * 3600.0
"""Monday 14:00 UTC: a busy weekday afternoon."""
SLICE_S = 600.0


def _one_core() -> None:
    """Pin this process to one core where the platform allows it."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def test_a_weeks_schedule_within_a_minute_on_one_core() -> None:
    _one_core()
    profile = get_profile(PROFILE)
    rows: list[dict[str, float | int]] = []
    for rate_scale in (1.0, 4.0):
        t0 = time.perf_counter()
        counts = np.loadtxt(WEEK, delimiter=",", skiprows=1)
        per_replica = workload_capacity(load_workload(str(DEFAULT_TOKENS_TRACE)), profile)
        assert per_replica.requests_per_s is not None
        load = rate_scale * counts[:, 1] / 60.0 / per_replica.requests_per_s
        load_s = time.perf_counter() - t0
        t = timing(profile, SimConfig(), float(counts[-1, 0] + 60.0))
        t1 = time.perf_counter()
        one = plan(load, step_s=60.0, lead_s=t.lead_s, tail_s=t.tail_s, factor=1.0)
        plan_s = time.perf_counter() - t1
        t2 = time.perf_counter()
        for f in np.linspace(0.5, 1.5, FACTORS):
            plan(load, step_s=60.0, lead_s=t.lead_s, tail_s=t.tail_s, factor=float(f))
        sweep_s = time.perf_counter() - t2
        rows.append({
            "rate_scale": rate_scale, "steps": int(load.size), "step_s": 60.0,
            "peak_replicas": int(one.need.max()), "replica_hours": round(one.replica_hours, 1),
            "starts": one.starts, "load_s": round(load_s, 4), "plan_s": round(plan_s, 5),
            f"plans_{FACTORS}_s": round(sweep_s, 4),
            "schedule_s": round(load_s + plan_s + sweep_s, 4),
        })  # fmt: skip
    # the replay, apart: one schedule of a ten-minute slice at the real rate
    part = load_workload(str(WEEK), TrafficOptions(start_s=SLICE_START_S, duration_s=SLICE_S))
    t = timing(profile, SimConfig(), SLICE_S)
    sched = plan(step_load(part, profile, HINDSIGHT_STEP_S), step_s=HINDSIGHT_STEP_S,
                 lead_s=t.lead_s, tail_s=t.tail_s, factor=0.8)  # fmt: skip
    spec = PolicySpec("hindsight", "hindsight", schedule=tuple(int(x) for x in sched.orders))
    t3 = time.perf_counter()
    result = Simulation(part, profile, make_controller(spec, part, profile), SimConfig()).run()
    replay_s = time.perf_counter() - t3
    doc = {
        "trace": WEEK.name,
        "profile": PROFILE,
        "cores": 1,
        "target_s": TARGET_S,
        "schedule": rows,
        "replay": {
            "requests": len(part),
            "simulated_s": SLICE_S,
            "wall_s": round(replay_s, 3),
            "wall_s_per_simulated_hour": round(replay_s * 3600.0 / SLICE_S, 2),
            "slo_attainment": round(attainment(result), 4),
            "peak_replicas": int(sched.orders.max()),
        },
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "hindsight_speed.json").write_text(json.dumps(doc, indent=2) + "\n")
    for row in rows:
        assert row["steps"] == 10_080
        assert row["schedule_s"] <= TARGET_S
    assert rows[1]["peak_replicas"] >= 140
