"""The tune family's baseline sides asked for by name: queue + KV + a daily
cron window, and scale to zero on the gateway's request rate; side
selection and prescaler keys held fixed."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path

import optuna
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulations.autoscaling.cron import parse_cron
from simulations.autoscaling.scaledobject import ScaledObjectSpec, parse_scaledobject
from simulations.sim_inputs import SimInputs
from simulations.simulation import SimConfig
from simulations.traffic import Workload
from simulations.tune.manifest import (
    apply_setting,
    hpa_scale_down_s,
    knob_value,
    manifest_of,
    triggers_of,
)
from simulations.tune.request import tune_request
from simulations.tune.search import FORECAST_ONLY_KEYS, sample_metadata, score
from simulations.tune.seeding import seed_params
from simulations.tune.sides import DEFAULT_SIDES, SIDES, Side, WrittenCron, make_sides
from tests.support.synthetic_traffic import synthetic_workload
from tests.support.tuned_metadata import apply_metadata

PROFILE = "llama-3-8b@g5.xlarge"


def _sides(**kw: object) -> dict[str, Side]:
    request = tune_request(trace=None, profile=PROFILE, **kw)
    return {s.name: s for s in make_sides(request, PROFILE, 10)}


@functools.cache
def _all() -> dict[str, Side]:
    return _sides(sides=SIDES)


def test_the_default_family_is_unchanged_and_the_new_sides_come_by_name() -> None:
    assert tuple(_sides()) == tuple(n for n in DEFAULT_SIDES if n != "user")
    picked = _sides(sides=("keda-gateway", "prescaler"))
    assert set(picked) == {"prescaler", "keda-gateway"}
    with pytest.raises(ValueError, match=r"unknown side.*keda-http"):
        _sides(sides=("keda-http",))


@pytest.mark.parametrize(
    "name",
    [
        "keda-queue-kv-cron",
        "keda-gateway",
        "keda-gateway-cron",
        "prescaler-gateway",
        "prescaler-cron",
    ],
)
def test_the_first_trial_is_the_scaledobject_as_written(name: str) -> None:
    side = _all()[name]
    assert parse_scaledobject(yaml.safe_dump(dict(side.manifest))) == side.base
    knobs = {p.key: knob_value(side.manifest, p.key) for p in side.space if "." in p.key}
    seed = seed_params(side.base, side.space, 10, knobs)
    assert seed is not None
    study = optuna.create_study()
    study.enqueue_trial(seed)
    picked = sample_metadata(study.ask(), side.space, 10)
    assert apply_setting(side.base, picked, side.manifest) == _folded(side)


def _folded(side: Side) -> ScaledObjectSpec:
    """The side's base as its first trial runs it: beside prescaler's
    trigger, the trigger's scale-down window and the HPA's as written are
    one wait, the trigger's (the HPA's derived 0); a KEDA side's as written."""
    trig = side.base.prescaler_trigger
    if trig is None:
        return side.base
    wait = float(trig.metadata["scaleDownStabilizationSeconds"]) + hpa_scale_down_s(side.base)
    folded = apply_setting(side.base, {"scaleDownStabilizationSeconds": f"{wait:g}"}, side.manifest)
    assert hpa_scale_down_s(folded) == 0.0
    return folded


def _minute(expr: str) -> int:
    fields = expr.split()
    return int(fields[1]) * 60 + int(fields[0])


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**31 - 1))
def test_every_sampled_cron_window_is_a_valid_window_of_the_picked_length(seed: int) -> None:
    """Whatever the sampler picks, the ScaledObject parses (start never equals
    end, which KEDA refuses), the window opens at the picked minute, lasts
    the picked length (across midnight too) and holds the picked replicas."""
    side = _all()["keda-queue-kv-cron"]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    picked = sample_metadata(study.ask(), side.space, 10)
    so = apply_setting(side.base, picked, side.manifest)
    cron = next(t for t in triggers_of(so) if t.kind == "cron")
    start, end = cron.metadata["start"], cron.metadata["end"]
    parse_cron(start), parse_cron(end)
    assert _minute(start) == int(picked["triggers.2.startMinuteOfDay"])
    assert (_minute(end) - _minute(start)) % 1440 == int(picked["triggers.2.windowMinutes"])
    assert cron.metadata["desiredReplicas"] == picked["triggers.2.desiredReplicas"]
    assert so.keda.max_replica_count == 10


