"""Benchmark (``-m bench``): scale to zero on the gateway's rate, prescaler against KEDA.

A fleet at zero replicas has no vLLM series, so a trigger on vLLM's metrics
cannot see the first request after idle. This replays the ``sparse-bursts``
regime (:mod:`lab.regime_generator`: four working sessions a day, idle hours
between them) over its focus hours of day 1 (07:00-13:00, two sessions),
with day 0 as the traffic before it (the tracker's backfill and the opening
fleet, as ``prescaler simulate`` reads them), and scores four ScaledObjects,
all at ``minReplicaCount`` 0:

- ``prescaler-vllm-only``: prescaler's shipped defaults at ``minReplicas`` 0;
- ``prescaler-gateway-forecast-off``: plus ``gatewayRateQuery`` on the
  simulator's gateway series, forecast off (waking on live demand only);
- ``prescaler-gateway``: the same with the forecast on (``auto``);
- ``keda-gateway``: KEDA's prometheus trigger on the same series (the
  ``keda-gateway`` tune side, 0.5 requests/s per replica).

Each row counts every request (served, timed out, rejected), the TTFT SLO
attainment (1 s) and the cost. Writes ``bench-results/gateway_wake.json``.
It runs under ``make lab`` when the lab config has a ``gateway_wake`` section.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from engine.profiles import get_profile
from lab.config import load_section
from lab.regime_generator import regime_counts
from simulations.autoscaling.scaledobject import (
    ScaledObjectSpec,
    parse_scaledobject,
    seeds_reactive,
)
from simulations.sim_inputs import SimInputs, window_start
from simulations.sim_types import COMPLETED, REJECTED, TIMED_OUT, SimConfig
from simulations.traffic import TrafficOptions, load_workload
from simulations.tune.manifest import manifest_of
from simulations.tune.search import default_bases, score
from simulations.tune.sides import gateway_manifest, prescaler_gateway_manifest

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]

RESULTS = Path(__file__).resolve().parents[2] / "bench-results"
PROFILE = "llama-3-8b@g5.xlarge"
REGIME = "sparse-bursts"
START_S = 86_400.0 + 7 * 3600.0
"""Day 1, 07:00: the regime's focus hours (two of its four sessions)."""
DURATION_S = 6 * 3600.0
MAX_REPLICAS = 16


def _parse(doc: dict[str, Any], name: str) -> ScaledObjectSpec:
    return parse_scaledobject(yaml.safe_dump(doc, sort_keys=False), name)


def _scaledobjects() -> dict[str, ScaledObjectSpec]:
    gateway = prescaler_gateway_manifest(manifest_of(default_bases(PROFILE, MAX_REPLICAS)[0]))
    plain = copy.deepcopy(gateway)
    off = copy.deepcopy(gateway)
    for doc, name in ((plain, "prescaler-vllm-only"), (off, "prescaler-gateway-forecast-off")):
        doc["metadata"]["name"] = name
    plain["spec"]["triggers"][0]["metadata"].pop("gatewayRateQuery")
    off["spec"]["triggers"][0]["metadata"]["forecast"] = "off"
    keda = gateway_manifest(seeds_reactive(max_replicas=MAX_REPLICAS))
    return {
        "prescaler-vllm-only": _parse(plain, "prescaler-vllm-only"),
        "prescaler-gateway-forecast-off": _parse(off, "prescaler-gateway-forecast-off"),
        "prescaler-gateway": _parse(gateway, "prescaler-gateway"),
        "keda-gateway": _parse(keda, "keda-gateway"),
    }


def test_gateway_wake(tmp_path: Path, lab_config_for: Callable[[str], Path]) -> None:
    config_path = lab_config_for("gateway_wake")
    load_section(config_path, "gateway_wake", ())  # no keys: any is an error
    counts = regime_counts(REGIME, 2, seed=0)
    trace = tmp_path / f"{REGIME}.csv"
    rows = "".join(f"{60 * i},{c:.3f}\n" for i, c in enumerate(counts))
    trace.write_text("minute_start_s,requests\n" + rows, encoding="utf-8")
    traffic = TrafficOptions(seed=0)
    workload = load_workload(trace, TrafficOptions(start_s=START_S, duration_s=DURATION_S, seed=0))
    profile = get_profile(PROFILE)
    before = window_start(trace, traffic, START_S, profile, SimConfig())
    config = SimInputs().apply(SimConfig(), profile, before.opening)
    rows_out: dict[str, dict[str, float]] = {}
    for name, so in _scaledobjects().items():
        began = time.perf_counter()
        scored = score(so, workload, PROFILE, config, history=before.history)
        assert scored.finished and scored.result is not None
        status = scored.result.status
        served = int(np.sum(status == COMPLETED))
        timed_out = int(np.sum(status == TIMED_OUT))
        rejected = int(np.sum(status == REJECTED))
        assert served + timed_out + rejected == len(workload)  # every request accounted for
        rows_out[name] = {
            "requests": len(workload),
            "served": served,
            "timed_out": timed_out,
            "rejected": rejected,
            "attainment": scored.attainment,
            "cost_usd": scored.cost_usd,
            "wall_s": time.perf_counter() - began,
        }
    doc = {
        "regime": REGIME,
        "start_s": START_S,
        "duration_s": DURATION_S,
        "profile": PROFILE,
        "slo_ttft_s": config.slo_ttft_s,
        "rows": rows_out,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "gateway_wake.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    for name, row in rows_out.items():
        print(
            f"{name:32s} served {row['served']}/{row['requests']} "
            f"attainment {row['attainment']:.3f} cost ${row['cost_usd']:.2f}"
        )
    gateway = rows_out["prescaler-gateway-forecast-off"]
    assert gateway["served"] > rows_out["prescaler-vllm-only"]["served"]
