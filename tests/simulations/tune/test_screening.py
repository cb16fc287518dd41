"""`prescaler tune` screens the prescaler side's trials at a longer refit
interval and confirms the chosen setting at the scaler's own."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simulations.runner as runner_module
import simulations.tune.screening as screening_module
import simulations.tune.search as search_module
from engine.profiles import get_profile
from prescaler.cli import build_parser
from simulations.backfill import DemandHistory
from simulations.cli import replay_spec_from
from simulations.policies import PolicySpec, ScaledObjectController, make_controller
from simulations.sim_types import replay_config
from simulations.simulation import SimConfig
from simulations.traffic import Workload
from simulations.tune.cli import main
from simulations.tune.manifest import apply_setting
from simulations.tune.report import confirmed_line
from simulations.tune.request import SCREEN_REFIT_S, StudySpec
from simulations.tune.screening import CONFIRM_LIMIT, confirm, screened
from simulations.tune.search import Score, default_bases, score
from simulations.tune.study import StudyResult, TuneContext, run_study
from simulations.tune.tie_break import TIE_RTOL
from tests.support.counts_trace import write_counts_trace
from tests.support.synthetic_traffic import synthetic_workload

PROFILE = "llama-3-8b@g5.xlarge"


def _busy_history() -> DemandHistory:
    """Two hours at 4 requests/s before the window: the tracker forecasts from the start."""
    times = -15.0 * np.arange(479, -1, -1)
    return DemandHistory(times, np.full(480, 4.0), np.full(480, 4.0 * 1280.0))


def _window() -> Workload:
    return synthetic_workload(duration_s=3600.0, base_rps=2.0, seed=5, daily_amplitude=0.5)


@pytest.fixture(scope="module")
def screened_study(tmp_path_factory: pytest.TempPathFactory) -> tuple[TuneContext, StudyResult]:
    """Four prescaler trials on an hour, their tracker refitting every 30 minutes."""
    base, _ = default_bases(PROFILE, 8)
    full = TuneContext(_window(), PROFILE, SimConfig(), base, 0.5, max_replicas=8,
                       history=_busy_history())  # fmt: skip
    config = screened(SimConfig(), SCREEN_REFIT_S, prescaler=True)
    assert config is not None
    trials = dataclasses.replace(full, config=config)
    db = tmp_path_factory.mktemp("screen") / "study.db"
    return full, run_study(trials, storage=f"sqlite:///{db}", study_name="s", n_trials=4)


def test_the_refit_interval_reaches_a_prescaler_trackers_config() -> None:
    """The simulated scaler's ``--refit-seconds`` is the run's: the tracker a
    prescaler trigger gets refits at it; a config refuses one that is not a
    positive number."""
    base, _ = default_bases(PROFILE, 8)
    spec = PolicySpec("p", "scaledobject", scaledobject=base)
    for refit in (600.0, 1800.0):
        controller = make_controller(spec, _window(), get_profile(PROFILE), refit_interval_s=refit)
        assert isinstance(controller, ScaledObjectController) and controller.tracker is not None
        assert controller.tracker.config.refit_interval_s == refit
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="refit_interval_s must be a finite number > 0"):
            SimConfig(refit_interval_s=bad)


def test_only_a_side_with_a_tracker_is_screened() -> None:
    """Trials are screened where a tracker refits (the prescaler trigger) at
    an interval longer than the scaler's; 0 turns screening off."""
    config = SimConfig()
    trials = screened(config, 1800.0, prescaler=True)
    assert trials is not None and trials.refit_interval_s == 1800.0
    assert dataclasses.replace(trials, refit_interval_s=config.refit_interval_s) == config
    assert screened(config, 1800.0, prescaler=False) is None
    assert screened(config, 0.0, prescaler=True) is None
    assert screened(config, config.refit_interval_s, prescaler=True) is None
    assert screened(config, 300.0, prescaler=True) is None  # dearer than the scaler's
    with pytest.raises(ValueError, match="screening refit interval"):
        StudySpec(screen_refit_s=-1.0)


