"""The policies: what each one runs, and that each one behaves like itself."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.profiles import get_profile
from simulations.autoscaling.scaledobject import load_scaledobject
from simulations.backfill import scraped_history
from simulations.policies import (
    PolicySpec,
    fleet_bound,
    make_controller,
    oracle_need,
    predictive_spec,
    reactive_spec,
    scaledobject_spec,
    with_history,
)
from simulations.runner import attainment, run_policies, run_policy, search_static
from simulations.simulation import COMPLETED, SimConfig, Simulation
from simulations.traffic import Workload
from tests.support.synthetic_traffic import synthetic_workload

PROFILE = get_profile("llama-3-8b@g5.xlarge")
DATA = Path(__file__).parent / "data"


def _burst() -> Workload:
    return synthetic_workload(
        duration_s=1500.0,
        base_rps=1.0,
        seed=2,
        bursts=((600.0, 400.0, 6.0),),
        prompt_tokens=(600, 0.5),
        output_tokens=(150, 0.5),
    )


def test_reactive_is_the_seeds_scaledobject() -> None:
    """reactive = the public recipe: sum(vllm:num_requests_waiting) > 3, 15 s polls."""
    so = reactive_spec().scaledobject
    assert so is not None
    assert so.trigger.kind == "prometheus" and so.trigger.query is not None
    assert so.trigger.query.metric == "vllm:num_requests_waiting"
    assert so.trigger.threshold == 3.0
    assert so.keda.polling_interval_s == 15 and so.keda.min_replica_count == 1


def test_predictive_uses_prescalers_trigger_and_the_chosen_forecaster() -> None:
    """predictive = prescaler's external trigger, profile = the run's, forecast as asked."""
    so = predictive_spec(PROFILE.name, max_replicas=12, forecaster="holt_winters").scaledobject
    assert so is not None and so.trigger.kind == "prescaler"
    assert so.trigger.settings is not None
    assert so.trigger.settings.profile == PROFILE.name
    assert so.trigger.settings.forecast == "holt_winters"
    assert so.keda.max_replica_count == 12 and so.hpa.target == 1.0


def test_a_statsforecast_baseline_drives_the_tracker_in_the_simulator_only() -> None:
    """``sf_*`` methods are not trigger values (the live scaler does not run them):
    the ScaledObject keeps ``forecast: auto`` and the tracker forecasts with the
    baseline, so its forecast band differs from the default's on the same run."""
    pytest.importorskip("statsforecast")
    spec = predictive_spec(PROFILE.name, max_replicas=10, forecaster="sf_autoets")
    assert spec.forecaster == "sf_autoets"
    assert spec.scaledobject is not None and spec.scaledobject.trigger.settings is not None
    assert spec.scaledobject.trigger.settings.forecast == "auto"
    w = _burst()
    base = run_policy(predictive_spec(PROFILE.name, max_replicas=10), w, PROFILE, SimConfig())
    ets = run_policy(spec, w, PROFILE, SimConfig())
    assert np.isfinite(ets.timeline["forecast_upper_rps"]).any()
    assert not np.array_equal(
        np.nan_to_num(ets.timeline["forecast_upper_rps"]),
        np.nan_to_num(base.timeline["forecast_upper_rps"]),
    )
    assert (ets.status == COMPLETED).mean() > 0.9


def test_a_bad_forecaster_is_the_live_scalers_error() -> None:
    """An unknown forecast method fails like the live scaler's metadata check."""
    with pytest.raises(ValueError, match="forecast"):
        predictive_spec(PROFILE.name, forecaster="crystal_ball")


def test_oracle_need_covers_the_peak_one_lead_time_ahead() -> None:
    """The oracle's answer at t covers the true peak over [t, t + start-up lead]."""
    w = _burst()
    need = oracle_need(w, PROFILE)
    lead_bins = int(np.ceil(PROFILE.startup.total_s / 15.0))
    burst_bin = 600 // 15
    assert need[burst_bin - lead_bins] >= need[burst_bin]
    assert need[burst_bin] > need[10]
    assert fleet_bound(w, PROFILE) >= 2 * int(need.max()) or fleet_bound(w, PROFILE) == 10


def test_oracle_needs_nothing_for_no_traffic() -> None:
    """Zero arrivals need zero replicas (the controller still keeps one)."""
    w = Workload(np.array([]), np.array([], dtype=int), np.array([], dtype=int), "empty", 300.0)
    assert oracle_need(w, PROFILE).max() == 0


def test_reactive_scales_up_under_a_burst_and_back_down() -> None:
    """Queue-length scaling adds replicas during the burst (HPA +100 % per 15 s)
    and removes them after it (10 % per minute once 300 s have passed)."""
    w = _burst()
    r = run_policy(reactive_spec(10), w, PROFILE, SimConfig())
    tl = r.timeline
    during = tl["spec"][(tl["t"] > 700) & (tl["t"] < 1000)].max()
    before = tl["spec"][tl["t"] < 550].max()
    assert during > before and r.scale_ups > 0


def test_predictive_runs_the_tracker_and_records_its_forecast() -> None:
    """The predictive timeline carries the tracker's desired replicas and forecast band."""
    w = _burst()
    r = run_policy(predictive_spec(PROFILE.name, max_replicas=10), w, PROFILE, SimConfig())
    tl = r.timeline
    assert {"desired", "forecast_upper_rps", "forecast_median_rps"} <= set(tl)
    assert np.nanmax(tl["desired"]) > 1
    assert np.isfinite(tl["forecast_upper_rps"]).any()
    assert (r.status == COMPLETED).mean() > 0.95


