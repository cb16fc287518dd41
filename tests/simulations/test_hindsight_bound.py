"""The hindsight schedule replayed through the simulator: the bound holds.

On the shipped trace and the shipped tuned fixture: the calibrated schedule
meets its target when replayed; no set-up that meets the target costs less
(the demo's tuned sides, and every held-back frontier point of a small
study); and the bound's cost does not fall as the lead time or the target
rises.
"""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.profiles import get_profile
from prescaler.demo import write_scaledobjects
from prescaler.demo_tuned import FIXTURE, held_back_start, load_fixture
from simulations.cli import SimulateOptions, simulate
from simulations.hindsight_run import (
    bound_summary,
    hindsight_bound,
    instant_no_dearer,
    pair_configs,
)
from simulations.lead_time import LEAD_TIME_PRESETS
from simulations.runner import idle_attainment
from simulations.simulation import SimConfig
from simulations.traffic import DEFAULT_TOKENS_TRACE, TrafficOptions, Workload, load_workload
from simulations.tune.cli import main as tune_main

PROFILE = "llama-3-8b@g5.xlarge"
FIXTURE_CHECK = HealthCheck.function_scoped_fixture
"""The part is read once for the module; each example only reads it."""
TRACE = str(DEFAULT_TOKENS_TRACE)
TOLERANCE = 0.002
"""0.2 points: how far below its target a replayed bound may land."""


def _window(start_s: float, duration_s: float | None) -> Workload:
    return load_workload(TRACE, TrafficOptions(start_s=start_s, duration_s=duration_s))


def test_the_demo_fixture_has_no_tuned_side_below_the_bound(tmp_path: Path) -> None:
    """The shipped fixture's tuned sides, scored on the held-back part as the
    demo scores them: the bound meets the target, and each set-up that meets
    it costs at least the bound."""
    fixture = load_fixture(FIXTURE)
    start = held_back_start(TRACE, fixture.holdout)
    paths = write_scaledobjects(fixture, tmp_path)
    opts = SimulateOptions(
        trace=TRACE, policies=("reactive", "hindsight"), profile=fixture.profile,
        slo_ttft_s=fixture.slo_ttft_s, start_s=start, seed=fixture.seed, quiet=True, jobs=2,
        scaledobjects=tuple(str(p) for p in paths), target=fixture.target,
        json_path=str(tmp_path / "sim.json"),
    )  # fmt: skip
    doc = simulate(opts, io.StringIO())
    assert json.loads((tmp_path / "sim.json").read_text())["hindsight"] == doc["hindsight"]
    bound = doc["hindsight"]
    target = bound["target_attainment"]
    at = bound["stated_lead"]
    assert at["met"] and at["slo_attainment"] >= target - TOLERANCE
    assert doc["policies"]["hindsight"]["slo_attainment"] == at["slo_attainment"]
    below = {
        name: p["cost_usd"]
        for name, p in doc["policies"].items()
        if name != "hindsight"
        and p["slo_attainment"] >= target
        and p["cost_usd"] < doc["policies"]["hindsight"]["cost_usd"]
    }
    assert not below, f"set-ups cheaper than the bound at its target: {below}"
    assert bound["instant_start"]["cost_usd"] <= at["cost_usd"]
    assert all(
        p["cost_ratio_to_hindsight"] >= 1.0
        for name, p in doc["policies"].items()
        if p["slo_attainment"] >= target
    )


def test_no_frontier_point_of_a_small_study_beats_the_bound(tmp_path: Path) -> None:
    """A small study on the shipped trace: every held-back frontier point and
    chosen setting that meets the held-back target costs at least the bound."""
    out = tmp_path / "tune.json"
    code = tune_main([
        TRACE, "--duration", "1800", "--trials", "4", "--quiet", "--holdout-seeds", "1",
        "--target", "0.9", "--storage", f"sqlite:///{tmp_path / 'study.db'}",
        "--json", str(out),
    ])  # fmt: skip
    assert code in (0, 3)
    if not out.exists():
        pytest.skip("no prescaler setting met the target in 4 trials: nothing to compare")
    doc = json.loads(out.read_text())
    bound = doc["hindsight"]
    target = doc["target_attainment"]["holdout"]
    assert bound["stated_lead"]["met"]
    assert bound["stated_lead"]["slo_attainment"] >= target - TOLERANCE
    floor = bound["stated_lead"]["cost_usd"]
    points = [p for side in doc["frontier"].values() for p in side]
    points += [s["holdout"] for s in doc["sides"].values() if s["holdout"] is not None]
    cheaper = [p for p in points if p["slo_attainment"] >= target and p["cost_usd"] < floor]
    assert not cheaper, f"below the bound ({floor}): {cheaper}"


