"""What a simulation is told, not shown: no policy learns the window's future
from the harness; capacity error and lead time are stated inputs."""

from __future__ import annotations

import argparse
import io
import math
from contextlib import redirect_stderr
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decision.reading import Reading
from decision.tracker import Tracker
from decision.tracker_data import TrackerConfig
from engine.profiles import get_profile
from simulations.backfill import scraped_history
from simulations.capacity_belief import BelievingTracker
from simulations.cli import SimulateOptions, simulate
from simulations.lead_time import LEAD_TIME_PRESETS, resolve_startup, with_startup
from simulations.policies import (
    DEFAULT_MAX_REPLICAS,
    PolicySpec,
    ScaledObjectController,
    make_controller,
    opening_fleet,
    predictive_spec,
    reactive_spec,
)
from simulations.runner import run_policy
from simulations.sim_inputs import (
    SimInputs,
    add_sim_input_flags,
    sim_inputs_from_args,
    window_start,
)
from simulations.simulation import SimConfig, Simulation
from simulations.traffic import DEFAULT_TOKENS_TRACE, TrafficOptions, Workload
from tests.support.synthetic_traffic import synthetic_workload

PROFILE = get_profile("llama-3-8b@g5.xlarge")


def _rate_trace(path: Path, rates: list[float], step_s: float = 60.0) -> Path:
    """A plain rate CSV: one rate per ``step_s``."""
    rows = [f"{i * step_s:g},{r:g}" for i, r in enumerate(rates)]
    path.write_text("timestamp_s,requests_per_s\n" + "\n".join(rows) + "\n")
    return path


# -- no foreknowledge -------------------------------------------------------------
def test_what_a_run_starts_with_does_not_see_the_windows_future(tmp_path: Path) -> None:
    """Two traces, equal up to the middle of the window, then one has a peak 20x
    the rest: the backfill, the opening fleet and the bound are the same."""
    calm = [2.0] * 120
    peaked = calm[:90] + [40.0] * 30
    a = _rate_trace(tmp_path / "calm.csv", calm)
    b = _rate_trace(tmp_path / "peaked.csv", peaked)
    traffic = TrafficOptions(start_s=3600.0, duration_s=3600.0, seed=3)
    config = SimConfig()
    start_a = window_start(a, traffic, 3600.0, PROFILE, config)
    start_b = window_start(b, traffic, 3600.0, PROFILE, config)
    assert start_a.history is not None and start_b.history is not None
    np.testing.assert_array_equal(start_a.history.times_s, start_b.history.times_s)
    np.testing.assert_array_equal(start_a.history.requests_per_s, start_b.history.requests_per_s)
    np.testing.assert_array_equal(start_a.history.tokens_per_s, start_b.history.tokens_per_s)
    assert start_a.opening == start_b.opening
    docs = [
        simulate(
            SimulateOptions(
                trace=str(t), policies=("reactive",), start_s=3600.0, duration_s=3600.0,
                seed=3, quiet=True,
            ),
            out=io.StringIO(),
        )
        for t in (a, b)
    ]  # fmt: skip
    assert docs[0]["max_replicas_bound"] == docs[1]["max_replicas_bound"] == DEFAULT_MAX_REPLICAS
    assert docs[0]["initial_replicas"] == docs[1]["initial_replicas"] == start_a.opening


def test_backfill_is_what_prometheus_scraped_before_the_window() -> None:
    """A steady 3 req/s before the window reads back as about 3 req/s once the
    rate window has two scrapes, at prompt + output tokens per request, with
    every bin end at or before the window's start."""
    prior = synthetic_workload(duration_s=1800.0, base_rps=3.0, seed=4)
    h = scraped_history(prior, scrape_interval_s=15.0, rate_window_s=120.0, bin_s=60.0)
    assert h is not None and len(h) == 30
    assert h.times_s[-1] == 0.0 and np.all(h.times_s <= 0.0)
    assert np.median(h.requests_per_s) == pytest.approx(3.0, rel=0.15)
    per_request = float(np.mean(prior.prompt_tokens + prior.output_tokens))
    assert np.median(h.tokens_per_s / h.requests_per_s) == pytest.approx(per_request, rel=0.15)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.floats(0.0, 1650.0), min_size=1, max_size=40))
