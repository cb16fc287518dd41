"""`prescaler tune`: the search space, the split, the reactive ladder, the CLI contract,
and the history each run's tracker starts with."""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from decision.settings import ScalerSettings, parse_settings
from simulations.backfill import DemandHistory
from simulations.simulation import SimConfig
from simulations.traffic import Workload
from simulations.tune.cli import EXIT_SLO_UNMET, main, request_from
from simulations.tune.search import (
    FORECAST_ONLY_KEYS,
    PREDICTIVE_SPACE,
    Param,
    default_bases,
    format_value,
    pareto_front,
    sample_metadata,
    score,
    split_workload,
)
from simulations.tune.seeding import seed_params
from simulations.tune.sides import WrittenCron
from simulations.tune.study import TuneContext, run_study
from simulations.tune.timing_floors import timing_floors
from tests.support.counts_trace import write_counts_trace
from tests.support.synthetic_traffic import synthetic_workload
from tests.support.tuned_metadata import apply_metadata

PROFILE = "llama-3-8b@g5.xlarge"
SUMMARY_KEYS = {"slo_attainment", "cost_usd", "cost_per_month_usd", "requests_total"}


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small per-minute counts trace (``minute_start_s,requests``): 20 minutes."""
    return write_counts_trace(tmp_path_factory.mktemp("trace"), 20, 1)


def test_every_sampled_setting_is_valid_trigger_metadata() -> None:
    """Whatever the sampler picks, the metadata parses with decision.settings'
    own parser (the live scaler's), values are plain decimal strings, a
    conditional key (nodeLeadTimeSeconds) appears only with prewarm on, and
    the forecast's own keys appear (searched or written) only with the
    forecast on: a block saying ``forecast: off`` holds nothing it ignores."""
    base, _ = default_bases(PROFILE, 10)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(60):
        trial = study.ask()
        meta = sample_metadata(trial, PREDICTIVE_SPACE, 10)
        so = apply_metadata(base, meta)
        settings_ = parse_settings(so.trigger.metadata)
        assert settings_.min_replicas <= settings_.max_replicas
        assert all(re.fullmatch(r"[0-9]+(\.[0-9]+)?|auto|off|true|false", v) for v in meta.values())
        if meta["forecast"] == "off":
            assert not set(meta) & set(FORECAST_ONLY_KEYS)
            assert not set(so.trigger.metadata) & set(FORECAST_ONLY_KEYS)
        elif meta["prewarm"] == "false":
            assert "nodeLeadTimeSeconds" not in so.trigger.metadata
        else:
            assert "nodeLeadTimeSeconds" in meta
        study.tell(trial, 1.0)


def _by_key(space: tuple[Param, ...]) -> dict[str, Param]:
    return {p.key: p for p in space}


def _written(**keys: str) -> ScalerSettings:
    """The shipped trigger's settings with ``keys`` written over it."""
    base, _ = default_bases(PROFILE, 10)
    return parse_settings({**base.trigger.metadata, **keys})


def test_timing_is_searched_only_wider_than_written() -> None:
    """The wander from the trigger's own (default 1800 s), a fixed lead time
    from the fleet's stated cold start, up to twice it; the other keys as
    they were."""
    floored = _by_key(timing_floors(PREDICTIVE_SPACE, _written(), 900.0))
    wander, lead = floored["seasonalWanderSeconds"], floored["leadTimeSeconds:fixed"]
    assert (wander.low, wander.high) == (1800, 3600)
    assert (lead.low, lead.high) == (900, 1800)
    timing = ("seasonalWanderSeconds", "leadTimeSeconds:fixed")
    for key, param in _by_key(PREDICTIVE_SPACE).items():
        if key not in timing:
            assert floored[key] == param
    short = _by_key(timing_floors(PREDICTIVE_SPACE, _written(), 150.0))["leadTimeSeconds:fixed"]
    assert (short.low, short.high) == (150, 900)  # the shipped top still reached


@pytest.mark.parametrize(
    ("written", "wander", "lead"),
    [
        ({"seasonalWanderSeconds": "600"}, (600, 3600), (150, 900)),
        ({"seasonalWanderSeconds": "1000"}, (1000, 3400), (150, 900)),  # the grid from 1000
        ({"seasonalWanderSeconds": "0"}, (0, 3600), (150, 900)),
        ({"seasonalWanderSeconds": "3600"}, None, (150, 900)),  # held as written
        ({"leadTimeSeconds": "400"}, (1800, 3600), (400, 895)),
        ({"leadTimeSeconds": "120"}, (1800, 3600), (120, 900)),  # written below the start
        ({"leadTimeSeconds": "auto"}, (1800, 3600), (150, 900)),
        ({"leadTimeSeconds": "86400"}, (1800, 3600), None),  # the parser's top: held
    ],
)
def test_the_floors_follow_what_the_trigger_says(
    written: dict[str, str],
    wander: tuple[float, float] | None,
    lead: tuple[float, float] | None,
) -> None:
    floored = _by_key(timing_floors(PREDICTIVE_SPACE, _written(**written), 150.0))
    got = floored.get("seasonalWanderSeconds")
    assert (None if got is None else (got.low, got.high)) == wander
    fixed = floored.get("leadTimeSeconds:fixed")
    assert (None if fixed is None else (fixed.low, fixed.high)) == lead
    # the mode is searched exactly when a fixed value is there to pick
    assert ("leadTimeSeconds" in floored) == (fixed is not None)


@pytest.mark.parametrize(
    "written",
    [
        {"seasonalWanderSeconds": "1000", "leadTimeSeconds": "400"},
        {"seasonalWanderSeconds": "2700", "leadTimeSeconds": "120"},
        {"seasonalWanderSeconds": "1800", "leadTimeSeconds": "auto"},
    ],
)
def test_the_trigger_as_written_is_the_first_trial(written: dict[str, str]) -> None:
    """The floored grid starts at the written value, so the study's first
    trial reproduces the trigger as written rather than leaving its timing
    to the sampler."""
    base, _ = default_bases(PROFILE, 10)
    base = apply_metadata(base, written)
    space = timing_floors(PREDICTIVE_SPACE, parse_settings(base.trigger.metadata), 150.0)
    seed = seed_params(base, space, 10)
    assert seed is not None
    assert seed["seasonalWanderSeconds"] == int(written["seasonalWanderSeconds"])
    if written["leadTimeSeconds"] == "auto":
        assert seed["leadTimeSeconds"] == "auto"
    else:
        assert seed["leadTimeSeconds"] == "fixed"
        assert seed["leadTimeSeconds:fixed"] == int(written["leadTimeSeconds"])


@settings(max_examples=25, deadline=None)
@given(
    wander=st.integers(0, 4000),
    lead=st.one_of(st.just("auto"), st.integers(0, 2000).map(str)),
    start=st.floats(30.0, 2000.0, allow_nan=False),
    seed=st.integers(0, 2**16),
)
def test_no_sampled_setting_narrows_the_timing(
    wander: int, lead: str, start: float, seed: int
) -> None:
    """Whatever the sampler picks from the floored space, the wander is at
    least the written one and a fixed lead time at least the written one,
    or with ``auto`` the cold start."""
    base, _ = default_bases(PROFILE, 10)
    written = {**base.trigger.metadata, "seasonalWanderSeconds": str(wander)}
    written["leadTimeSeconds"] = lead
    space = timing_floors(PREDICTIVE_SPACE, parse_settings(written), start)
    floor = start if lead == "auto" else float(lead)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    for _ in range(5):
        trial = study.ask()
        settings_ = parse_settings(apply_metadata(base, {**written, **sample_metadata(
            trial, space, 10)}).trigger.metadata)  # fmt: skip
        assert settings_.seasonal_wander_seconds >= wander
        if settings_.lead_time_seconds is not None:
            assert settings_.lead_time_seconds >= floor
        study.tell(trial, 1.0)


def test_apply_metadata_keeps_the_users_other_keys() -> None:
    """--scaledobject: keys not searched (data source, selector, fallback) stay
    as the user wrote them; fallbackReplicas is raised to a higher floor, since
    decision.settings refuses a fallback outside [minReplicas, maxReplicas]."""
    base, _ = default_bases(PROFILE, 10)
    meta = dict(base.trigger.metadata)
    assert meta["fallbackReplicas"] == "4"
    so = apply_metadata(base, {"minReplicas": "6", "targetWaitingPerReplica": "2.5"})
    out = so.trigger.metadata
    assert out["prometheusAddress"] == meta["prometheusAddress"]
    assert out["fallbackAfterSeconds"] == meta["fallbackAfterSeconds"]
    assert out["fallbackReplicas"] == "6" and out["minReplicas"] == "6"
    assert so.trigger.settings is not None and so.trigger.settings.target_waiting_per_replica == 2.5


@pytest.mark.parametrize(
    ("value", "text"), [(3, "3"), (3.0, "3"), (0.85, "0.85"), (0.1 + 0.2, "0.3"), ("auto", "auto")]
)
def test_format_value_writes_what_a_person_would(value: float | str, text: str) -> None:
    """Metadata values are pasted by people: no float noise, no exponent."""
    assert format_value(value) == text


@settings(max_examples=60, deadline=None)
@given(
    times=st.lists(st.floats(0, 999.9, allow_nan=False), min_size=0, max_size=80),
    holdout=st.one_of(st.just(0.0), st.floats(0.01, 0.9)),
)
def test_split_keeps_every_request_once(times: list[float], holdout: float) -> None:
    """Out of sample: every request lands in exactly one part, the held-back
    part is the end of the span shifted to start at 0, durations add up."""
    arr = np.sort(np.array(times, dtype=np.float64))
    n = arr.size
    w = Workload(arr, np.ones(n, np.int64), np.ones(n, np.int64), "t", 1000.0)
    first, rest = split_workload(w, holdout)
    if holdout == 0.0:
        assert rest is None and first is w
        return
    assert rest is not None
    assert len(first) + len(rest) == n
    assert math.isclose(first.duration_s + rest.duration_s, 1000.0)
    np.testing.assert_allclose(
        np.concatenate([first.arrival_s, rest.arrival_s + first.duration_s]), arr
    )


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 100, allow_nan=False), st.floats(0, 1)), min_size=0, max_size=40
    )
)
def test_pareto_front_is_undominated(points: list[tuple[float, float]]) -> None:
    """Every front point is beaten by no point on both cost and attainment, and
    every point off the front is dominated by (or equal to) one on it."""
    front = pareto_front(points)
    on = set(front)
    for i in front:
        ci, ai = points[i]
        assert not any(c <= ci and a >= ai and (c, a) != (ci, ai) for c, a in points)
    for j, (cj, aj) in enumerate(points):
        if j not in on:
            assert any(points[i][0] <= cj and points[i][1] >= aj for i in front)


