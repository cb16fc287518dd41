"""`prescaler tune`'s KEDA and HPA knobs: a setting is a manifest edit, parsed
back by the simulator's reader; every side's first trial is its ScaledObject
as written; the worker seeds and the SQLite tell race."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulations.autoscaling.scaledobject import (
    ScaledObjectSpec,
    parse_scaledobject,
    seeds_reactive,
)
from simulations.simulation import SimConfig
from simulations.tune.manifest import (
    PRESCALER_BEHAVIOR_SPACE,
    apply_setting,
    apply_to_manifest,
    hpa_scale_down_s,
    keda_space,
    knob_value,
    manifest_of,
    manifest_yaml,
    triggers_of,
)
from simulations.tune.search import (
    PREDICTIVE_SPACE,
    Param,
    default_bases,
    sample_metadata,
    score,
)
from simulations.tune.seeding import seed_params
from simulations.tune.sides import queue_and_kv_manifest
from simulations.tune.study import TuneContext, is_tell_race, run_study, worker_seed
from tests.support.synthetic_traffic import synthetic_workload

PROFILE = "llama-3-8b@g5.xlarge"


def _sides() -> list[tuple[str, ScaledObjectSpec, tuple[Param, ...]]]:
    p, _ = default_bases(PROFILE, 10)
    q = seeds_reactive(max_replicas=10)
    kv = parse_scaledobject(yaml.safe_dump(queue_and_kv_manifest(q)))
    return [
        ("prescaler", p, (*PREDICTIVE_SPACE, *PRESCALER_BEHAVIOR_SPACE)),
        ("keda-queue", q, keda_space(q, 10)),
        ("keda-queue-kv", kv, keda_space(kv, 10)),
    ]


@pytest.mark.parametrize("name", ["prescaler", "keda-queue", "keda-queue-kv"])
def test_the_rendered_manifest_parses_back_to_the_same_scaledobject(name: str) -> None:
    """The shipped bases have no file: their rendered manifest is read back
    by parse_scaledobject as the very ScaledObject the simulator ran."""
    base = next(b for n, b, _ in _sides() if n == name)
    assert parse_scaledobject(yaml.safe_dump(manifest_of(base))) == base


@pytest.mark.parametrize("name", ["prescaler", "keda-queue", "keda-queue-kv"])
def test_the_first_trial_is_the_scaledobject_as_written(name: str) -> None:
    """Every side's seeded trial reproduces its base exactly (knobs included:
    a ScaledObject with no Pods policy seeds `scaleUp.pods` 0), but for
    prescaler's scale-in wait: its trigger's window and the HPA's, one after
    the other as written (300 s each), are the trigger's one window of 600 s
    with the HPA's derived 0, so the ScaledObject waits as long as before."""
    _, base, space = next(s for s in _sides() if s[0] == name)
    doc = manifest_of(base)
    knobs = {p.key: knob_value(doc, p.key) for p in space if "." in p.key}
    seed = seed_params(base, space, 10, knobs)
    study = optuna.create_study()
    assert seed is not None
    study.enqueue_trial(seed)
    trial = study.ask()
    first = apply_setting(base, sample_metadata(trial, space, 10))
    if name != "prescaler":
        assert first == base
        return
    folded = apply_setting(base, {"scaleDownStabilizationSeconds": "600"})
    assert first == folded and hpa_scale_down_s(first) == 0.0
    waits = [
        float(so.prescaler_trigger.metadata["scaleDownStabilizationSeconds"]) + hpa_scale_down_s(so)
        for so in (base, first)
        if so.prescaler_trigger is not None
    ]
    assert waits == [600.0, 600.0]


