"""Digest of every record a fixed battery of runs produces.

Usage: ``python -m tests.support.native_digest``.

Run once with the compiled engine (``make native``) and once with
``PRESCALER_PURE_PYTHON=1``: equal digests mean the compiled modules give
bit-identical records, latencies, metrics and simulation outcomes. Prints
one JSON object: ``{"native": bool, "digests": {case: sha256}, "covers":
{path: count}}``, the counts showing the battery reaches preemption, aborts
and spot interruptions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable

import numpy as np

import engine.replica
import engine.replica_loop
import simulations.router
from engine.profile_types import EngineStalls
from engine.profiles import get_profile
from engine.replica import Replica
from engine.requests import Request
from forecasting import filters
from forecasting.combination import holt_state, lfilter, trend_state
from forecasting.prescaler.model import PrescalerForecaster
from prescaler_native.loader import is_native
from simulations.policies import PolicySpec, predictive_spec, reactive_spec
from simulations.runner import run_policy
from simulations.simulation import TIMED_OUT, SimConfig, SimResult
from tests.support.replica_runs import run_requests
from tests.support.synthetic_traffic import synthetic_workload

PROFILES = ("llama-3-8b@g5.xlarge", "llama-3-8b@inf2.xlarge", "llama-3-70b-awq@g5.12xlarge")
SIM_PROFILE = "llama-3-8b@g5.xlarge"


def _requests(seed: int, n: int) -> list[Request]:
    """Bursty arrivals with long and short prompts: prefill chunks, jumps, preemption."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(0.05, n))
    prompts = rng.choice([8, 200, 1500, 3000], n, p=[0.3, 0.4, 0.2, 0.1])
    outputs = rng.choice([1, 2, 40, 600], n, p=[0.1, 0.2, 0.5, 0.2])
    return [
        Request(f"r{i}", float(arrivals[i]), int(prompts[i]), int(outputs[i])) for i in range(n)
    ]


def _hash(parts: Iterable[object]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else repr(part).encode())
    return h.hexdigest()


def _engine_case(profile_name: str, seed: int, jump: bool, covers: dict[str, int]) -> str:
    replica, records = run_requests(get_profile(profile_name), _requests(seed, 300), jump=jump)
    records.sort(key=lambda r: r.request_id)
    covers["preemptions"] += replica.preemptions_total
    return _hash([*records, replica.metrics_snapshot(), replica.steps_run])


def _stalls_case() -> str:
    """Stalls of both kinds and the idle wake-up, on arrivals sparse enough that the
    replica often idles between them (a deterministic wait and seeded draws)."""
    stalls = EngineStalls(
        share=0.1,
        mean_s=0.02,
        admit_chance=0.2,
        admit_mean_s=0.03,
        wake_s=0.01,
        wake_tau_s=0.1,
        wake_max_idle_s=0.5,
    )
    profile = dataclasses.replace(get_profile(SIM_PROFILE), stalls=stalls)
    sparse = [dataclasses.replace(r, arrival_s=20.0 * r.arrival_s) for r in _requests(3, 200)]
    replica, records = run_requests(profile, sparse)
    records.sort(key=lambda r: r.request_id)
    return _hash([*records, replica.metrics_snapshot(), replica.steps_run])


def _aborts_case(covers: dict[str, int]) -> str:
    """Aborts mid-jump and interleaved lookups (the lazily applied steps)."""
    replica = Replica(get_profile(SIM_PROFILE), latency_histograms=False)
    out: list[object] = []
    for i, req in enumerate(_requests(7, 200)):
        out.extend(replica.advance_to(req.arrival_s))
        replica.submit(req)
        if i % 7 == 3:
            rec = replica.abort(f"r{i - 2}")
            covers["aborts"] += rec is not None
            out.append(rec)
        if i % 5 == 0:
            out.append((replica.kv_blocks_used, replica.generation_tokens_total))
    while (t := replica.next_event_time()) is not None:
        out.extend(replica.advance_to(t))
    return _hash([*out, replica.metrics_snapshot()])


