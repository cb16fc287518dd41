"""Benchmark of one ``prescaler tune`` trial of the prescaler side (``-m bench``).

Writes ``bench-results/tune_trial_cost.json``: one base trial over
``--tune-trial-hours`` of ``--tune-trace`` (from 3 days in, at ``--tune-rate-scale``),
run to the end, its wall time split into the forecaster's fits, predictions
and the rest; ``--tune-profile`` runs it under cProfile instead. One fixed
trial is the unit a change to the forecaster's cost moves, where a study's
trials vary from run to run.
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from engine.profiles import get_profile
from forecasting.prescaler.model import PrescalerForecaster
from simulations.autoscaling.scaledobject import ScaledObjectSpec, parse_scaledobject
from simulations.backfill import DemandHistory
from simulations.forecast_memo import PROCESS_MEMO
from simulations.sim_inputs import SimInputs
from simulations.sim_types import SimConfig
from simulations.traffic import TrafficOptions, Workload, load_workload
from simulations.tune.inputs import part_starts, requests_before
from simulations.tune.manifest import manifest_of
from simulations.tune.search import default_bases, score
from simulations.tune.sides import prescaler_gateway_manifest
from tests.simulations.tune.conftest import TuneKnobs
from tests.support.tuned_metadata import apply_metadata

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]

RESULTS = Path(__file__).resolve().parents[3] / "bench-results"
PROFILE = "llama-3-8b@g5.xlarge"
TRIAL_START_S = 3 * 86400.0
"""Where the bench's window starts in the trace unless ``--tune-trial-start`` says."""


PROFILED = (
    ("forecasting/prescaler/model.py", "fit"),
    ("forecasting/prescaler/model.py", "predict"),
    ("forecasting/prescaler/model.py", "_fit_h"),
    ("forecasting/prescaler/model.py", "_holdout_weights"),
    ("forecasting/prescaler/model.py", "_solve"),
    ("forecasting/prescaler/holdout.py", "rolling_forecasts"),
    ("forecasting/prescaler/band.py", "median_and_quantile"),
    ("forecasting/prescaler/members.py", "member_weights"),
    ("forecasting/prescaler/features.py", "features"),
    ("forecasting/prescaler/features.py", "build"),
    ("forecasting/combination.py", "select"),
    ("forecasting/combination.py", "last_values"),
    ("decision/tracker.py", "step"),
    ("decision/prediction.py", "run_prediction"),
    ("decision/policy.py", "decide"),
)
"""(file, function) pairs whose cumulative time the profiled run records
(both ``features`` functions of features.py are summed)."""


def _profile_summary(stats: Any) -> dict[str, Any]:
    """Cumulative seconds of :data:`PROFILED` and the top own-time functions."""
    cumulative: dict[str, float] = {}
    own: list[tuple[float, str]] = []
    for (path, line, name), (_, _, tottime, cumtime, _) in stats.stats.items():
        where = f"{'/'.join(Path(path).parts[-3:])}:{line}({name})"
        own.append((tottime, where))
        for file, func in PROFILED:
            if name == func and path.endswith(file):
                key = f"{file}:{func}"
                cumulative[key] = round(cumulative.get(key, 0.0) + cumtime, 2)
    top = sorted(own, reverse=True)[:20]
    return {"cumulative_s": cumulative, "own_s": {w: round(t, 2) for t, w in top}}