def test_the_cron_side_is_written_with_the_hours_it_is_told() -> None:
    """``cron_window`` is the window as written, and so the study's first
    trial: 8 replicas from 01:45 to 03:00 for a nightly job, across midnight
    too; a window that ends where it starts, or holds no replica, is
    refused."""
    told = WrittenCron(105, 180, replicas=8)
    side = _sides(sides=("keda-queue-kv-cron",), cron_window=told)["keda-queue-kv-cron"]
    cron = triggers_of(side.base)[2]
    assert (cron.metadata["start"], cron.metadata["end"]) == ("45 1 * * *", "0 3 * * *")
    assert cron.metadata["desiredReplicas"] == "8"
    knobs = {p.key: knob_value(side.manifest, p.key) for p in side.space if "." in p.key}
    seed = seed_params(side.base, side.space, 10, knobs)
    assert seed is not None
    assert [seed[f"triggers.2.{k}"] for k in ("startMinuteOfDay", "windowMinutes")] == [105, 75]
    assert seed["triggers.2.desiredReplicas"] == 8
    late = _sides(sides=("keda-queue-kv-cron",), cron_window=WrittenCron(1380, 1440))
    assert triggers_of(late["keda-queue-kv-cron"].base)[2].metadata["end"] == "0 0 * * *"
    with pytest.raises(ValueError, match=r"cron_window.*cannot end where it starts"):
        WrittenCron(0, 1440)
    with pytest.raises(ValueError, match=r"cron_window.*\[0, 1440\]"):
        WrittenCron(-15, 60)
    with pytest.raises(ValueError, match=r"cron_window: replicas must be >= 1"):
        WrittenCron(0, 60, replicas=0)


def test_a_tuned_cron_window_keeps_the_days_it_was_written_for() -> None:
    """A weekday window moved to 07:45 stays a weekday window."""
    side = _all()["keda-queue-kv-cron"]
    doc = dict(side.manifest)
    doc = yaml.safe_load(yaml.safe_dump(doc))
    doc["spec"]["triggers"][2]["metadata"]["start"] = "0 8 * * 1-5"
    doc["spec"]["triggers"][2]["metadata"]["end"] = "0 18 * * 1-5"
    base = parse_scaledobject(yaml.safe_dump(doc))
    picked = {"triggers.2.startMinuteOfDay": "465", "triggers.2.windowMinutes": "600"}
    cron = triggers_of(apply_setting(base, picked, doc))[2]
    assert (cron.metadata["start"], cron.metadata["end"]) == ("45 7 * * 1-5", "45 17 * * 1-5")


def test_the_gateway_side_scales_to_zero_and_searches_its_wake_up() -> None:
    side = _all()["keda-gateway"]
    assert side.base.keda.min_replica_count == 0
    assert "gateway_requests_total" in side.base.trigger.metadata["query"]
    keys = {p.key: p for p in side.space}
    assert keys["spec.minReplicaCount"].low == 0
    assert keys["triggers.0.activationThreshold"].when == ("spec.minReplicaCount", "0")


def _wakes(so: ScaledObjectSpec) -> float:
    """Attainment of ``so`` on 20 idle minutes, then 10 busy ones."""
    busy = synthetic_workload(duration_s=600.0, base_rps=0.8, seed=3)
    work = Workload(busy.arrival_s + 1200.0, busy.prompt_tokens, busy.output_tokens, "wake", 1800.0)
    return score(so, work, PROFILE, SimConfig()).attainment


def test_the_gateway_trigger_wakes_a_fleet_at_zero() -> None:
    """The first request after idle reaches the gateway, the gateway's
    count wakes the fleet: once a replica is up the requests are served."""
    side = _all()["keda-gateway"]
    assert _wakes(side.base) > 0.3