def test_keys_a_keda_scaledobject_leaves_out_start_at_kedas_defaults() -> None:
    """A scale-to-zero ScaledObject written without ``pollingInterval``,
    ``cooldownPeriod``, ``minReplicaCount`` or ``activationThreshold`` runs
    with KEDA's 30 s, 300 s, 0 and 0; its first trial holds them, as a
    prescaler trigger's left-out keys get their defaults."""
    doc = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "bare"},
        "spec": {
            "scaleTargetRef": {"name": "vllm"},
            "maxReplicaCount": 10,
            "triggers": [
                {
                    "type": "prometheus",
                    "metadata": {
                        "serverAddress": "http://prometheus:9090",
                        "query": "sum(rate(gateway_requests_total[1m]))",
                        "threshold": "0.5",
                    },
                }
            ],
        },
    }
    base = parse_scaledobject(yaml.safe_dump(doc))
    space = keda_space(base, 10)
    knobs = {p.key: knob_value(doc, p.key) for p in space if "." in p.key}
    seed = seed_params(base, space, 10, knobs)
    assert seed is not None
    assert seed["spec.minReplicaCount"] == 0
    assert seed["spec.pollingInterval"] == "30"  # a choice among the values people write
    assert seed["spec.cooldownPeriod"] == 300
    assert seed["triggers.0.activationThreshold"] == 0.0
    assert seed["triggers.0.threshold"] == 0.5


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_every_sampled_keda_setting_is_a_valid_scaledobject(seed: int) -> None:
    """Whatever the sampler picks, the manifest parses; maxReplicaCount stays
    the user's; the HPA target is the trigger's threshold; minReplicaCount
    never exceeds maxReplicaCount."""
    base = seeds_reactive(max_replicas=6)
    space = keda_space(base, 6)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    trial = study.ask()
    picked = sample_metadata(trial, space, 6)
    so = apply_setting(base, picked)
    assert so.keda.max_replica_count == 6
    assert 1 <= so.keda.min_replica_count <= 6
    assert so.hpa.target == so.trigger.threshold == float(picked["triggers.0.threshold"])
    assert so.keda.polling_interval_s == float(picked["spec.pollingInterval"])


def test_a_tuned_min_replicas_is_the_scaledobjects_min_replica_count() -> None:
    """KEDA's floor and the trigger's say the same in the pasted manifest,
    and the printed YAML quotes every metadata value (a map of strings)."""
    p, _ = default_bases(PROFILE, 10)
    doc = apply_to_manifest(manifest_of(p), {"minReplicas": "3"})
    assert doc["spec"]["minReplicaCount"] == 3
    text = manifest_yaml(doc)
    assert 'minReplicas: "3"' in text and "minReplicaCount: 3" in text
    assert yaml.safe_load(text) == doc


def test_keda_space_has_knobs_for_each_prometheus_trigger() -> None:
    """Thresholds are addressed by trigger index (the queue and KV-cache
    ScaledObject gets one per trigger, each applied to its own trigger);
    activationThreshold only joins when the user scales to zero (above one
    replica it decides nothing)."""
    base = seeds_reactive(max_replicas=10)
    keys = [p.key for p in keda_space(base, 10)]
    assert "triggers.0.threshold" in keys and "triggers.0.activationThreshold" not in keys
    kv = parse_scaledobject(yaml.safe_dump(queue_and_kv_manifest(base)))
    kv_keys = [p.key for p in keda_space(kv, 10)]
    assert {"triggers.0.threshold", "triggers.1.threshold"} <= set(kv_keys)
    tuned = apply_setting(kv, {"triggers.0.threshold": "2", "triggers.1.threshold": "0.6"})
    assert [t.threshold for t in triggers_of(tuned)] == [2.0, 0.6]
    doc = manifest_of(base)
    doc["spec"]["minReplicaCount"] = 0
    zero = parse_scaledobject(yaml.safe_dump(doc))
    cond = {p.key: p.when for p in keda_space(zero, 10)}
    assert cond["triggers.0.activationThreshold"] == ("spec.minReplicaCount", "0")


def test_worker_seeds_are_reproducible_and_distinct() -> None:
    """Worker k's seed depends on the study seed, k and the trials already
    there, never on host or process."""
    seeds = [worker_seed(7, k, 0) for k in range(4)]
    assert seeds[0] == 7 and len(set(seeds)) == 4
    assert seeds == [worker_seed(7, k, 0) for k in range(4)]
    assert worker_seed(7, 0, 5) != 7


