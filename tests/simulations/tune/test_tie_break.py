"""Which trial a study chooses when several cost the same, what the threshold
ranges allow on a fraction metric, and that pods started together on one
study draw different settings."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import optuna
import pytest

from simulations.autoscaling.scaledobject import seeds_reactive
from simulations.cli import UsageError
from simulations.tune.cli import main, register, request_from
from simulations.tune.manifest import keda_space, metric_ceiling, triggers_of
from simulations.tune.request import ReplaySpec, SideChoice, StudySpec, TuneRequest
from simulations.tune.search import PREDICTIVE_SPACE, Param
from simulations.tune.sides import SIDES, make_sides
from simulations.tune.study import process_indices, read_study, worker_seed
from simulations.tune.tie_break import TIE_RTOL

PROFILE = "llama-3-8b@g5.xlarge"
QUEUE_SPACE = keda_space(seeds_reactive(max_replicas=8), 8)


def _study(trials: list[tuple[dict[str, str], float, bool]]) -> Any:
    """An in-memory study holding finished trials (metadata, cost, feasible)."""
    study = optuna.create_study(direction="minimize")
    for meta, cost, feasible in trials:
        attrs = {
            "metadata": meta, "attainment": 0.99 if feasible else 0.5, "finished": True,
            "constraint": -0.01 if feasible else 0.4, "cost_usd": cost,
        }  # fmt: skip
        study.add_trial(
            optuna.trial.create_trial(value=cost, user_attrs=attrs, params={}, distributions={})
        )
    return study


def _queue(threshold: str, window: str = "0", polling: str = "30") -> dict[str, str]:
    return {
        "spec.minReplicaCount": "1",
        "triggers.0.threshold": threshold,
        "scaleUp.stabilizationWindowSeconds": window,
        "spec.pollingInterval": polling,
        "scaleUp.percent": "100",
    }


def test_equally_cheap_trials_choose_the_one_that_reacts_most() -> None:
    """Three feasible trials at the same cost (the floor carried the day):
    the lowest threshold and shortest waits win, whatever the trial order;
    the undirected key (scaleUp.percent) and an infeasible cheaper trial
    play no part, and the tie is reported."""
    study = _study([
        (_queue("17.3", "120", "60"), 0.503, True),
        (_queue("2", "0", "15"), 0.503, True),
        (_queue("9", "60", "30"), 0.503 * (1 + TIE_RTOL / 2), True),
        (_queue("0.5", "0", "5"), 0.4, False),
        (_queue("1", "0", "5"), 0.9, True),
    ])  # fmt: skip
    result = read_study(study, space=QUEUE_SPACE)
    assert result.best is not None and result.best.number == 1
    assert result.tie_break is not None and result.tie_break.tied == 2
    assert "reacts most" in result.tie_break.rule
    # without a directed key there is nothing to break the tie by: the
    # cheapest, then the lowest trial number, and no tie reported
    plain = read_study(study)
    assert plain.best is not None and plain.best.number == 0
    assert plain.tie_break is None


def test_larger_scale_up_steps_react_more_and_scale_in_waits_play_no_part() -> None:
    """A "high" key counts from its large end: of two trials alike but for
    scaleUp.percent the larger step wins; a shorter scale-down window does
    not make a trial the more reactive one."""
    big, small = _queue("4"), _queue("4")
    big["scaleUp.percent"], small["scaleUp.percent"] = "400", "25"
    flappy, steady = dict(big), dict(big)
    flappy["scaleDown.stabilizationWindowSeconds"] = "0"
    steady["scaleDown.stabilizationWindowSeconds"] = "1800"
    result = read_study(_study([(small, 0.5, True), (big, 0.5, True)]), space=QUEUE_SPACE)
    assert result.best is not None and result.best.number == 1
    result = read_study(_study([(steady, 0.5, True), (flappy, 0.5, True)]), space=QUEUE_SPACE)
    assert result.best is not None and result.best.number == 0


def test_a_cheapest_trial_alone_is_chosen_as_before() -> None:
    """No tie: the cheapest feasible trial wins however slowly it reacts."""
    study = _study([
        (_queue("17.3", "300", "60"), 0.500, True),
        (_queue("0.5", "0", "5"), 0.500 * (1 + 10 * TIE_RTOL), True),
    ])  # fmt: skip
    result = read_study(study, space=QUEUE_SPACE)
    assert result.best is not None and result.best.number == 0
    assert result.tie_break is None


def test_every_side_has_directions_on_its_thresholds_and_scale_up_knobs() -> None:
    """Thresholds, activation thresholds and scale-up waits react more when
    lower, scale-up steps when higher; scale-in waits and the other keys
    have no direction."""
    request = TuneRequest(replay=ReplaySpec(profile=PROFILE), choice=SideChoice(sides=SIDES))
    low = ("threshold", "activationThreshold", "scaleUp.stabilizationWindowSeconds",
           "scaleUp.periodSeconds", "pollingInterval")  # fmt: skip
    high = ("scaleUp.percent", "scaleUp.pods")
    for side in make_sides(request, PROFILE, 8):
        for p in side.space:
            want = "low" if p.key.endswith(low) else "high" if p.key in high else None
            if p.key in ("targetWaitingPerReplica", "targetKvCacheUsage"):
                want = "low"
            assert p.reacts == want, (side.name, p.key)
    assert {p.key for p in PREDICTIVE_SPACE if p.reacts} == {
        "targetWaitingPerReplica", "targetKvCacheUsage",
    }  # fmt: skip


def test_a_direction_leaves_the_study_fingerprint_alone() -> None:
    """The fingerprint holds the space's repr: a direction is not in it,
    so a study started before directions existed is joined as it was."""
    plain = Param("k", "float", 0.5, 2.0, step=0.5)
    assert repr(plain) == repr(Param("k", "float", 0.5, 2.0, step=0.5, reacts="low"))


def test_a_fraction_metric_threshold_is_searched_within_0_and_1() -> None:
    """Every KV-cache trigger of every side has its threshold and
    activation searched within 0-1 (3.9 on a 0-1 metric is impossible)."""
    request = TuneRequest(replay=ReplaySpec(profile=PROFILE), choice=SideChoice(sides=SIDES))
    seen = 0
    for side in make_sides(request, PROFILE, 8):
        for i, t in enumerate(triggers_of(side.base)):
            if "kv_cache" not in str(t.metadata.get("query", "")):
                continue
            keys = (f"triggers.{i}.threshold", f"triggers.{i}.activationThreshold")
            for p in side.space:
                if p.key in keys:
                    seen += 1
                    assert 0.0 <= p.low < p.high <= 1.0, (side.name, p)
    assert seen >= 4  # queue-kv, its cron side, and the gateway side's threshold and activation
    assert metric_ceiling("avg(vllm:kv_cache_usage_perc)") == 1.0
    assert metric_ceiling('max by (pod) (vllm:gpu_cache_usage_perc{model_name="m"})') == 1.0
    assert metric_ceiling("sum(vllm:kv_cache_usage_perc)") is None
    # a series or its older name, as prescaler's own query writes it
    either = "avg(vllm:kv_cache_usage_perc) or avg(vllm:gpu_cache_usage_perc)"
    assert metric_ceiling(either) == 1.0
    assert metric_ceiling("avg(vllm:kv_cache_usage_perc) * 100 or avg(x)") is None


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="prescaler")
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["tune", "t.csv", *argv])


def test_worker_index_defaults_to_the_indexed_jobs_pod_index(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--worker-index N, else $JOB_COMPLETION_INDEX, else 0; a bad index is refused."""
    monkeypatch.delenv("JOB_COMPLETION_INDEX", raising=False)
    assert request_from(_args()).study.worker_index == 0
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "3")
    assert request_from(_args()).study.worker_index == 3
    assert request_from(_args("--worker-index", "1")).study.worker_index == 1
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "x")
    with pytest.raises(UsageError, match="JOB_COMPLETION_INDEX"):
        request_from(_args())
    with pytest.raises(SystemExit):
        _args("--worker-index", "-1")
    with pytest.raises(ValueError, match="worker index"):
        StudySpec(worker_index=-1)


