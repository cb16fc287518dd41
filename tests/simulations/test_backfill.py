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
from forecasting.series import DemandSeries
from simulations.backfill import DemandHistory, demand_before, window_history
from simulations.cli import SimulateOptions, simulate
from simulations.policies import predictive_spec
from simulations.runner import run_policy
from simulations.simulation import SimConfig, SimResult
from simulations.traffic import DEFAULT_TOKENS_TRACE, Workload
from tests.support.synthetic_traffic import synthetic_workload

PROFILE = get_profile("llama-3-8b@g5.xlarge")


def _series(values: list[float], step_s: float = 60.0) -> DemandSeries:
    return DemandSeries(0.0, step_s, np.asarray(values, dtype=float), "requests_per_s", "test")


def test_bins_take_the_rate_of_the_step_holding_their_midpoint() -> None:
    """A per-minute curve 1, 2, 3, 4 req/s; a window starting at 180 s with 30-s
    bins: six bins ending at -150..0 s cover trace seconds 0..180, so they read
    1, 1, 2, 2, 3, 3 (scaled by 2), and tokens are rate x tokens per request."""
    h = demand_before(
        _series([1, 2, 3, 4]), 180.0, bin_s=30.0, rate_scale=2.0, tokens_per_request=100.0
    )
    assert h is not None
    np.testing.assert_allclose(h.times_s, [-150, -120, -90, -60, -30, 0])
    np.testing.assert_allclose(h.requests_per_s, [2, 2, 4, 4, 6, 6])
    np.testing.assert_allclose(h.tokens_per_s, [200, 200, 400, 400, 600, 600])


def test_history_is_at_most_the_span_and_none_at_the_trace_start() -> None:
    """Only ``span_s`` before the window is offered; a window at 0 has none."""
    series = _series([5.0] * 100)
    h = demand_before(
        series, 3000.0, bin_s=15.0, rate_scale=1.0, tokens_per_request=1.0, span_s=600
    )
    assert h is not None and len(h) == 40 and h.times_s[0] == -585.0
    assert demand_before(series, 0.0, bin_s=15.0, rate_scale=1.0, tokens_per_request=1.0) is None


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"bin_s": 0.0}, "bin_s"),
        ({"rate_scale": float("nan")}, "rate_scale"),
        ({"tokens_per_request": -1.0}, "tokens_per_request"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict[str, float], match: str) -> None:
    args = {"bin_s": 15.0, "rate_scale": 1.0, "tokens_per_request": 1.0, **kwargs}
    with pytest.raises(ValueError, match=match):
        demand_before(_series([1.0]), 60.0, **args)


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


def test_a_windows_history_is_the_trace_before_it_at_its_own_token_mean() -> None:
    """One rule for every run that starts inside a trace (simulate's window,
    tune's trials and held-back part): the demand before the window, token
    rates at the window's mean tokens per request; none for an empty window."""
    series = _series([1, 2, 3, 4])
    n = 4
    window = Workload(np.linspace(0.0, 50.0, n), np.full(n, 300), np.full(n, 100), "w", 60.0)
    h = window_history(series, 120.0, window, bin_s=60.0, rate_scale=1.5)
    assert h is not None
    np.testing.assert_allclose(h.times_s, [-60, 0])
    np.testing.assert_allclose(h.requests_per_s, [1.5, 3.0])
    np.testing.assert_allclose(h.tokens_per_s, [600.0, 1200.0])
    empty = Workload(np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64), "e", 60.0)
    assert window_history(series, 120.0, empty, bin_s=60.0, rate_scale=1.0) is None