def _series(seed: int, n: int, step_s: float) -> np.ndarray:
    """A daily cycle with noise, bursts and idle stretches (cold starts)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) * step_s
    y = 20.0 * (1.0 + 0.8 * np.sin(2 * np.pi * t / 86_400.0)) + rng.normal(0.0, 3.0, n)
    y[rng.random(n) < 0.02] *= 4.0
    y[n // 3 : n // 3 + n // 20] = 0.0
    return np.maximum(y, 0.0)


def _forecast_cases() -> dict[str, str]:
    """The forecaster at several cuts, and the smoothers' filters on their own."""
    out: dict[str, str] = {}
    for seed, step_s in ((0, 60.0), (1, 15.0)):
        y = _series(seed, 4000, step_s)
        parts: list[object] = []
        model = PrescalerForecaster()
        model.fit(y[:1500], step_s)
        for cut in (1500, 2200, 3100, 4000):
            if cut > 1500:
                model.update(y[:cut])
            parts.append(model.predict(20).values.tobytes())
        model.fit(y[: len(y) // 2], step_s)
        parts.append(model.predict(40).values.tobytes())
        out[f"forecast-{seed}"] = _hash(parts)
    x = _series(2, 3000, 60.0) - 20.0
    level, trend = holt_state(x, 0.3, 0.1, 0.9)
    a, b = trend_state(x, 0.95)
    filtered = lfilter([0.2, 0.1, 0.05], [1.0, -0.5, 0.06], x)
    out["filters"] = _hash([v.tobytes() for v in (level, trend, a, b, filtered)])
    out["filter-loops"] = _filter_loops()
    return out


def _filter_loops() -> str:
    """Every loop of forecasting.filters called directly, on inputs with NaN,
    infinities and signed zeros (where ``x * 0.0`` is not ``0.0``)."""
    rng = np.random.default_rng(5)
    plain = rng.normal(0.0, 10.0, 500).tolist()
    special = [*plain[:50], float("nan"), 3.0, float("inf"), -0.0, float("-inf"), 0.0, *plain[:20]]
    parts: list[object] = []
    for xs in (plain, special, [], [-0.0]):
        parts.append(filters.first_order(0.3, 0.0, -0.7, xs))
        parts.append(filters.second_order(0.2, 0.1, 0.05, -0.5, 0.06, xs))
        parts.append(filters.first_order_last(0.3, -0.7, xs))
        parts.append(filters.two_tap_pair(0.4, -0.1, 0.2, 0.05, -1.3, 0.42, xs))
        parts.append(filters.two_tap_pair_last(0.4, -0.1, 0.2, 0.05, -1.3, 0.42, xs))
        parts.append(filters.trend_sums(0.95, xs))
    # repr keeps NaN, the infinities and the sign of zero apart
    return _hash(parts)


def _sim_digest(result: SimResult) -> str:
    parts: list[object] = [
        result.status.tobytes(),
        result.ttft_s.tobytes(),
        result.tpot_s.tobytes(),
        result.e2e_s.tobytes(),
        sorted(result.rejected_reasons.items()),
        (result.retried, result.gpu_hours, result.cost_usd, result.mean_replicas),
        (result.max_replicas, result.busy_replica_s, result.served_tokens),
        (result.scale_ups, result.spot_interruptions),
    ]
    for key in sorted(result.timeline):
        parts.append((key, np.asarray(result.timeline[key]).tobytes()))
    return _hash(parts)


def _sim_cases(covers: dict[str, int]) -> dict[str, str]:
    profile = get_profile(SIM_PROFILE)
    workload = synthetic_workload(
        duration_s=1800.0,
        base_rps=4.0,
        seed=3,
        bursts=((600.0, 300.0, 3.0),),
        prompt_tokens=(1024.0, 1.0),
        output_tokens=(256.0, 1.0),
    )
    # frequent interruptions with a 2 s notice: pods die serving, requests retry
    spot = SimConfig(
        spot=True,
        seed=1,
        cluster_overrides=(("spot_interruptions_per_hour", 6.0), ("spot_notice_s", 2.0)),
    )
    specs = {
        "static": PolicySpec("static", "static", replicas=6),
        "reactive": reactive_spec(12),
        "predictive": predictive_spec(SIM_PROFILE, max_replicas=12),
        "oracle": PolicySpec("oracle", "oracle"),
    }
    out = {
        f"sim-{k}": _sim_digest(run_policy(s, workload, profile, SimConfig()))
        for k, s in specs.items()
    }
    # a small fleet, long and over-long prompts, a short client timeout:
    # rejections, time-outs and the gateway queue
    stress = synthetic_workload(
        duration_s=900.0,
        base_rps=3.0,
        seed=4,
        prompt_tokens=(2500.0, 1.2),
        output_tokens=(300.0, 1.0),
    )
    stressed = run_policy(
        PolicySpec("static", "static", replicas=2), stress, profile, SimConfig(timeout_s=8.0)
    )
    covers["rejected"] += sum(stressed.rejected_reasons.values())
    covers["timed_out"] += int((stressed.status == TIMED_OUT).sum())
    out["sim-static-stressed"] = _sim_digest(stressed)
    spotted = run_policy(specs["reactive"], workload, profile, spot)
    covers["spot_interruptions"] += spotted.spot_interruptions
    covers["retried"] += spotted.retried
    out["sim-reactive-spot"] = _sim_digest(spotted)
    return out


def digests(covers: dict[str, int]) -> dict[str, str]:
    """Every case's digest, keyed by case name; `covers` counts the paths reached."""
    out: dict[str, str] = {}
    for name in PROFILES:
        for seed in (0, 1):
            for jump in (True, False):
                key = f"{name}-{seed}-{'jump' if jump else 'step'}"
                out[key] = _engine_case(name, seed, jump, covers)
    out["aborts"] = _aborts_case(covers)
    out["stalls-wake"] = _stalls_case()
    out.update(_forecast_cases())
    out.update(_sim_cases(covers))
    return out


def main() -> None:
    covers = dict.fromkeys(
        ("preemptions", "aborts", "spot_interruptions", "retried", "rejected", "timed_out"), 0
    )
    found = digests(covers)
    compiled = (engine.replica, engine.replica_loop, simulations.router, filters)
    native = all(is_native(m) for m in compiled)
    print(json.dumps({"native": native, "digests": found, "covers": covers}))


if __name__ == "__main__":
    main()