def test_a_backfill_reads_only_requests_before_the_window(extra: list[float]) -> None:
    """A bin at -t reads only scrapes at or before it: requests added later in the
    prior span change no bin that ends before they arrive."""
    base = synthetic_workload(duration_s=1800.0, base_rps=1.0, seed=5)
    n = len(extra)
    arrivals = np.sort(np.concatenate([base.arrival_s, np.asarray(extra) + 100.0]))
    more = Workload(
        arrivals,
        np.full(arrivals.size, 200, np.int64),
        np.full(arrivals.size, 50, np.int64),
        "more",
        1800.0,
    )
    first_extra = 100.0 + min(extra) - 1800.0  # on the window clock
    kw = {"scrape_interval_s": 15.0, "rate_window_s": 120.0, "bin_s": 15.0}
    lean = Workload(
        base.arrival_s,
        np.full(len(base), 200, np.int64),
        np.full(len(base), 50, np.int64),
        "lean",
        1800.0,
    )
    h0, h1 = scraped_history(lean, **kw), scraped_history(more, **kw)
    assert h0 is not None and h1 is not None and n > 0
    before = h0.times_s < first_extra
    np.testing.assert_array_equal(h0.requests_per_s[before], h1.requests_per_s[before])


def test_the_opening_fleet_is_shared_and_stated_one_wins() -> None:
    """Every autoscaled policy opens with the run's fleet (clamped into its
    bounds); ``simulate`` at the trace's start opens with 1, a fresh deployment."""
    w = synthetic_workload(duration_s=300.0, base_rps=1.0, seed=1)
    for spec in (reactive_spec(8), predictive_spec(PROFILE.name, max_replicas=8)):
        opened = run_policy(spec, w, PROFILE, SimConfig(initial_replicas=5, seed=1))
        assert opened.timeline["ready"][0] == 5
    doc = simulate(
        SimulateOptions(
            trace=str(DEFAULT_TOKENS_TRACE), policies=("reactive",), duration_s=300.0, quiet=True
        ),
        out=io.StringIO(),
    )
    assert doc["initial_replicas"] == 1
    oracle = PolicySpec("oracle", "oracle", max_replicas=3)
    config = SimConfig(initial_replicas=5)
    controller = make_controller(oracle, w, PROFILE)
    assert controller.initial_replicas(Simulation(w, PROFILE, controller, config)) == 3
    assert run_policy(oracle, w, PROFILE, config).max_replicas <= 3


def test_the_opening_fleet_covers_the_last_minutes_before_the_window() -> None:
    """More traffic just before the window opens a larger fleet; none opens 1."""
    quiet = synthetic_workload(duration_s=1800.0, base_rps=0.5, seed=2)
    busy = synthetic_workload(duration_s=1800.0, base_rps=8.0, seed=2)
    assert 1 <= opening_fleet(quiet, PROFILE) < opening_fleet(busy, PROFILE)
    empty = Workload(np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64), "e", 60.0)
    assert opening_fleet(empty, PROFILE) == 1


# -- capacity the scaler only believes -------------------------------------------
def _bursty() -> Workload:
    return synthetic_workload(
        duration_s=1500.0, base_rps=1.5, seed=2, bursts=((600.0, 400.0, 5.0),),
        prompt_tokens=(600, 0.5), output_tokens=(150, 0.5),
    )  # fmt: skip


def test_zero_capacity_error_is_bit_identical_to_no_setting() -> None:
    w = _bursty()
    spec = predictive_spec(PROFILE.name, max_replicas=10)
    plain = run_policy(spec, w, PROFILE, SimConfig(initial_replicas=2))
    zero = run_policy(spec, w, PROFILE, SimConfig(initial_replicas=2, capacity_error=0.0))
    np.testing.assert_array_equal(plain.ttft_s, zero.ttft_s)
    np.testing.assert_array_equal(plain.timeline["desired"], zero.timeline["desired"])
    assert plain.cost_usd == zero.cost_usd


