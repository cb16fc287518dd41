"""A study's seeded trials: the ScaledObject as written, then one step
either way on each knob that sizes the fleet (the floor first)."""

from __future__ import annotations

import dataclasses
import functools

import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulations.tune.manifest import apply_setting, knob_value
from simulations.tune.request import tune_request
from simulations.tune.search import PREDICTIVE_SPACE, default_bases, sample_metadata
from simulations.tune.seeding import neighbour_params, seed_params, sizing_keys
from simulations.tune.sides import SIDES, Side, make_sides
from tests.support.tuned_metadata import apply_metadata

PROFILE = "llama-3-8b@g5.xlarge"


@functools.cache
def _all() -> dict[str, Side]:
    request = tune_request(trace=None, profile=PROFILE, sides=SIDES)
    return {s.name: s for s in make_sides(request, PROFILE, 10)}


def _seed(side: Side) -> dict[str, object]:
    knobs = {p.key: knob_value(side.manifest, p.key) for p in side.space if "." in p.key}
    seed = seed_params(side.base, side.space, 10, knobs)
    assert seed is not None
    return seed


def test_the_gateway_side_gets_the_threshold_a_person_tries_next() -> None:
    """keda-gateway as written (floor 0, threshold 0.5): the floor can only
    rise (one neighbour, which drops the keys that only matter at zero), the
    threshold moves 10 % either way on its 0.01 grid, nothing else moves."""
    side = _all()["keda-gateway"]
    seed = _seed(side)
    assert seed["spec.minReplicaCount"] == 0 and seed["triggers.0.threshold"] == 0.5
    got = dict(neighbour_params(seed, side.space, 10, limit=10))
    assert list(got) == ["spec.minReplicaCount+", "triggers.0.threshold-", "triggers.0.threshold+"]
    up = got["spec.minReplicaCount+"]
    assert up["spec.minReplicaCount"] == 1
    assert "spec.cooldownPeriod" not in up
    assert not any(k.endswith("activationThreshold") for k in up)
    assert got["triggers.0.threshold-"] == {**seed, "triggers.0.threshold": 0.45}
    assert got["triggers.0.threshold+"] == {**seed, "triggers.0.threshold": 0.55}


def test_prescaler_neighbours_move_its_floor_and_targets_on_their_grids() -> None:
    """The shipped trigger (floor 1, 3 waiting per replica, KV target 0.8):
    the floor cannot fall below the space's 1; the targets snap 10 % to their
    grids (2.7 -> 2.75 on a 0.25 step, 0.72 -> 0.7 on 0.05); the limit cuts
    the list in seeding order."""
    base, _ = default_bases(PROFILE, 8)
    seed = seed_params(base, PREDICTIVE_SPACE, 8)
    assert seed is not None
    assert sizing_keys(PREDICTIVE_SPACE) == [
        "minReplicas",
        "targetWaitingPerReplica",
        "targetKvCacheUsage",
    ]
    got = neighbour_params(seed, PREDICTIVE_SPACE, 8, limit=10)
    moved = {label: params[label[:-1]] for label, params in got}
    assert moved == {
        "minReplicas+": 2,
        "targetWaitingPerReplica-": 2.75,
        "targetWaitingPerReplica+": 3.25,
        "targetKvCacheUsage-": 0.7,
        "targetKvCacheUsage+": 0.9,
    }
    assert [label for label, _ in neighbour_params(seed, PREDICTIVE_SPACE, 8, limit=2)] == [
        label for label, _ in got[:2]
    ]
    assert neighbour_params(seed, PREDICTIVE_SPACE, 8, limit=0) == []