def test_the_choice_is_the_screened_choice_replayed_at_the_scalers_cadence(
    screened_study: tuple[TuneContext, StudyResult],
) -> None:
    """The screened study's choice is replayed first; when it meets the bar
    at the scaler's cadence it stays the choice, with that replay's figures
    (the same as scoring its setting at the scaler's config)."""
    full, study = screened_study
    assert study.best is not None, "a target of 0.5 is met by the hour's trials"
    out = confirm(study, full, SCREEN_REFIT_S)
    screening = out.extra["screening"]
    assert screening.refit_s == SCREEN_REFIT_S and screening.scaler_refit_s == 600.0
    first = screening.confirmations[0]
    assert first.trial == study.best.number
    assert (first.screened_attainment, first.screened_cost_usd) == (
        study.best.attainment, study.best.cost_usd,
    )  # fmt: skip
    assert out.best is not None and screening.confirmed == out.best.number
    replay = score(apply_setting(full.base, out.best.metadata, full.manifest), full.workload,
                   PROFILE, full.config, history=full.history)  # fmt: skip
    assert (out.best.attainment, out.best.cost_usd) == (replay.attainment, replay.cost_usd)
    assert out.best.summary is not None
    assert out.best.summary["slo_attainment"] == pytest.approx(replay.attainment, abs=1e-6)
    assert out.trials == study.trials  # the study's own record is untouched


def test_no_choice_when_no_replay_meets_the_bar(
    screened_study: tuple[TuneContext, StudyResult],
) -> None:
    """A bar no run can meet: the feasible trials are replayed in the order the
    study would choose them, each distinct setting once, at most
    CONFIRM_LIMIT, and none is chosen."""
    full, study = screened_study
    feasible = [t for t in study.trials if t.feasible]
    out = confirm(study, dataclasses.replace(full, target=1.01), SCREEN_REFIT_S, jobs=2)
    screening = out.extra["screening"]
    assert out.best is None and screening.confirmed is None
    replayed = [c.trial for c in screening.confirmations]
    # one replay per distinct setting: a trial repeating an earlier one's is skipped
    settings = {t.number: json.dumps(dict(t.metadata), sort_keys=True) for t in feasible}
    distinct = len(set(settings.values()))
    assert len(replayed) == len({settings[n] for n in replayed}) == min(distinct, CONFIRM_LIMIT)
    assert study.best is not None and replayed[0] == study.best.number
    assert set(replayed) <= {t.number for t in feasible}
    costs = [c.screened_cost_usd for c in screening.confirmations]
    # cheapest first; a tie-break may put one a hair dearer before another
    assert all(b >= a * (1.0 - TIE_RTOL) for a, b in itertools.pairwise(costs))
    assert not any(c.meets for c in screening.confirmations)


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A per-minute counts trace of 20 minutes."""
    return write_counts_trace(tmp_path_factory.mktemp("trace"), 20, 1)


@pytest.mark.parametrize("flag", [[], ["--screen-refit", "0"]])
def test_tune_json_says_how_the_prescaler_side_was_screened(
    trace: Path, tmp_path: Path, flag: list[str]
) -> None:
    """``--json``: the prescaler side's ``screening`` names the trials' refit
    interval, the scaler's and the confirmed trial (the chosen one); the KEDA
    side's, and every side's under ``--screen-refit 0``, is null."""
    out = tmp_path / "tune.json"
    code = main([
        str(trace), "--duration", "1200", "--trials", "3", "--quiet", "--target", "0.8",
        "--holdout-seeds", "1", "--sides", "prescaler,keda-queue",
        "--storage", f"sqlite:///{tmp_path / 'study.db'}", "--json", str(out), *flag,
    ])  # fmt: skip
    assert code == 0
    sides = json.loads(out.read_text())["sides"]
    assert sides["keda-queue"]["screening"] is None
    prescaler = sides["prescaler"]
    if flag:
        assert prescaler["screening"] is None
        return
    screening = prescaler["screening"]
    assert screening["refit_s"] == SCREEN_REFIT_S and screening["scaler_refit_s"] == 600.0
    assert screening["confirmed_trial"] == prescaler["chosen_trial"]
    kept = [c for c in screening["confirmations"] if c["trial"] == prescaler["chosen_trial"]]
    assert kept and kept[0]["meets"]
    assert kept[0]["attainment"] == pytest.approx(prescaler["tuned"]["slo_attainment"], abs=1e-6)


@pytest.mark.parametrize("value", ["-5", "3600"])
def test_a_screening_interval_out_of_range_is_a_usage_error(
    trace: Path, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Negative, or longer than the backfill's hour allows: exit 2 naming
    the flag."""
    try:
        code = main([str(trace), "--screen-refit", value])
    except SystemExit as exc:  # argparse's own usage error
        code = int(exc.code or 0)
    assert code == 2
    assert "--screen-refit" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["simulate", "tune"])