@contextmanager
def _timed(owner: type, names: tuple[str, ...], spent: dict[str, float]) -> Iterator[None]:
    """Methods ``names`` of ``owner`` add their wall time to ``spent[name]``
    (and count calls in ``spent[name + '_calls']``) while inside."""
    saved = {n: owner.__dict__[n] for n in names}

    def wrap(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - t0
                spent[f"{name}_calls"] += 1

        return timed

    for n, m in saved.items():
        spent[n] = spent[f"{n}_calls"] = 0.0
        setattr(owner, n, wrap(n, m))
    try:
        yield
    finally:
        for n, m in saved.items():
            setattr(owner, n, m)


@dataclass(frozen=True)
class TrialInputs:
    """What a tune trial over the bench's window starts from."""

    workload: Workload
    config: SimConfig
    history: DemandHistory | None
    doc: dict[str, Any]
    """The window's description for the JSON."""


def _inputs(knobs: TuneKnobs) -> TrialInputs:
    """The bench's window of ``--tune-trace`` and what tune gives a trial
    there (opening fleet, the tracker's backfill)."""
    if not knobs.trace:
        pytest.skip("--tune-trace is not given")
    hours, scale, trace = knobs.trial_hours, knobs.rate_scale, knobs.trace
    start = TRIAL_START_S if knobs.trial_start_s is None else knobs.trial_start_s
    profile = get_profile(PROFILE)
    traffic = TrafficOptions(rate_scale=scale, start_s=start, duration_s=hours * 3600.0, seed=0)
    workload = load_workload(trace, traffic)
    inputs = SimInputs()
    config = inputs.apply(SimConfig(), profile, None)
    starts = part_starts(requests_before(trace, traffic), workload, None, profile, config, inputs)
    history = starts.tuning.history
    doc = {
        "trace": Path(trace).name,
        "start_s": start,
        "hours": hours,
        "rate_scale": scale,
        "profile": PROFILE,
        "requests": len(workload),
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
        "history_bins": 0 if history is None else int(np.size(history.requests_per_s)),
    }
    return TrialInputs(workload, starts.tuning_config, history, doc)


def _trial(so: ScaledObjectSpec, got: TrialInputs, profiler: Any = None) -> dict[str, Any]:
    """One trial of ``so`` run to the end: its wall time split into the
    forecaster's fits, its predictions and the rest, and its outcome."""
    spent: dict[str, float] = {}
    load_before = os.getloadavg()
    with _timed(PrescalerForecaster, ("fit", "predict"), spent):
        t0 = time.perf_counter()
        if profiler is not None:
            profiler.enable()
        scored = score(so, got.workload, PROFILE, got.config, history=got.history)
        if profiler is not None:
            profiler.disable()
        wall = time.perf_counter() - t0
    assert scored.finished
    return {
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(wall, 2),
        "fit_s": round(spent["fit"], 2),
        "fits": int(spent["fit_calls"]),
        "predict_s": round(spent["predict"], 2),
        "predicts": int(spent["predict_calls"]),
        "other_s": round(wall - spent["fit"] - spent["predict"], 2),
        "attainment": round(scored.attainment, 6),
        "cost_usd": round(scored.cost_usd, 4),
    }


def test_prescaler_trial_cost(tune_knobs: TuneKnobs) -> None:
    """One base trial of the prescaler side, run to the end, timed and split."""
    got = _inputs(tune_knobs)
    base, _ = default_bases(PROFILE, SimInputs().max_replicas)
    profiler = cProfile.Profile() if tune_knobs.profile else None
    doc = {**got.doc, **_trial(base, got, profiler), "profiled": profiler is not None}
    if profiler is not None:
        doc["profile"] = _profile_summary(pstats.Stats(profiler))
    RESULTS.mkdir(exist_ok=True)
    name = "tune_trial_cost_profile.json" if profiler is not None else "tune_trial_cost.json"
    (RESULTS / name).write_text(json.dumps(doc, indent=2) + "\n")
    assert doc["fits"] > 0, "the prescaler trigger never refitted its forecaster"


def test_gateway_fed_trial_on_a_warm_memo(tune_knobs: TuneKnobs) -> None:
    """The ``prescaler-gateway`` side's base trial on an empty forecast memo,
    then a trial with another ``forecastQuantile`` (another setting, as the
    study's next trial) on the memo the first left: a gateway-fed tracker's
    history does not depend on the setting, so the second restores every
    fit (``simulations.forecast_memo``) and computes its forecasts on them.
    Writes ``bench-results/tune_trial_cost_gateway.json``."""
    got = _inputs(tune_knobs)
    base, _ = default_bases(PROFILE, SimInputs().max_replicas)
    doc = prescaler_gateway_manifest(manifest_of(base))
    gateway = parse_scaledobject(yaml.safe_dump(doc, sort_keys=False), "prescaler-gateway")
    PROCESS_MEMO.clear()
    before = PROCESS_MEMO.stats
    cold = _trial(gateway, got)
    between = PROCESS_MEMO.stats
    warm = _trial(apply_metadata(gateway, {"forecastQuantile": "0.8"}), got)
    out = {
        **got.doc,
        "cold": {**cold, "memo": between.minus(before).as_dict()},
        "warm": {**warm, "memo": PROCESS_MEMO.stats.minus(between).as_dict()},
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tune_trial_cost_gateway.json").write_text(json.dumps(out, indent=2) + "\n")
    assert warm["fits"] < cold["fits"], "the warm trial refitted as often as the cold one"