def test_the_keda_gateway_cron_side_holds_what_prescaler_cron_holds() -> None:
    """The KEDA set-up with prescaler-cron's information: the gateway's
    trigger (the wake-up), the queue and KV-cache triggers of the
    keda-queue-kv side, the same written window, all at a floor of 0 with
    the gateway's activation and each trigger's threshold searched."""
    told = WrittenCron(105, 180, replicas=6)
    sides = _sides(sides=("keda-gateway-cron", "keda-queue-kv", "keda-gateway"), cron_window=told)
    side = sides["keda-gateway-cron"]
    kinds = [(t.kind, t.metadata.get("query")) for t in triggers_of(side.base)]
    gateway = sides["keda-gateway"].base.trigger.metadata["query"]
    fleet = [t.metadata["query"] for t in triggers_of(sides["keda-queue-kv"].base)]
    assert kinds == [
        ("prometheus", gateway),
        ("prometheus", fleet[0]),
        ("prometheus", fleet[1]),
        ("cron", None),
    ]
    cron = triggers_of(side.base)[3]
    assert (cron.metadata["start"], cron.metadata["desiredReplicas"]) == ("45 1 * * *", "6")
    # the gateway wakes the fleet, the fleet's own triggers size it; the
    # sizing threshold of the keda-gateway side is inside the searched range
    wake = triggers_of(side.base)[0].threshold
    sizing = sides["keda-gateway"].base.trigger.threshold
    assert wake is not None and sizing is not None and wake == 8 * sizing
    assert side.base.keda.min_replica_count == 0
    keys = {p.key: p for p in side.space}
    assert keys["spec.minReplicaCount"].low == 0
    for i in range(3):
        assert f"triggers.{i}.threshold" in keys
        assert keys[f"triggers.{i}.activationThreshold"].when == ("spec.minReplicaCount", "0")
    assert {"triggers.3.startMinuteOfDay", "triggers.3.desiredReplicas"} <= set(keys)
    assert keys["spec.cooldownPeriod"].when == ("spec.minReplicaCount", "0")
    assert keys["triggers.0.threshold"].low <= sizing <= keys["triggers.0.threshold"].high


def test_the_keda_gateway_cron_side_wakes_a_fleet_at_zero() -> None:
    """At zero the fleet's own triggers have no series; the gateway's wakes it."""
    side = _all()["keda-gateway-cron"]
    outside = {"triggers.3.startMinuteOfDay": "600", "triggers.3.windowMinutes": "60"}
    assert _wakes(apply_setting(side.base, outside, side.manifest)) > 0.3


def test_the_keda_gateway_cron_fleet_goes_back_to_zero_once_idle() -> None:
    """The fleet's own triggers are active only while a request waits or
    runs (activation 0 written), so after ten busy minutes and an idle hour
    and a half the fleet is at zero (after ``cooldownPeriod``), where the
    same ScaledObject with a floor of one holds one."""
    side = _all()["keda-gateway-cron"]
    outside = {"triggers.3.startMinuteOfDay": "600", "triggers.3.windowMinutes": "60",
               "spec.cooldownPeriod": "60"}  # fmt: skip
    busy = synthetic_workload(duration_s=600.0, base_rps=0.8, seed=3)
    work = Workload(busy.arrival_s, busy.prompt_tokens, busy.output_tokens, "idle", 7200.0)
    for floor, left in (("0", 0.0), ("1", 1.0)):
        so = apply_setting(side.base, {**outside, "spec.minReplicaCount": floor}, side.manifest)
        result = score(so, work, PROFILE, SimConfig()).result
        assert result is not None
        timeline = result.timeline
        assert timeline["ready"][-1] == left and max(timeline["ready"]) >= 2


def test_a_written_window_above_the_bound_is_refused() -> None:
    with pytest.raises(ValueError, match=r"cron_window: 12 replicas is above maxReplicaCount 10"):
        _sides(sides=("keda-queue-kv-cron",), cron_window=WrittenCron(60, 120, replicas=12))


def test_the_prescaler_gateway_side_scales_to_zero_on_the_gateway_series() -> None:
    """prescaler's trigger with the keda-gateway side's series as its
    gatewayRateQuery, both floors at 0 and minReplicas searched from 0; the
    plain prescaler side keeps its floor of 1."""
    side = _all()["prescaler-gateway"]
    gateway = _all()["keda-gateway"].base.trigger.metadata["query"]
    settings = side.base.trigger.settings
    assert settings is not None and settings.gateway_rate_query == gateway
    assert (side.base.keda.min_replica_count, settings.min_replicas) == (0, 0)
    assert next(p for p in side.space if p.key == "minReplicas").low == 0
    assert next(p for p in _all()["prescaler"].space if p.key == "minReplicas").low == 1
    held = _sides(sides=("prescaler-gateway",), forecaster="off")["prescaler-gateway"]
    assert held.base.trigger.metadata["forecast"] == "off"
    assert "forecast" not in {p.key for p in held.space}