def test_the_sqlite_tell_race_is_recognised(tmp_path: Path) -> None:
    """The error optuna raises when a trial another process finished is told
    again is the one `_worker` carries on from; others are not."""
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'r.db'}")
    trial = study.ask()
    study.tell(trial, 1.0)
    with pytest.raises(ValueError) as exc:
        study.tell(trial.number, 2.0)
    assert is_tell_race(exc.value)
    assert not is_tell_race(ValueError("something else"))


def test_the_sqlite_write_race_is_recognised(tmp_path: Path) -> None:
    """The other form of the race: a second process finished the trial after
    this one's tell checked its state, so the storage refuses the write."""
    url = f"sqlite:///{tmp_path / 'w.db'}"
    mine = optuna.create_study(storage=url, study_name="s")
    theirs = optuna.load_study(storage=url, study_name="s")
    trial = mine.ask()
    complete = optuna.trial.TrialState.COMPLETE
    theirs._storage.set_trial_state_values(trial._trial_id, complete, [1.0])
    with pytest.raises(RuntimeError) as exc:
        mine._storage.set_trial_state_values(trial._trial_id, complete, [2.0])
    assert is_tell_race(exc.value)
    assert not is_tell_race(RuntimeError("something else"))
    assert theirs.trials[0].value == 1.0


@pytest.mark.parametrize("name", ["prescaler", "keda-queue", "keda-queue-kv"])
def test_pruned_trials_could_not_have_won(name: str, tmp_path: Path) -> None:
    """The early-stop rules, measured per side: a small study with the pace
    rules, then every stopped trial run to the end without them. Each one
    either misses the target or costs at least the chosen setting, so the
    study with pruning chose what it would have chosen without."""
    _, base, space = next(s for s in _sides() if s[0] == name)
    w = synthetic_workload(duration_s=1800.0, base_rps=2.0, seed=5)
    config = SimConfig()
    target = 0.6
    ctx = TuneContext(
        w,
        PROFILE,
        config,
        base,
        target,
        space,
        max_replicas=10,
        seed=1,
        prune="pace",
    )
    result = run_study(ctx, storage=f"sqlite:///{tmp_path / 's.db'}", study_name="s", n_trials=8)
    assert result.best is not None
    stopped = [t for t in result.trials if not t.finished]
    assert stopped  # the rules acted: the check is not vacuous
    for t in stopped:
        full = score(apply_setting(base, t.metadata), w, PROFILE, config)
        could_win = full.attainment >= target and full.cost_usd < result.best.cost_usd
        assert not could_win, (t.number, t.stopped, full.attainment, full.cost_usd)
    assert all(math.isfinite(t.cost_usd) for t in result.trials if t.finished)


@pytest.mark.parametrize(
    ("written", "threshold", "step"),
    [("0.05", "4", 0.01), ("0.25", "3", 0.01), ("0.05", "0.5", 0.01), ("2", "3", 0.1)],
)
def test_a_written_activation_is_on_its_search_grid(
    written: str, threshold: str, step: float
) -> None:
    """At a floor of 0 the activation is searched on the threshold's grid,
    made finer where the written activation has more decimals, so the
    first trial is the ScaledObject as written."""
    doc = {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "z"},
        "spec": {"scaleTargetRef": {"name": "vllm"}, "minReplicaCount": 0,
                 "maxReplicaCount": 6, "triggers": [{"type": "prometheus", "metadata": {
                     "serverAddress": "http://p:9090", "query": "sum(vllm:num_requests_waiting)",
                     "threshold": threshold, "activationThreshold": written}}]},
    }  # fmt: skip
    so = parse_scaledobject(yaml.safe_dump(doc))
    act = next(p for p in keda_space(so, 6) if p.key == "triggers.0.activationThreshold")
    assert act.step == step
    k = (float(written) - act.low) / step
    assert abs(k - round(k)) < 1e-9