def _tune(trace: Path, tmp_path: Path, *extra: str) -> tuple[int, Path]:
    out = tmp_path / "tune.json"
    argv = [
        str(trace), "--duration", "1200", "--trials", "3", "--quiet", "--target", "0.8",
        "--holdout-seeds", "1",
        "--storage", f"sqlite:///{tmp_path / 'study.db'}", "--json", str(out), *extra,
    ]  # fmt: skip
    return main(argv), out


def test_tune_writes_the_contract_json_and_metadata_that_parses(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """tune --json: the published keys first, then the frontier ones, strict
    JSON; SUMMARY is one policy's `simulate --json` entry on each part; the
    printed ScaledObject carries the JSON's metadata, decision.settings
    parses it, and its minReplicaCount is the trigger's minReplicas."""
    png = tmp_path / "frontier.png"
    code, out = _tune(
        trace, tmp_path, "--plot", str(png), "--target", "0.3", "--margin", "1",
        "--holdout-seeds", "3",
    )  # fmt: skip
    assert code == 0
    text = capsys.readouterr().out
    doc = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"non-strict {c}"))
    assert list(doc) == [
        "trace", "slo_ttft_s", "target", "trials", "predictive", "reactive", "target_attainment",
        "frontier", "baselines", "cost_ratio_at_target", "sides", "warnings", "selection_margin",
        "hindsight", "verdict",
    ]  # fmt: skip
    verdict = doc["verdict"]
    assert list(verdict) == [
        "text", "chosen_cost_ratio", "static_floor", "static_sides", "ratio_side",
    ]  # fmt: skip
    assert verdict["text"] in text  # the headline printed is the one written
    # the bound on the held-back part: it meets that part's target, and each
    # side's held-back cost is given as a multiple of it
    bound = doc["hindsight"]
    assert bound["stated_lead"]["met"] and bound["target"] == 0.3
    assert bound["stated_lead"]["slo_attainment"] >= doc["target_attainment"]["holdout"]
    assert bound["instant_start"]["cost_usd"] <= bound["stated_lead"]["cost_usd"]
    for entry in doc["sides"].values():
        if entry["holdout"] is not None:
            ratio = entry["holdout"]["cost_usd"] / bound["stated_lead"]["cost_usd"]
            assert entry["holdout_multiple_of_hindsight"] == pytest.approx(ratio, abs=1e-4)
    assert "where the cost goes" in text
    assert list(doc["predictive"]) == ["metadata", "tuned", "holdout"]
    assert list(doc["reactive"]) == ["threshold", "tuned", "holdout"]
    assert doc["trials"] == 3 and doc["target"] == 0.3 and doc["slo_ttft_s"] == 1.0
    reached = doc["target_attainment"]
    assert list(reached) == ["tuned", "holdout"] and all(0.0 < v <= 0.3 for v in reached.values())
    for part in ("tuned", "holdout"):
        for policy in ("predictive", "reactive"):
            assert set(doc[policy][part]) >= SUMMARY_KEYS
    sides = {"prescaler", "keda-queue", "keda-queue-kv"}
    assert set(doc["frontier"]) == set(doc["baselines"]) == set(doc["sides"]) == sides
    # chosen with a margin of 1 point on the tuning part, held back under 3 arrival seeds
    assert doc["selection_margin"] == 1.0
    for side, entry in doc["sides"].items():
        if entry["chosen_trial"] is None:
            continue
        assert entry["tuned"]["slo_attainment"] >= reached["tuned"] + 0.01, side
        seeds = entry["holdout_seeds"]
        assert [s["seed"] for s in seeds] == [0, 1, 2], side
        assert seeds[0]["slo_attainment"] == entry["holdout"]["slo_attainment"]
        assert all(s["meets"] == (s["slo_attainment"] >= reached["holdout"]) for s in seeds)
    for side, points in doc["frontier"].items():
        costs = [p["cost_usd"] for p in points]
        assert costs == sorted(costs), side  # a frontier: cost rises with attainment
        atts = [p["slo_attainment"] for p in points]
        assert atts == sorted(atts), side
    meta = doc["predictive"]["metadata"]
    parse_settings(meta)
    start = text.index("apiVersion:")
    pasted = yaml.safe_load(text[start : text.index("\n\n", start)])
    trigger = pasted["spec"]["triggers"][0]
    assert trigger["metadata"] == meta
    assert pasted["spec"]["minReplicaCount"] == int(meta["minReplicas"])
    assert png.stat().st_size > 0 and (tmp_path / "frontier-trials.png").stat().st_size > 0