def test_the_cron_side_knows_the_replicas_next_to_its_window() -> None:
    """keda-queue-kv-cron as written (floor 1, 2 replicas in its window):
    after the floor, its window's replicas move up one, before the triggers'
    targets; a study of 30 trials (limit 6) tries them. Down one would be
    the floor, which a window adds nothing to: not a neighbour, and a floor
    moved up to the window's 2 leaves the window to the sampler."""
    side = _all()["keda-queue-kv-cron"]
    seed = _seed(side)
    assert sizing_keys(side.space) == [
        "spec.minReplicaCount",
        "triggers.2.desiredReplicas",
        "triggers.0.threshold",
        "triggers.1.threshold",
    ]
    got = dict(neighbour_params(seed, side.space, 10, limit=6))
    assert "triggers.2.desiredReplicas-" not in got
    assert got["triggers.2.desiredReplicas+"] == {**seed, "triggers.2.desiredReplicas": 3}
    assert list(got)[:2] == ["spec.minReplicaCount+", "triggers.2.desiredReplicas+"]
    raised = got["spec.minReplicaCount+"]
    assert raised["spec.minReplicaCount"] == 2 and "triggers.2.desiredReplicas" not in raised


def test_a_key_the_metadata_leaves_out_is_seeded_with_its_default() -> None:
    """A user's trigger without ``targetKvCacheUsage`` or
    ``seasonalWanderSeconds`` runs with their defaults (0.8, 1800 s): the
    first trial is what runs, so it holds them too."""
    base, _ = default_bases(PROFILE, 8)
    meta = {
        k: v
        for k, v in base.trigger.metadata.items()
        if k not in ("targetKvCacheUsage", "seasonalWanderSeconds")
    }
    bare = apply_metadata(
        dataclasses.replace(base, trigger=dataclasses.replace(base.trigger, metadata=meta)), {}
    )
    assert "targetKvCacheUsage" not in bare.trigger.metadata
    assert seed_params(bare, PREDICTIVE_SPACE, 8) == seed_params(base, PREDICTIVE_SPACE, 8)


def test_a_floor_the_metadata_leaves_out_is_the_scaledobjects() -> None:
    """Without ``minReplicas`` the floor that runs is the ScaledObject's
    ``minReplicaCount``, not the trigger's default of 0."""
    base, _ = default_bases(PROFILE, 8)
    meta = {k: v for k, v in base.trigger.metadata.items() if k != "minReplicas"}
    trigger = dataclasses.replace(base.trigger, metadata=meta)
    keda = dataclasses.replace(base.keda, min_replica_count=2)
    seed = seed_params(dataclasses.replace(base, trigger=trigger, keda=keda), PREDICTIVE_SPACE, 8)
    assert seed is not None and seed["minReplicas"] == 2


def test_a_key_left_to_the_sampler_has_no_neighbours() -> None:
    seed = {"minReplicas": 2}
    got = neighbour_params(seed, PREDICTIVE_SPACE, 8, limit=10)
    assert [label for label, _ in got] == ["minReplicas-", "minReplicas+"]
    assert [p["minReplicas"] for _, p in got] == [1, 3]


def test_a_floor_never_passes_max_replicas() -> None:
    got = neighbour_params({"minReplicas": 4}, PREDICTIVE_SPACE, 4, limit=10)
    assert [label for label, _ in got] == ["minReplicas-"]


@pytest.mark.parametrize("name", sorted(set(SIDES) - {"user"}))
@settings(max_examples=15, deadline=None)
@given(sampler_seed=st.integers(0, 2**31 - 1))
def test_every_neighbour_is_a_setting_the_side_runs(name: str, sampler_seed: int) -> None:
    """From any point of a side's space (as the seed), each neighbour moves
    exactly one sizing key, stays on the search grid (optuna takes it as
    the trial's parameters) and applies to the side's manifest."""
    side = _all()[name]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=sampler_seed))
    first = study.ask()
    sample_metadata(first, side.space, 10)
    seed = dict(first.params)
    for label, params in neighbour_params(seed, side.space, 10, limit=20):
        key = label[:-1]
        changed = {k for k in params if params[k] != seed.get(k)}
        assert changed == {key}
        assert (params[key] < seed[key]) == label.endswith("-")  # type: ignore[operator]
        study.enqueue_trial(params)
        trial = study.ask()
        picked = sample_metadata(trial, side.space, 10)
        assert trial.params[key] == params[key]
        assert all(trial.params[k] == v for k, v in params.items())
        apply_setting(side.base, picked, side.manifest)