def test_capacity_error_changes_the_scalers_belief_not_the_engine() -> None:
    """Believing 40 % more capacity than the replicas have sizes a smaller fleet
    for the same burst; the replicas serve at the same true capacity, and a
    policy that reads no capacity (reactive) runs the same either way."""
    w = _bursty()
    spec = predictive_spec(PROFILE.name, max_replicas=10)
    truth = run_policy(spec, w, PROFILE, SimConfig(initial_replicas=2))
    bold = run_policy(spec, w, PROFILE, SimConfig(initial_replicas=2, capacity_error=0.4))
    assert bold.capacity_tokens_per_s == truth.capacity_tokens_per_s
    assert np.nanmean(bold.timeline["desired"]) < np.nanmean(truth.timeline["desired"])
    controller = make_controller(spec, w, PROFILE)
    assert isinstance(controller, ScaledObjectController) and controller.tracker is not None
    tracker = controller.tracker
    believed_truth = tracker.capacity(0.0)
    tracker.believe(capacity_error=0.4, learned_capacity=False)
    believed = tracker.capacity(0.0)
    assert believed_truth.tokens_per_s is not None and believed.tokens_per_s is not None
    assert believed.tokens_per_s == pytest.approx(1.4 * believed_truth.tokens_per_s)
    r0 = run_policy(reactive_spec(10), w, PROFILE, SimConfig(initial_replicas=2))
    r1 = run_policy(
        reactive_spec(10), w, PROFILE, SimConfig(initial_replicas=2, capacity_error=0.4)
    )
    np.testing.assert_array_equal(r0.ttft_s, r1.ttft_s)


def test_learned_capacity_ignores_the_profiles_error() -> None:
    """With the learned capacity on, what the profile says (and how wrong it is)
    does not enter: two errors give the same run."""
    w = _bursty()
    spec = predictive_spec(PROFILE.name, max_replicas=10)
    runs = [
        run_policy(
            spec, w, PROFILE, SimConfig(initial_replicas=2, capacity_error=e, learned_capacity=True)
        )
        for e in (-0.3, 0.3)
    ]
    np.testing.assert_array_equal(runs[0].timeline["desired"], runs[1].timeline["desired"])
    assert runs[0].cost_usd == runs[1].cost_usd


# -- lead time is an input ---------------------------------------------------------
def test_presets_span_two_and_a_half_to_fifteen_minutes() -> None:
    totals = sorted(p.startup.total_s for p in LEAD_TIME_PRESETS.values())
    assert totals[0] == pytest.approx(150.0)
    assert totals[-1] == pytest.approx(900.0)


def test_a_phase_given_alone_replaces_the_presets() -> None:
    s = resolve_startup(PROFILE.startup, preset="8b-uncached-image", model_load_s=10.0)
    preset = LEAD_TIME_PRESETS["8b-uncached-image"].startup
    assert (s.node_ready_s, s.image_pull_s, s.model_load_s) == (
        preset.node_ready_s, preset.image_pull_s, 10.0,
    )  # fmt: skip
    with pytest.raises(ValueError, match="unknown lead-time preset 'nope'"):
        resolve_startup(PROFILE.startup, preset="nope")
    with pytest.raises(ValueError, match="image_pull_s"):
        resolve_startup(PROFILE.startup, image_pull_s=-1.0)


def test_no_lead_time_input_is_the_profiles_own() -> None:
    """Without a flag the run's profile is the very object it was."""
    assert SimInputs().startup(PROFILE) is None
    assert with_startup(PROFILE, None) is PROFILE
    assert with_startup(PROFILE, PROFILE.startup) is PROFILE