@pytest.fixture(scope="module")
def part() -> Workload:
    """The demo's held-back part: the shipped trace's last 30 %."""
    return _window(held_back_start(TRACE, 0.3), None)


def _bound_cost(part: Workload, config: SimConfig, fraction: float) -> float:
    profile = get_profile(PROFILE)
    target = fraction * idle_attainment(part, profile, config.slo_ttft_s)
    bound = hindsight_bound(part, profile, config, target, max_replicas=16)
    assert bound.calibrated.met and bound.calibrated.attainment >= target - TOLERANCE
    return bound.result.cost_usd


@settings(
    max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(st.sampled_from(sorted(LEAD_TIME_PRESETS)), min_size=2, max_size=2, unique=True),
    st.integers(0, 3),
)
def test_the_bound_does_not_fall_as_the_lead_time_grows(
    part: Workload, presets: list[str], seed: int
) -> None:
    """Two cold starts on the same part: the longer one's bound costs no less."""
    startups = sorted((LEAD_TIME_PRESETS[p].startup for p in presets), key=lambda s: s.total_s)
    costs = [_bound_cost(part, SimConfig(seed=seed, startup=s), 0.95) for s in startups]
    assert costs[1] >= costs[0] - 1e-9  # equal bills may differ in their last bit


@settings(
    max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.floats(0.8, 0.93), st.floats(0.02, 0.05), st.integers(0, 3))
def test_the_bound_does_not_fall_as_the_target_rises(
    part: Workload, low: float, more: float, seed: int
) -> None:
    """Two targets on the same part: the higher one's bound costs no less."""
    config = SimConfig(seed=seed)
    assert _bound_cost(part, config, low + more) >= _bound_cost(part, config, low) - 1e-9


def test_the_instant_bound_is_never_dearer_than_the_stated_one(part: Workload) -> None:
    """Where the instant start's calibration lands dearer than the stated
    lead's (here forced), the stated schedule replayed with an instant start
    takes its place: it meets the target at no more than the stated bill."""
    profile = get_profile(PROFILE)
    config = SimConfig(startup=LEAD_TIME_PRESETS["8b-cold-engine"].startup)
    target = 0.95 * idle_attainment(part, profile, config.slo_ttft_s)
    stated, instant = (
        hindsight_bound(part, profile, c, target, max_replicas=16) for c in pair_configs(config)
    )
    cheaper = dataclasses.replace(
        instant, result=dataclasses.replace(instant.result, cost_usd=stated.result.cost_usd / 2)
    )
    assert instant_no_dearer(stated, cheaper, part, profile, config, target) is cheaper
    assert not bound_summary(stated, cheaper, 0.95)["instant_start"]["from_stated_schedule"]
    dearer = dataclasses.replace(
        instant, result=dataclasses.replace(instant.result, cost_usd=2 * stated.result.cost_usd)
    )
    settled = instant_no_dearer(stated, dearer, part, profile, config, target)
    assert settled is not dearer
    assert settled.result.cost_usd <= stated.result.cost_usd + 1e-9
    assert settled.calibrated.attainment >= target and settled.calibrated.met
    assert settled.timing == instant.timing
    assert list(settled.schedule.orders) == list(stated.schedule.orders)
    summary = bound_summary(stated, settled, 0.95)
    assert summary["instant_start"]["from_stated_schedule"]
    assert summary["lead_time_price_usd"] >= 0.0


def test_a_stop_hook_moves_nothing_and_ends_the_bound_when_it_raises() -> None:
    """A tune worker passes Ctrl-C's check as ``stop``: a check that lets
    the replays run leaves the bound as it was, and one that raises ends
    it within a minute of simulated time instead of after both bounds."""
    part = _window(0.0, 1200.0)
    profile = get_profile(PROFILE)
    config = SimConfig(seed=1)
    target = 0.95 * idle_attainment(part, profile, config.slo_ttft_s)
    calls: list[int] = []
    plain = hindsight_bound(part, profile, config, target, max_replicas=16)
    checked = hindsight_bound(
        part, profile, config, target, max_replicas=16, stop=lambda: calls.append(1)
    )
    assert calls and checked.result.cost_usd == plain.result.cost_usd
    assert checked.calibrated.schedule.orders.tolist() == plain.calibrated.schedule.orders.tolist()

    def ctrl_c() -> None:
        if len(calls) > 3:
            raise KeyboardInterrupt
        calls.append(1)

    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        hindsight_bound(part, profile, config, target, max_replicas=16, stop=ctrl_c)
    assert len(calls) == 4