def test_the_prescaler_gateway_side_wakes_a_fleet_at_zero() -> None:
    """As the gateway trigger does: the gateway's rate reaches prescaler's
    tracker at zero replicas and wakes the fleet."""
    side = _all()["prescaler-gateway"]
    assert _wakes(side.base) > 0.3


@pytest.mark.parametrize("name", ["prescaler", "prescaler-gateway", "prescaler-cron"])
def test_keys_held_fixed_reach_every_trial(name: str) -> None:
    """What a trial runs is its setting applied to the side's manifest: a
    held ``forecast: off`` or ``prewarm`` must be there, not only in the
    parsed base (else a forecast-off study tunes the forecast on)."""
    fixed = (("prewarm", "false"),)
    side = _sides(sides=(name,), forecaster="off", prescaler_fixed=fixed)[name]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(5):
        setting = sample_metadata(study.ask(), side.space, 10)
        trig = apply_setting(side.base, setting, side.manifest).prescaler_trigger
        assert trig is not None
        meta = trig.metadata
        assert (meta["forecast"], meta["prewarm"]) == ("off", "false")
        assert "nodeLeadTimeSeconds" not in meta


def test_prescaler_keys_held_fixed_leave_the_space() -> None:
    side = _sides(forecaster="off", prescaler_fixed=(("prewarm", "false"),))["prescaler"]
    keys = {p.key for p in side.space}
    assert not keys & {"forecast", "prewarm", "nodeLeadTimeSeconds"}
    # what only the forecast reads is not searched beside a held forecast: off
    assert not keys & set(FORECAST_ONLY_KEYS)
    assert not set(side.base.trigger.metadata) & (set(FORECAST_ONLY_KEYS) - {"prewarm"})
    assert side.base.trigger.metadata["forecast"] == "off"
    assert side.base.trigger.metadata["prewarm"] == "false"
    on = _sides(prescaler_fixed=(("prewarm", "true"),))["prescaler"]
    node = next(p for p in on.space if p.key == "nodeLeadTimeSeconds")
    assert node.when is None  # its condition is held true: it is searched
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    assert "nodeLeadTimeSeconds" in sample_metadata(study.ask(), on.space, 10)
    assert manifest_of(on.base)["spec"]["triggers"][0]["metadata"]["prewarm"] == "true"


@pytest.mark.parametrize(
    ("preset", "floor"), [(None, 150), ("8b-uncached-image", 600), ("70b-uncached", 900)]
)
def test_both_prescaler_sides_search_a_fixed_lead_time_from_the_stated_cold_start(
    preset: str | None, floor: int
) -> None:
    """The cold start the run is told (``--lead-time-preset``, else the
    profile's) is the floor of a fixed lead time; the written wander (1800 s)
    is the floor of the searched one."""
    inputs = SimInputs(lead_time_preset=preset)
    sides = _sides(sides=("prescaler", "prescaler-gateway"), inputs=inputs)
    for side in sides.values():
        by_key = {p.key: p for p in side.space}
        assert by_key["leadTimeSeconds:fixed"].low == floor
        assert by_key["seasonalWanderSeconds"].low == 1800


def test_cooldown_is_searched_only_where_the_floor_can_be_zero() -> None:
    """KEDA's ``cooldownPeriod`` decides how long a scale-to-zero fleet's
    last replica outlives its last request: a knob for both scale-to-zero
    sides (at a floor of 0), for neither side that never reaches zero."""
    zero = {"keda-gateway": "spec.minReplicaCount", "prescaler-gateway": "minReplicas"}
    for name, floor in zero.items():
        side = _all()[name]
        cool = next(p for p in side.space if p.key == "spec.cooldownPeriod")
        assert cool.when == (floor, "0") and (cool.low, cool.high) == (30, 1800)
        so = apply_setting(side.base, {floor: "0", "spec.cooldownPeriod": "900"}, side.manifest)
        assert so.keda.cooldown_period_s == 900.0
    for name in ("keda-queue-kv", "prescaler"):
        assert "spec.cooldownPeriod" not in {p.key for p in _all()[name].space}