def test_a_longer_lead_time_starts_pods_later() -> None:
    """Pods created in a run take about the stated cold start to turn Ready."""
    w = synthetic_workload(duration_s=1200.0, base_rps=1.0, seed=1, bursts=((300.0, 600.0, 6.0),))
    spec = reactive_spec(8)
    slow = LEAD_TIME_PRESETS["70b-uncached"].startup
    fast = run_policy(spec, w, PROFILE, SimConfig(initial_replicas=1))
    late = run_policy(spec, w, PROFILE, SimConfig(initial_replicas=1, startup=slow))
    fast_s = fast.extra["lead_time_samples_s"]
    late_s = late.extra["lead_time_samples_s"]
    assert late_s and min(late_s) >= slow.image_pull_s + slow.model_load_s
    assert np.median(late_s) > np.median(fast_s)


def _parse(*argv: str) -> SimInputs:
    p = argparse.ArgumentParser()
    add_sim_input_flags(p)
    return sim_inputs_from_args(p.parse_args(list(argv)))


def test_flags_parse_to_inputs_and_bad_values_are_usage_errors() -> None:
    assert _parse() == SimInputs()
    flags = "--capacity-error -0.15 --lead-time-preset 8b-cold-engine --model-load-s 200"
    got = _parse(*flags.split(), "--max-replicas", "24", "--initial-replicas", "3")
    assert got.capacity_error == -0.15 and got.max_replicas == 24 and got.initial_replicas == 3
    startup = got.startup(PROFILE)
    assert startup is not None and startup.model_load_s == 200.0
    config = got.apply(SimConfig(), PROFILE, opening=7)
    assert config.initial_replicas == 3 and config.capacity_error == -0.15
    assert replace(got, initial_replicas=None).apply(SimConfig(), PROFILE, 7).initial_replicas == 7
    for bad in (["--capacity-error", "-1"], ["--node-ready-s", "-5"], ["--max-replicas", "0"],
                ["--lead-time-preset", "warp"], ["--capacity-error", "nan"]):  # fmt: skip
        with pytest.raises(SystemExit):
            _parse(*bad)


def test_a_believing_tracker_at_zero_error_decides_as_the_plain_one() -> None:
    """Fed the same readings, the tracker the simulator runs (error 0, learned
    capacity off) answers exactly as ``decision.tracker.Tracker`` does."""
    so = predictive_spec(PROFILE.name, max_replicas=12).scaledobject
    assert so is not None and so.trigger.settings is not None
    config = TrackerConfig(refresh_interval_s=5.0)
    plain = Tracker(("a", "b"), so.trigger.settings, config)
    believing = BelievingTracker(("a", "b"), so.trigger.settings, config)
    believing.believe(capacity_error=0.0, learned_capacity=False)
    rng = np.random.default_rng(0)
    for k in range(200):
        t = 5.0 * k
        rate = 2.0 + 3.0 * math.sin(k / 20.0) ** 2 + float(rng.uniform(0.0, 0.5))
        reading = Reading(
            time_s=t, ready_replicas=3, waiting=float(k % 4), running=8.0, kv_usage=0.4,
            arrival_rate_rps=rate, prompt_tokens_per_s=rate * 900.0,
            generation_tokens_per_s=rate * 250.0, completion_rate_rps=rate,
        )  # fmt: skip
        a, b = plain.step(t, reading, t), believing.step(t, reading, t)
        assert a.decision == b.decision and a.capacity == b.capacity


def test_tune_takes_the_capacity_belief_flags() -> None:
    """``prescaler tune --capacity-error E --learned-capacity`` reaches its
    request, so prescaler's side is tuned believing capacity x (1 + E); a bad
    E is refused naming the flag."""
    from simulations.tune.cli import register, request_from

    parser = argparse.ArgumentParser(prog="prescaler")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["tune", "t.csv", "--capacity-error", "0.3", "--learned-capacity"])
    inputs = request_from(args).replay.inputs
    assert inputs is not None
    assert inputs.capacity_error == 0.3 and inputs.learned_capacity
    config = inputs.apply(SimConfig(), PROFILE, None)
    assert config.capacity_error == 0.3 and config.learned_capacity
    err = io.StringIO()
    with pytest.raises(SystemExit), redirect_stderr(err):
        parser.parse_args(["tune", "t.csv", "--capacity-error", "-1.5"])
    assert "--capacity-error" in err.getvalue()