def test_a_killed_or_repeated_run_resumes_the_study(trace: Path, tmp_path: Path) -> None:
    """The study lives in the RDB storage: running the same command again with
    more trials adds to the finished ones instead of starting over (optuna
    RDBStorage commits each trial as it ends): each side's first trial is the
    very one the first run finished (same parameters, same finishing time)."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"

    def finished() -> dict[str, list[tuple[int, dict[str, Any], object]]]:
        return {
            s.study_name: [
                (t.number, t.params, t.datetime_complete)
                for t in optuna.load_study(study_name=s.study_name, storage=storage).trials
            ]
            for s in optuna.get_all_study_summaries(storage)
        }

    code, out = _tune(trace, tmp_path, "--trials", "1", "--target", "0.3")
    assert code == 0 and json.loads(out.read_text())["trials"] == 1
    first = finished()
    code, out = _tune(trace, tmp_path, "--trials", "2", "--target", "0.3")
    assert code == 0 and json.loads(out.read_text())["trials"] == 2
    resumed = finished()
    # one study per side (prescaler, keda-queue, keda-queue-kv), each resumed to 2 trials
    assert len(first) == 3 and set(resumed) == set(first)
    for name, trials in resumed.items():
        assert len(trials) == 2 and trials[:1] == first[name], name


def test_a_study_for_another_trace_is_refused(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A named study started with other flags would mix incomparable trials:
    a one-line error (exit 2), not a silent mix."""
    assert _tune(trace, tmp_path, "--trials", "1", "--study", "s")[0] in (0, EXIT_SLO_UNMET)
    code, _ = _tune(trace, tmp_path, "--trials", "1", "--study", "s", "--slo-ttft", "2")
    assert code == 2
    assert "started for another trace" in capsys.readouterr().err