def test_refit_seconds_is_the_simulated_scalers_cadence(command: str) -> None:
    """``--refit-seconds`` (``prescaler serve``'s flag of that name) sets the
    replay's refit interval in both commands, 600 s unless given; for ``tune``
    it is the cadence the choice is confirmed at."""
    parser = build_parser()
    for argv, want in (([], 600.0), (["--refit-seconds", "300"], 300.0)):
        args = parser.parse_args([command, "t.csv", *argv])
        assert replay_config(replay_spec_from(args)).refit_interval_s == want
    with pytest.raises(SystemExit):
        parser.parse_args([command, "t.csv", "--refit-seconds", "0"])


def test_a_choice_that_fails_its_replay_gives_way_to_the_next(
    screened_study: tuple[TuneContext, StudyResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first trial in choice order misses the bar on its replay: the next
    is replayed and chosen, with its replay's figures, and no tie-break is
    reported for it (it was chosen because the first failed)."""
    full, study = screened_study
    assert study.best is not None
    first = study.best
    other = next(t for t in study.trials if dict(t.metadata) != dict(first.metadata))
    # two feasible trials, the study's choice the cheaper; a bar every finished
    # replay meets, so only the patched replay of the first can fail it
    second = dataclasses.replace(other, finished=True, feasible=True,
                                 cost_usd=first.cost_usd * 1.1)  # fmt: skip
    two = dataclasses.replace(study, trials=(first, second))
    lenient = dataclasses.replace(full, target=0.0)
    real = screening_module._replay

    def replay(args: tuple[TuneContext, Mapping[str, str]]) -> Score:
        s = real(args)
        if dict(args[1]) == dict(first.metadata):
            return dataclasses.replace(s, attainment=-1.0)
        return s

    monkeypatch.setattr(screening_module, "_replay", replay)
    out = confirm(two, lenient, SCREEN_REFIT_S)
    screening = out.extra["screening"]
    assert [c.trial for c in screening.confirmations] == [first.number, second.number]
    assert not screening.confirmations[0].meets and screening.confirmations[1].meets
    assert out.best is not None and out.best.number == second.number == screening.confirmed
    assert out.best.attainment == screening.confirmations[1].attainment
    assert out.best.summary is not None and out.tie_break is None
    line = confirmed_line(screening)
    assert f"trial {first.number} " in line and "(misses), trial" in line
    assert line.endswith("(meets)")


def test_the_confirmation_line_says_when_nothing_held(
    screened_study: tuple[TuneContext, StudyResult],
) -> None:
    """None met the bar: the line says so and how to run every trial at the
    scaler's cadence; the closest is the best replay, at its figures."""
    full, study = screened_study
    out = confirm(study, dataclasses.replace(full, target=1.01), SCREEN_REFIT_S)
    screening = out.extra["screening"]
    line = confirmed_line(screening)
    assert line.startswith("trials screened with the forecaster refitted every 1800 s, ")
    assert "none met the bar" in line and "--screen-refit 0" in line
    best = max(screening.confirmations, key=lambda c: c.attainment)
    assert out.closest is not None and out.closest.number == best.trial
    assert out.closest.attainment == best.attainment


@pytest.mark.parametrize("where", ["runner", "search"])
def test_every_run_hands_its_refit_interval_to_the_controller(
    where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``simulate``'s runs (``run_policy``) and ``tune``'s (``score``) build
    their controller with the run's ``refit_interval_s``."""
    module = runner_module if where == "runner" else search_module
    seen: list[float] = []
    real = module.make_controller

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs["refit_interval_s"])
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "make_controller", spy)
    base, _ = default_bases(PROFILE, 8)
    w = synthetic_workload(duration_s=120.0, base_rps=1.0, seed=2)
    config = SimConfig(refit_interval_s=1200.0)
    if where == "runner":
        spec = PolicySpec("p", "scaledobject", scaledobject=base)
        runner_module.run_policy(spec, w, get_profile(PROFILE), config)
    else:
        score(base, w, PROFILE, config)
    assert seen == [1200.0]


def test_a_study_screened_otherwise_is_refused_but_keda_sides_resume(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The screening interval is part of a screened side's study: trials at
    another interval are refused (exit 2); a KEDA side's study, whose
    trials have no forecaster, resumes under any."""

    def run(sides: str, screen: str) -> int:
        return main([
            str(trace), "--duration", "1200", "--trials", "1", "--quiet", "--target", "0.5",
            "--holdout-seeds", "1", "--sides", sides, "--study", f"s-{sides}",
            "--storage", f"sqlite:///{tmp_path / 'study.db'}", "--screen-refit", screen,
        ])  # fmt: skip

    assert run("prescaler", "1800") in (0, 3)
    assert run("prescaler", "1200") == 2
    assert "started for another trace" in capsys.readouterr().err
    assert run("keda-queue", "1800") in (0, 3)
    assert run("keda-queue", "0") in (0, 3)
