"""Benchmarks (``-m bench``): what a wrong capacity belief and a longer cold start cost.

Both run ``prescaler simulate``'s own path (backfill and opening fleet from
the traffic before the window, the stated bound) on the shipped Azure 2023
conversation trace, the window from 1200 s to its end:

- capacity error: the untuned predictive policy with the scaler believing
  the profile's per-replica capacity x (1 + e) for e = -30 % .. +30 %, the
  tracker's learned capacity off, then once with it on (where e does not
  enter); SLO attainment and cost per e;
- lead time: static, reactive, predictive and oracle with a replica's cold
  start at 2.5, 5, 10 and 15 min (the presets of ``simulations.lead_time``);
  cost and attainment per policy and lead time.

Untuned: the tuned versions come when ``tune`` tunes every side. Writes
``bench-results/sim_inputs_capacity_error.json`` and
``bench-results/sim_inputs_lead_time.json``.
"""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from engine.profiles import get_profile
from simulations.cli import DEFAULT_PROFILE, SimulateOptions, simulate
from simulations.lead_time import LEAD_TIME_PRESETS
from simulations.runner import idle_attainment
from simulations.sim_inputs import SimInputs
from simulations.traffic import DEFAULT_TOKENS_TRACE, TrafficOptions, load_workload

OUT = Path(__file__).parents[2] / "bench-results"
START_S = 1200.0
CAPACITY_ERRORS = (-0.30, -0.15, 0.0, 0.15, 0.30)
LEAD_TIMES = ("8b-cached", "8b-cold-engine", "8b-uncached-image", "70b-uncached")
"""2.5, 5, 10 and 15 min in total."""


def _options(policies: tuple[str, ...], inputs: SimInputs) -> SimulateOptions:
    return SimulateOptions(
        trace=str(DEFAULT_TOKENS_TRACE), policies=policies, start_s=START_S, quiet=True,
        inputs=inputs,
    )  # fmt: skip


def _idle() -> float:
    """The attainment no fleet beats on the window (prefill alone on an idle replica)."""
    window = load_workload(DEFAULT_TOKENS_TRACE, TrafficOptions(start_s=START_S))
    return round(idle_attainment(window, get_profile(DEFAULT_PROFILE), 1.0), 4)


def _row(doc: dict[str, Any], policy: str) -> dict[str, Any]:
    p = doc["policies"][policy]
    return {
        "slo_attainment": p["slo_attainment"],
        "cost_usd": p["cost_usd"],
        "cost_per_month_usd": p["cost_per_month_usd"],
        "mean_replicas": p["mean_replicas"],
        "max_replicas": p["max_replicas"],
    }


@pytest.mark.bench
@pytest.mark.timeout(600)
def test_bench_capacity_error() -> None:
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for learned in (False, True):
        for e in CAPACITY_ERRORS if not learned else (0.0,):
            inputs = SimInputs(capacity_error=e, learned_capacity=learned)
            doc = simulate(_options(("predictive",), inputs), out=io.StringIO())
            rows.append({"capacity_error": e, "learned_capacity": learned,
                         **_row(doc, "predictive")})  # fmt: skip
    report = {
        "trace": DEFAULT_TOKENS_TRACE.name, "start_s": START_S, "idle_attainment": _idle(),
        "rows": rows,
        "wall_s": round(time.perf_counter() - t0, 1),
    }  # fmt: skip
    OUT.mkdir(exist_ok=True)
    (OUT / "sim_inputs_capacity_error.json").write_text(json.dumps(report, indent=2) + "\n")
    truth = next(r for r in rows if r["capacity_error"] == 0.0 and not r["learned_capacity"])
    bold = next(r for r in rows if r["capacity_error"] == 0.30)
    assert bold["cost_usd"] <= truth["cost_usd"]  # believing more capacity buys fewer replicas


@pytest.mark.bench
@pytest.mark.timeout(900)
def test_bench_lead_time() -> None:
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    policies = ("static", "reactive", "predictive", "oracle")
    for preset in LEAD_TIMES:
        doc = simulate(_options(policies, SimInputs(lead_time_preset=preset)), out=io.StringIO())
        lead = LEAD_TIME_PRESETS[preset].startup.total_s
        for policy in policies:
            rows.append({"preset": preset, "lead_time_s": lead, "policy": policy,
                         **_row(doc, policy)})  # fmt: skip
    report = {
        "trace": DEFAULT_TOKENS_TRACE.name, "start_s": START_S, "idle_attainment": _idle(),
        "rows": rows,
        "wall_s": round(time.perf_counter() - t0, 1),
    }  # fmt: skip
    OUT.mkdir(exist_ok=True)
    (OUT / "sim_inputs_lead_time.json").write_text(json.dumps(report, indent=2) + "\n")
    assert {r["lead_time_s"] for r in rows} == {150.0, 300.0, 600.0, 900.0}