def test_the_prescaler_cron_side_is_prescaler_gateway_beside_the_written_window() -> None:
    """prescaler's trigger as on the prescaler-gateway side, the cron window
    written as the KEDA cron side's is (its hours and replicas the first
    trial's), and both searched in one study."""
    told = WrittenCron(105, 180, replicas=6)
    sides = _sides(sides=("prescaler-gateway", "prescaler-cron"), cron_window=told)
    side, gateway = sides["prescaler-cron"], sides["prescaler-gateway"]
    kinds = [t.kind for t in triggers_of(side.base)]
    assert kinds == ["prescaler", "cron"]
    assert side.base.trigger == gateway.base.trigger
    cron = triggers_of(side.base)[1]
    assert (cron.metadata["start"], cron.metadata["end"]) == ("45 1 * * *", "0 3 * * *")
    assert cron.metadata["desiredReplicas"] == "6"
    keys = [p.key for p in side.space]
    assert keys == [
        *(
            p.key
            for p in gateway.space
            if not p.key.startswith(("scaleUp.", "scaleDown.", "spec.p"))
        ),
        "triggers.1.startMinuteOfDay",
        "triggers.1.windowMinutes",
        "triggers.1.desiredReplicas",
        *(p.key for p in gateway.space if p.key.startswith(("spec.p", "scaleUp.", "scaleDown."))),
    ]
    knobs = {p.key: knob_value(side.manifest, p.key) for p in side.space if "." in p.key}
    seed = seed_params(side.base, side.space, 10, knobs)
    assert seed is not None
    assert (seed["triggers.1.startMinuteOfDay"], seed["triggers.1.desiredReplicas"]) == (105, 6)


def _cost(so: ScaledObjectSpec) -> float:
    idle = synthetic_workload(duration_s=1800.0, base_rps=0.01, seed=5)
    return score(so, idle, PROFILE, SimConfig()).cost_usd


def test_the_cron_window_beside_prescaler_holds_its_replicas() -> None:
    """The HPA takes the largest proposal: inside the window the fleet holds
    the window's replicas whatever prescaler's trigger asks, outside it
    prescaler's trigger alone decides (the run is 00:00 - 00:30)."""
    side = _all()["prescaler-cron"]
    outside = {"triggers.1.startMinuteOfDay": "600", "triggers.1.windowMinutes": "60"}
    inside = {"triggers.1.startMinuteOfDay": "0", "triggers.1.windowMinutes": "60"}
    for replicas, factor in (("3", 2.0), ("6", 4.0)):
        held = apply_setting(
            side.base, {**inside, "triggers.1.desiredReplicas": replicas}, side.manifest
        )
        free = apply_setting(
            side.base, {**outside, "triggers.1.desiredReplicas": replicas}, side.manifest
        )
        assert _cost(held) > factor * _cost(free)


def test_a_scaledobject_with_prescaler_beside_a_cron_trigger_is_the_prescaler_side(
    tmp_path: Path,
) -> None:
    """A team keeps its cron window and adds prescaler's trigger: its
    ScaledObject is tuned as one side, the window's knobs with prescaler's,
    whatever the order of its triggers (the cron trigger first here)."""
    doc = yaml.safe_load(yaml.safe_dump(manifest_of(_all()["prescaler"].base)))
    doc["spec"]["triggers"][0]["metadata"]["targetWaitingPerReplica"] = "7"
    doc["spec"]["triggers"].insert(
        0,
        {
            "type": "cron",
            "metadata": {"timezone": "UTC", "start": "30 8 * * *", "end": "0 18 * * *",
                         "desiredReplicas": "4"},
        },
    )  # fmt: skip
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    side = _sides(scaledobject=str(path), sides=("prescaler",))["prescaler"]
    assert [t.kind for t in triggers_of(side.base)] == ["cron", "prescaler"]
    keys = {p.key for p in side.space}
    assert {"targetWaitingPerReplica", "triggers.0.startMinuteOfDay"} <= keys
    assert "triggers.0.desiredReplicas" in keys
    knobs = {p.key: knob_value(side.manifest, p.key) for p in side.space if "." in p.key}
    seed = seed_params(side.base, side.space, 10, knobs)
    assert seed is not None
    assert seed["targetWaitingPerReplica"] == 7.0
    assert (seed["triggers.0.startMinuteOfDay"], seed["triggers.0.windowMinutes"]) == (510, 570)
    held = _sides(scaledobject=str(path), sides=("prescaler",), forecaster="off")["prescaler"]
    trig = held.base.prescaler_trigger
    assert trig is not None and trig.metadata["forecast"] == "off"
    picked = {"triggers.0.desiredReplicas": "5", "targetWaitingPerReplica": "9"}
    so = apply_setting(held.base, picked, held.manifest)
    assert triggers_of(so)[0].metadata["desiredReplicas"] == "5"
    mine = so.prescaler_trigger
    assert mine is not None
    assert (mine.metadata["targetWaitingPerReplica"], mine.metadata["forecast"]) == ("9", "off")


