"""Benchmark of one ``prescaler tune`` trial of the prescaler side (``-m bench``).

Writes ``bench-results/tune_trial_cost.json``: the wall time of one trial of
the prescaler side's base setting (``simulations.tune.search.default_bases``,
the trial a study starts from) over ``PRESCALER_TUNE_TRIAL_HOURS`` (24) hours
of ``$PRESCALER_TUNE_DAY_TRACE`` from ``PRESCALER_TUNE_TRIAL_START`` (3 days)
at ``PRESCALER_TUNE_RATE_SCALE`` (0.1), the tracker backfilled as tune
backfills it (:mod:`simulations.tune.inputs`: 3 days and an hour before the
part), and where the time went: the forecaster's fits, its predictions (the
horizons fitted lazily included) and everything else (the simulation and the
decision code). The split comes from timing wrappers around
``PrescalerForecaster.fit`` and ``predict``, installed for this run only. Run
it with ``OPENBLAS_NUM_THREADS=1``, as the ``prescaler`` command sets it (the
JSON records the setting); the load average before and after is recorded:
the machine may be shared.

Why a bench of its own: the day-study bench (``test_tune_bench.py``) times 40
trials whose settings and early stops vary from run to run; one fixed trial
run to the end is the unit a change to the forecaster's cost moves.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.profiles import get_profile
from forecasting.prescaler.model import PrescalerForecaster
from simulations.sim_inputs import SimInputs
from simulations.sim_types import SimConfig
from simulations.traffic import TrafficOptions, load_workload
from simulations.tune.inputs import part_starts, requests_before
from simulations.tune.search import default_bases, score

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]

RESULTS = Path(__file__).resolve().parents[3] / "bench-results"
PROFILE = "llama-3-8b@g5.xlarge"
TRACE_ENV = "PRESCALER_TUNE_DAY_TRACE"


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


@pytest.mark.skipif(not os.environ.get(TRACE_ENV), reason=f"{TRACE_ENV} is not set")
def test_prescaler_trial_cost() -> None:
    """One base trial of the prescaler side, run to the end, timed and split."""
    hours = float(os.environ.get("PRESCALER_TUNE_TRIAL_HOURS", "24"))
    start = float(os.environ.get("PRESCALER_TUNE_TRIAL_START", str(3 * 86400)))
    scale = float(os.environ.get("PRESCALER_TUNE_RATE_SCALE", "0.1"))
    trace = os.environ[TRACE_ENV]
    profile = get_profile(PROFILE)
    traffic = TrafficOptions(rate_scale=scale, start_s=start, duration_s=hours * 3600.0, seed=0)
    workload = load_workload(trace, traffic)
    inputs = SimInputs()
    config = inputs.apply(SimConfig(), profile, None)
    starts = part_starts(requests_before(trace, traffic), workload, None, profile, config, inputs)
    history = starts.tuning.history
    base, _ = default_bases(PROFILE, inputs.max_replicas)
    spent: dict[str, float] = {}
    load_before = os.getloadavg()
    with _timed(PrescalerForecaster, ("fit", "predict"), spent):
        t0 = time.perf_counter()
        scored = score(base, workload, PROFILE, starts.tuning_config, history=history)
        wall = time.perf_counter() - t0
    doc = {
        "trace": Path(trace).name,
        "start_s": start,
        "hours": hours,
        "rate_scale": scale,
        "profile": PROFILE,
        "requests": len(workload),
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
        "history_bins": 0 if history is None else int(np.size(history.requests_per_s)),
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
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tune_trial_cost.json").write_text(json.dumps(doc, indent=2) + "\n")
    assert scored.finished
    assert spent["fit_calls"] > 0, "the prescaler trigger never refitted its forecaster"