def test_prewarm_holds_balloons() -> None:
    """With prewarm on and nodes slower to arrive (900 s) than the trigger looks ahead,
    the predictive policy holds balloon pods for the rise its forecast sees coming."""
    w = synthetic_workload(
        duration_s=1500.0,
        base_rps=3.0,
        daily_amplitude=0.8,
        period_s=14_400.0,  # a 4-hour cycle, the window on its rising half
        phase_s=-14_400.0 / 4 + 3600.0,
        seed=2,
        prompt_tokens=(600, 0.5),
        output_tokens=(150, 0.5),
    )
    spec = predictive_spec(PROFILE.name, max_replicas=10, prewarm=True, node_lead_time_s=900)
    r = run_policy(spec, w, PROFILE, SimConfig())
    assert (r.status == COMPLETED).mean() > 0.9
    assert r.timeline["balloons"].max() >= 1


def test_user_scaledobject_is_named_by_its_metadata() -> None:
    """--scaledobject FILE runs that ScaledObject under its metadata.name."""
    so = load_scaledobject(DATA / "eks-vllm-keda-blog-a.yaml")
    spec = scaledobject_spec(so)
    assert spec.name == "vllm-queue-autoscaler"
    w = synthetic_workload(duration_s=300.0, base_rps=1.0, seed=4, prompt_tokens=(400, 0.5))
    r = run_policy(spec, w, PROFILE, SimConfig())
    assert r.policy == "vllm-queue-autoscaler"
    assert r.max_replicas >= 2  # minReplicaCount 2


def test_static_search_finds_the_smallest_passing_fleet() -> None:
    """The default static fleet passes the target and one replica fewer does not."""
    w = synthetic_workload(
        duration_s=600.0, base_rps=4.0, seed=9, prompt_tokens=(500, 0.3), output_tokens=(150, 0.3)
    )
    out = search_static(PolicySpec("static", "static"), w, PROFILE, SimConfig())
    assert out.replicas is not None and out.target is not None
    assert attainment(out.result) >= out.target
    tried = dict(out.tried)
    if out.replicas > 1:
        below = tried.get(out.replicas - 1, "missing")
        assert below is None or (isinstance(below, float) and below < out.target)


def test_policies_in_processes_match_in_process() -> None:
    """--jobs 2 runs each policy in its own process; the numbers are the same."""
    w = synthetic_workload(duration_s=300.0, base_rps=2.0, seed=6, prompt_tokens=(400, 0.5))
    specs = [PolicySpec("static", "static", replicas=2), PolicySpec("oracle", "oracle")]
    one = run_policies(specs, w, PROFILE.name, SimConfig(), jobs=1)
    two = run_policies(specs, w, PROFILE.name, SimConfig(), jobs=2)
    assert list(two) == ["static", "oracle"]
    for name in one:
        np.testing.assert_array_equal(one[name].result.ttft_s, two[name].result.ttft_s)


def test_policy_names_must_be_unique() -> None:
    with pytest.raises(ValueError, match="unique"):
        run_policies(
            [PolicySpec("a", "oracle"), PolicySpec("a", "oracle")],
            _burst(),
            PROFILE.name,
            SimConfig(),
        )


def test_static_controller_needs_a_count() -> None:
    """A static spec must be resolved (searched) before it can run."""
    with pytest.raises(ValueError, match="static"):
        make_controller(PolicySpec("static", "static"), _burst(), PROFILE)
    sim_ok = Simulation(
        _burst(), PROFILE, make_controller(PolicySpec("s", "static", replicas=3), _burst(), PROFILE)
    )
    assert sim_ok.n == len(_burst())


MIXED_SO = """\
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {name: queue-then-prescaler}
spec:
  scaleTargetRef: {name: vllm}
  minReplicaCount: 1
  maxReplicaCount: 8
  triggers:
    - type: prometheus
      metadata: {query: sum(vllm:num_requests_waiting), threshold: '5'}
    - type: external
      metadata:
        scalerAddress: prescaler:9090
        prometheusAddress: http://prometheus:9090
        profile: llama-3-8b@g5.xlarge
"""


def test_a_prescaler_trigger_after_another_gets_the_backfill(tmp_path: Path) -> None:
    """The backfill goes to a ScaledObject whose prescaler trigger is not its
    first, and its tracker forecasts from the first refresh on it: with the
    history the band is there within the first minute, without it not."""
    path = tmp_path / "mixed.yaml"
    path.write_text(MIXED_SO)
    spec = scaledobject_spec(load_scaledobject(path))
    prior = synthetic_workload(duration_s=3 * 3600.0, base_rps=2.0, seed=5)
    history = scraped_history(prior, scrape_interval_s=15.0, rate_window_s=120.0, bin_s=60.0)
    assert history is not None
    assert with_history(spec, history).history is history
    assert with_history(reactive_spec(8), history).history is None
    window = synthetic_workload(duration_s=120.0, base_rps=2.0, seed=6)
    config = SimConfig(initial_replicas=1)
    warm = run_policy(with_history(spec, history), window, PROFILE, config).timeline
    cold = run_policy(spec, window, PROFILE, config).timeline
    assert np.isfinite(warm["forecast_upper_rps"][warm["t"] < 60]).any()
    assert not np.isfinite(cold["forecast_upper_rps"][cold["t"] < 60]).any()