def test_an_slo_no_setting_meets_gets_the_best_reached(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fleet capped at one replica cannot serve 20x the load: the answer says
    so with the best attainment reached and its cost (exit 3), writes no JSON,
    picks nothing silently, and still prints the frontier and writes the plot."""
    so = tmp_path / "so.yaml"
    so.write_text(
        "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: mine}\n"
        "spec:\n  scaleTargetRef: {name: vllm}\n  minReplicaCount: 1\n  maxReplicaCount: 1\n"
        "  triggers:\n  - type: external\n    metadata:\n"
        "      prometheusAddress: http://prom:9090\n      profile: llama-3-8b@g5.xlarge\n"
        "      minReplicas: '1'\n      maxReplicas: '1'\n"
    )
    code, out = _tune(
        trace, tmp_path, "--scaledobject", str(so), "--rate-scale", "20", "--target", "0.99",
        "--plot", str(tmp_path / "f.png"),
    )  # fmt: skip
    assert code == EXIT_SLO_UNMET
    text = capsys.readouterr().out
    assert "no setting met the tuning part's target" in text
    assert "best attainment reached" in text or "stopped early" in text
    assert "held-back frontier" in text and "as written" in text
    assert not out.exists()
    assert (tmp_path / "f.png").stat().st_size > 0


@pytest.mark.parametrize(
    "argv",
    [
        ["--target", "1.5"],
        ["--target", "nan"],
        ["--holdout", "0.95"],
        ["--trials", "0"],
        ["--trial-grace", "5"],  # a heartbeat of a second needs six of grace
        ["--static-replicas", "3"],
    ],
)
def test_bad_flags_are_usage_errors(trace: Path, argv: list[str]) -> None:
    """Flags are checked at the edge: exit 2, never a traceback."""
    try:
        code = main([str(trace), *argv])
    except SystemExit as exc:  # argparse's own usage error
        code = int(exc.code or 0)
    assert code == 2


def test_a_history_too_short_for_the_protocol_is_refused_in_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ten minutes held back 30 % leaves 3 minutes: less than one scale-in
    decision (the 300-s windows), so the held-back score would say nothing.
    Exit 2 before any trial, naming the part, its span and the minimum."""
    trace = _step_trace(tmp_path / "short.csv", 10, 10, 60, 60)
    code = main([str(trace), "--quiet", "--storage", f"sqlite:///{tmp_path / 's.db'}"])
    assert code == 2
    err = capsys.readouterr().err
    assert "held-back part spans 3.0 minutes" in err and "at least 5 minutes" in err
    assert not (tmp_path / "s.db").exists()


def _tune_mine(trace: Path, tmp_path: Path, keys: str, before: str = "") -> tuple[int, Path]:
    """``tune --scaledobject`` (2 trials, target 0.5) on a ScaledObject of
    "mine" with prescaler's trigger (``keys`` added to its metadata) after
    the triggers ``before``."""
    so = tmp_path / "so.yaml"
    so.write_text(
        "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: mine}\n"
        "spec:\n  scaleTargetRef: {name: vllm}\n  minReplicaCount: 1\n  maxReplicaCount: 6\n"
        f"  triggers:\n{before}  - type: external\n    metadata:\n"
        "      prometheusAddress: http://prom:9090\n      profile: llama-3-8b@g5.xlarge\n"
        f"      model: my-model\n{keys}      maxReplicas: '6'\n"
    )
    return _tune(trace, tmp_path, "--scaledobject", str(so), "--trials", "2", "--target", "0.5")


def test_tune_from_the_users_scaledobject_keeps_its_other_keys(trace: Path, tmp_path: Path) -> None:
    """--scaledobject: the pasted block is the user's trigger metadata with
    only searched keys changed (model, fallbackAfterSeconds, maxReplicas kept)."""
    code, out = _tune_mine(trace, tmp_path, "      fallbackAfterSeconds: '240'\n")
    assert code == 0
    meta = json.loads(out.read_text())["predictive"]["metadata"]
    assert meta["model"] == "my-model" and meta["fallbackAfterSeconds"] == "240"
    assert meta["maxReplicas"] == "6" and meta["prometheusAddress"] == "http://prom:9090"
    assert int(meta["minReplicas"]) <= 6


def test_tune_keeps_a_cron_trigger_beside_prescalers(trace: Path, tmp_path: Path) -> None:
    """--scaledobject with a cron window before prescaler's trigger: one
    side, the printed manifest keeps both triggers in the user's order, the
    window's knobs tuned with prescaler's metadata."""
    cron = (
        "  - type: cron\n    metadata:\n      timezone: UTC\n"
        "      start: '0 8 * * *'\n      end: '0 18 * * *'\n      desiredReplicas: '2'\n"
    )
    code, out = _tune_mine(trace, tmp_path, "", before=cron)
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["predictive"]["metadata"]["model"] == "my-model"
    side = doc["sides"]["prescaler"]
    assert set(side["setting"]) >= {"triggers.0.startMinuteOfDay", "triggers.0.desiredReplicas"}
    triggers = side["manifest"]["spec"]["triggers"]
    assert [t["type"] for t in triggers] == ["cron", "external"]
    assert (
        triggers[0]["metadata"]["desiredReplicas"] == side["setting"]["triggers.0.desiredReplicas"]
    )


def test_tune_adds_the_sides_it_is_told_with_the_window_it_is_told(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--add-sides: each named side tuned beside the default family, in the
    JSON with its study and its tuned manifest (the window in it); the
    prescaler side beside the window gets the paste fields the prescaler
    side gets."""
    code, out = _tune(
        trace, tmp_path, "--add-sides", "keda-gateway-cron,prescaler-cron",
        "--cron-window", "00:05-00:40/3", "--trials", "2", "--target", "0.5",
        "--model", "my-model",
    )  # fmt: skip
    assert code == 0
    sides = json.loads(out.read_text())["sides"]
    assert set(sides) == {
        "prescaler", "keda-queue", "keda-queue-kv", "keda-gateway-cron", "prescaler-cron",
    }  # fmt: skip
    for name, at in (("keda-gateway-cron", 3), ("prescaler-cron", 1)):
        assert sides[name]["trials"] == 2
        assert sides[name]["manifest"]["spec"]["triggers"][at]["type"] == "cron"
    printed = capsys.readouterr().out
    pasted = printed.split("paste: the tuned prescaler-cron ScaledObject")[1].split("paste: ")[0]
    assert 'model: "my-model"' in pasted
    # both read the simulator's gateway counter: the block says to write the user's
    for name in ("prescaler-cron", "keda-gateway-cron"):
        block = printed.split(f"paste: the tuned {name} ScaledObject")[1].split("paste: ")[0]
        assert "still to set: the gateway's request rate" in block
    keda = printed.split("paste: the tuned keda-gateway-cron ScaledObject")[1].split("\n")[0]
    assert "minReplicas" not in keda  # a KEDA side has no trigger floor to agree with


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--add-sides", "keda-http"], "unknown side(s) keda-http"),
        (["--add-sides", "prescaler"], "prescaler already tuned by default"),
        (["--cron-window", "08:00"], "want START-END[/REPLICAS]"),
        (["--cron-window", "25:00-03:00"], "'25:00' in '25:00-03:00' is not a time of day"),
        (["--cron-window", "08:00-08:00"], "cannot end where it starts"),
        (["--cron-window", "08:00-18:00/0"], "replicas must be >= 1"),
        (["--cron-window", "08:00-18:00/two"], "replicas must be a whole number"),
    ],
)
def test_bad_sides_and_windows_are_usage_errors_that_name_the_flag(
    trace: Path, argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main([str(trace), *argv])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {argv[0]}" in err and says in err


def test_a_written_window_reaches_the_request() -> None:
    """07:45 - 17:30 with 2 replicas is minutes 465 - 1050; the replicas
    default to the shipped 2; a window may end at 24:00 (minute 1440)."""
    from simulations.tune.cli import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["tune", "t.csv", "--cron-window", "07:45-17:30",
                              "--add-sides", "prescaler-cron"])  # fmt: skip
    request = request_from(args)
    assert request.choice.cron_window == WrittenCron(465, 1050, 2)
    args = parser.parse_args(["tune", "t.csv", "--cron-window", "22:00-24:00/4",
                              "--add-sides", "keda-gateway-cron"])  # fmt: skip
    request = request_from(args)
    assert request.choice.cron_window == WrittenCron(1320, 1440, 4)
    assert request.choice.sides[-1] == "keda-gateway-cron" and "prescaler" in request.choice.sides
    assert request_from(parser.parse_args(["tune", "t.csv"])).choice.sides == ()


def test_a_window_without_a_cron_side_is_refused_in_words(
    trace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--cron-window writes only the cron sides': given none, it would be
    silently ignored, so the command stops (exit 2) and says which to add."""
    code = main([str(trace), "--cron-window", "08:00-18:00", "--add-sides", "keda-gateway"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--cron-window writes the window of keda-queue-kv-cron" in err and "--add-sides" in err


def test_tune_is_a_prescaler_subcommand() -> None:
    """`prescaler tune` is registered with the top-level CLI."""
    from prescaler.cli import main as prescaler_main

    with pytest.raises(SystemExit) as exc:
        prescaler_main(["tune", "--help"])
    assert exc.value.code == 0


def _step_trace(path: Path, minutes: int, high_until: int, high: int, low: int) -> Path:
    """Per-minute counts: ``high`` requests a minute before ``high_until``, ``low`` after."""
    rows = [f"{60 * i},{high if i < high_until else low}" for i in range(minutes)]
    path.write_text("minute_start_s,requests\n" + "\n".join(rows) + "\n")
    return path


def _pair(trace: Path, tmp_path: Path, *extra: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tune JSON with the default backfill and with ``--no-backfill``."""
    docs = []
    for name, flags in (("warm", ()), ("cold", ("--no-backfill",))):
        out = tmp_path / f"{name}.json"
        argv = [
            str(trace), "--trials", "1", "--quiet", "--target", "0.5", "--json", str(out),
            "--holdout-seeds", "1",
            "--prune", "exact",
            "--storage", f"sqlite:///{tmp_path / (name + '.db')}", *extra, *flags,
        ]  # fmt: skip
        assert main(argv) == 0
        docs.append(json.loads(out.read_text()))
    return docs[0], docs[1]


def test_the_held_back_run_starts_with_the_tuning_parts_demand(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The live scaler backfills its tracker from Prometheus (the last hours
    of demand) before it answers, so the held-back part, which follows the
    tuning part in the trace, starts with the tuning part's demand as
    history, as `prescaler simulate --start` gives a window the trace before
    it. Demand 4 req/s for 14 minutes, then 0.5 req/s for the 6 held back:
    both parts open with the fleet the minutes before them needed (one
    replica at the trace's start, five after the busy part), with or
    without the backfill. The tuning part (at the trace's start: no history)
    and the reactive trigger (no tracker) are the same run either way; what
    the held-back history holds is checked in tests/simulations/tune/test_inputs.py."""
    trace = _step_trace(tmp_path / "step.csv", 20, 14, 240, 30)
    warm, cold = _pair(trace, tmp_path)
    text = capsys.readouterr().out
    assert "tracker history: none before the tuning part, 0.23 h before the held-back" in text
    assert "(--no-backfill)" in text.split("tracker history:")[2]
    assert warm["predictive"]["tuned"]["cost_usd"] == cold["predictive"]["tuned"]["cost_usd"]
    assert warm["reactive"]["holdout"]["cost_usd"] == cold["reactive"]["holdout"]["cost_usd"]
    p_warm, p_cold = warm["predictive"]["holdout"], cold["predictive"]["holdout"]
    assert p_warm["requests_total"] == p_cold["requests_total"] > 0
    assert "replicas as each opens: 1 (tuning part), 5 (held-back part)" in text


def test_a_start_inside_the_trace_gives_the_tuning_part_its_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--start` cuts the tuning part from inside the trace: as in `prescaler
    simulate`, the trials and the chosen setting's re-run start with the
    trace before it as history (unless `--no-backfill`), and open with the
    fleet the busy minutes before it needed (4 req/s: six replicas), with
    or without the history. The two studies differ in their fingerprint, so
    they never mix trials."""
    trace = _step_trace(tmp_path / "step.csv", 20, 10, 240, 30)
    warm, cold = _pair(trace, tmp_path, "--start", "600", "--holdout", "0")
    text = capsys.readouterr().out
    assert "tracker history: 0.17 h before the tuning part, - before the held-back" in text
    assert "replicas as each opens: 6 (tuning part), - (held-back part)" in text
    p_warm, p_cold = warm["predictive"]["tuned"], cold["predictive"]["tuned"]
    assert p_warm["requests_total"] == p_cold["requests_total"] > 0
    names = {
        s.study_name
        for db in ("warm", "cold")
        for s in optuna.get_all_study_summaries(f"sqlite:///{tmp_path / (db + '.db')}")
        if s.study_name.startswith("prescaler-tune-prescaler-")
    }
    assert len(names) == 2


def test_every_trial_runs_with_the_contexts_history(tmp_path: Path) -> None:
    """`TuneContext.history` reaches each trial's tracker (the live scaler's
    backfill, simulations.backfill): the study's first trial, the base
    settings, run on a quiet window after two busy hours of history, keeps
    a larger fleet and costs more than the same trial with no history."""
    w = synthetic_workload(duration_s=600.0, base_rps=0.5, seed=3)
    times = -15.0 * np.arange(479, -1, -1)
    busy = DemandHistory(times, np.full(480, 4.0), np.full(480, 4.0 * 1280.0))
    base, _ = default_bases(PROFILE, 8)
    costs = []
    for name, history in (("warm", busy), ("cold", None)):
        ctx = TuneContext(w, PROFILE, SimConfig(), base, 0.5, max_replicas=8, history=history)
        result = run_study(
            ctx, storage=f"sqlite:///{tmp_path / (name + '.db')}", study_name=name, n_trials=1
        )
        assert len(result.trials) == 1 and result.trials[0].finished
        costs.append(result.trials[0].cost_usd)
    assert costs[0] > costs[1]


def test_a_forecaster_reaches_every_runs_tracker() -> None:
    """``TuneContext.forecaster`` (a statsforecast baseline the live trigger
    does not offer) is what a run's tracker forecasts with: a name no
    forecaster has fails in that run, naming it; the context refuses a
    method the trigger's own ``forecast:`` key would hold."""
    w = synthetic_workload(duration_s=600.0, base_rps=0.5, seed=3)
    times = -15.0 * np.arange(479, -1, -1)
    busy = DemandHistory(times, np.full(480, 4.0), np.full(480, 4.0 * 1280.0))
    base, _ = default_bases(PROFILE, 8)
    with pytest.raises(ValueError, match="unknown forecast method 'sf_nope'"):
        score(base, w, PROFILE, SimConfig(), history=busy, forecaster="sf_nope")
    with pytest.raises(ValueError, match=r"forecaster is one of sf_autoets.*'seasonal_naive'"):
        TuneContext(w, PROFILE, SimConfig(), base, 0.5, forecaster="seasonal_naive")
    assert TuneContext(w, PROFILE, SimConfig(), base, 0.5, forecaster="sf_mstl").forecaster


# optuna warns when two study workers write one trial's constraint (the same
# value); the study's --jobs path is not what this test checks
@pytest.mark.filterwarnings("ignore:The constraint value is ignored")
def test_the_bound_pair_in_two_processes_is_the_bound_in_one(trace: Path, tmp_path: Path) -> None:
    """With --jobs 2 the two hindsight bounds (stated lead, instant start) run
    in two processes: the same figures as one process computing both."""
    docs = []
    for jobs in ("1", "2"):
        where = tmp_path / f"jobs{jobs}"
        where.mkdir()
        # a low target, so some trial meets it whatever the two workers draw
        code, out = _tune(trace, where, "--sides", "keda-queue", "--jobs", jobs, "--target", "0.3")
        assert code == 0
        bound = json.loads(out.read_text())["hindsight"]
        bound.pop("terms", None)  # the chosen trial's waterfall: the workers' draws differ
        docs.append(bound)
    assert docs[0] == docs[1]
    assert docs[0]["stated_lead"]["cost_usd"] > 0
