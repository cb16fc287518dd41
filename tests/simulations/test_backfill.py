"""The history a simulated window starts with: what the live scaler backfills.

``prescaler serve`` reads the last hours of demand from Prometheus before it
answers an object's first poll (``scaler.state``'s backfill into
``decision.tracker.Tracker.load_history``); a window cut from inside a trace
gives the simulated tracker the same.
"""

from __future__ import annotations

import io
from dataclasses import replace

import numpy as np
import pytest

from engine.profiles import get_profile
from simulations.backfill import DemandHistory
from simulations.cli import SimulateOptions, simulate
from simulations.policies import predictive_spec
from simulations.runner import run_policy
from simulations.simulation import SimConfig, SimResult
from simulations.traffic import DEFAULT_TOKENS_TRACE
from tests.support.synthetic_traffic import synthetic_workload

PROFILE = get_profile("llama-3-8b@g5.xlarge")


def test_history_must_end_at_the_window_start() -> None:
    """Bin ends after 0 would be the window's own future: refused."""
    with pytest.raises(ValueError, match="end at or before 0"):
        DemandHistory(np.array([-15.0, 15.0]), np.ones(2), np.ones(2))


def test_a_backfilled_tracker_forecasts_from_the_first_refresh() -> None:
    """Without history the tracker needs eight bins (2 min) before its first fit;
    with two hours of it, the forecast band exists from the window's first
    minute, as it does live after the backfill."""
    w = synthetic_workload(duration_s=600.0, base_rps=2.0, seed=1)
    config = SimConfig()
    times = -15.0 * np.arange(479, -1, -1)
    history = DemandHistory(times, np.full(480, 2.0), np.full(480, 2.0 * 1280.0))
    spec = predictive_spec(PROFILE.name, max_replicas=6)
    cold = run_policy(spec, w, PROFILE, config)
    warm = run_policy(replace(spec, history=history), w, PROFILE, config)

    def first_forecast_s(r: SimResult) -> float:
        t = r.timeline["t"]
        ok = (t >= 0) & np.isfinite(r.timeline["forecast_upper_rps"])
        return float(t[ok][0])

    assert first_forecast_s(warm) < 60.0
    assert first_forecast_s(cold) > first_forecast_s(warm)


def test_simulate_backfills_only_windows_inside_the_trace() -> None:
    """``prescaler simulate --start`` gives predictive the trace before the window;
    ``--no-backfill`` (or a window at the start) does not; the run's requests are
    the window's either way."""
    trace = str(DEFAULT_TOKENS_TRACE)  # the shipped Azure 2023 conversation trace
    base = SimulateOptions(
        trace=trace, policies=("predictive",), start_s=1800.0, duration_s=900.0, quiet=True
    )
    warm = simulate(base, out=io.StringIO())
    cold = simulate(replace(base, backfill=False), out=io.StringIO())
    assert warm["requests"] == cold["requests"] > 0
    assert warm["policies"]["predictive"] != cold["policies"]["predictive"]