def test_a_window_below_what_prescaler_asks_changes_nothing() -> None:
    """The largest proposal wins the other way too: with prescaler's floor
    (and KEDA's) at 5 a 2-replica window inside the run costs what no
    window does. (At a KEDA floor of 0 the window's activity still wakes
    the fleet from zero at once.)"""
    side = _all()["prescaler-cron"]
    floor = {"minReplicas": "5", "spec.minReplicaCount": "5", "triggers.1.desiredReplicas": "2"}
    inside = {**floor, "triggers.1.startMinuteOfDay": "0", "triggers.1.windowMinutes": "60"}
    outside = {**floor, "triggers.1.startMinuteOfDay": "600", "triggers.1.windowMinutes": "60"}
    held = _cost(apply_setting(side.base, inside, side.manifest))
    assert held == pytest.approx(_cost(apply_setting(side.base, outside, side.manifest)))


def test_held_keys_give_the_base_they_gave_before_the_manifest_held_them() -> None:
    """The shipped prescaler side with keys held: its base parsed from the
    held manifest is the base with the keys applied to its metadata."""
    fixed = (("prewarm", "true"), ("forecast", "off"))
    side = _sides(prescaler_fixed=fixed)["prescaler"]
    plain = _sides()["prescaler"]
    assert side.base == apply_metadata(plain.base, dict(fixed))


def _with_triggers(tmp_path: Path, *extra: Mapping[str, object]) -> str:
    doc = yaml.safe_load(yaml.safe_dump(manifest_of(_all()["prescaler"].base)))
    doc["spec"]["triggers"].extend(extra)
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return str(path)


def test_a_prometheus_trigger_beside_prescaler_gets_its_threshold_searched(
    tmp_path: Path,
) -> None:
    queue = {
        "type": "prometheus",
        "metricType": "AverageValue",
        "metadata": {"serverAddress": "http://prom:9090", "threshold": "5",
                     "query": "sum(vllm:num_requests_waiting)"},
    }  # fmt: skip
    side = _sides(scaledobject=_with_triggers(tmp_path, queue))["prescaler"]
    threshold = next(p for p in side.space if p.key == "triggers.1.threshold")
    assert threshold.low < 5.0 < threshold.high
    so = apply_setting(side.base, {"triggers.1.threshold": "2.5"}, side.manifest)
    assert triggers_of(so)[1].threshold == 2.5


def test_the_prescaler_cron_side_keeps_the_users_own_window(tmp_path: Path) -> None:
    """A user's ScaledObject that has a window already is not given a second."""
    cron = {
        "type": "cron",
        "metadata": {"timezone": "UTC", "start": "0 2 * * *", "end": "0 3 * * *",
                     "desiredReplicas": "5"},
    }  # fmt: skip
    told = WrittenCron(525, 720, 4)
    picked = _sides(scaledobject=_with_triggers(tmp_path, cron), cron_window=told, sides=SIDES)
    side = picked["prescaler-cron"]
    windows = [t for t in triggers_of(side.base) if t.kind == "cron"]
    assert [w.metadata["start"] for w in windows] == ["0 2 * * *"]
    keys = [p.key for p in side.space if p.key.startswith("triggers.")]
    assert keys == ["triggers.1.startMinuteOfDay", "triggers.1.windowMinutes",
                    "triggers.1.desiredReplicas"]  # fmt: skip