@pytest.mark.parametrize("jobs", [1, 2])
def test_pods_started_together_draw_with_distinct_seeds(jobs: int) -> None:
    """Four pods of --jobs J joining an empty study at once: every process
    has its own seed; pod 0 keeps what a lone command always had."""
    pods = [process_indices(n, jobs) for n in range(4)]
    assert pods[0] == range(jobs)
    seeds = [worker_seed(7, k, 0) for indices in pods for k in indices]
    assert len(set(seeds)) == 4 * jobs and seeds[0] == 7


def test_the_json_says_when_a_choice_was_a_tie_break(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A flat trace: the floor carries the day, so equally cheap trials tie;
    the side's ``tie_break`` says how many tied and the rule, and the
    printed report says so in one line."""
    trace = tmp_path / "flat.csv"
    trace.write_text("minute_start_s,requests\n" + "".join(f"{60 * i},20\n" for i in range(20)))
    out = tmp_path / "tune.json"
    code = main([
        str(trace), "--trials", "6", "--quiet", "--target", "0.8", "--holdout-seeds", "1",
        "--sides", "keda-queue", "--storage", f"sqlite:///{tmp_path / 'study.db'}",
        "--json", str(out),
    ])  # fmt: skip
    assert code == 0
    side = json.loads(out.read_text())["sides"]["keda-queue"]
    text = capsys.readouterr().out
    tie = side["tie_break"]
    assert tie is not None and tie["tied"] >= 1 and "reacts most" in tie["rule"]
    assert sum("a tie-break:" in line for line in text.splitlines()) == 1
