"""A profile file given as ``--profile FILE.yaml`` to ``prescaler simulate`` and
``prescaler tune`` works as a catalogue name does.

The file is the one a new user has: written by ``prescaler engine
fit-profile`` under a name of its own (``llama-3-8b@my-l4``), which no
catalogue holds. Before, the commands read the file and then handed its
*name* on to the runner, the trigger metadata and the tuner's workers,
which looked it up again and failed with "unknown profile".
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import optuna
import pytest

from engine.profile_files import write_profile_file
from engine.profiles import PROFILES, get_profile, use_profile
from prescaler.cli import main
from tests.engine.profile_fit_truth import BASE, BENCH_FIXTURE
from tests.support.counts_trace import write_counts_trace

FIT_DATA = Path(__file__).parents[1] / "engine" / "data" / "profile_fit" / BENCH_FIXTURE
NAME = "llama-3-8b@my-l4"


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small per-minute counts trace (``minute_start_s,requests``): 20 minutes."""
    return write_counts_trace(tmp_path_factory.mktemp("trace"), 20, 3)


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``prescaler engine fit-profile``'s file, named as the user named it."""
    out = tmp_path_factory.mktemp("fit") / "fitted.yaml"
    argv = ["engine", "fit-profile", "--base", BASE, "--bench-result", str(FIT_DATA)]
    assert main([*argv, "--name", NAME, "--out", str(out)]) == 0
    profile = get_profile(str(out))
    assert profile.name == NAME and profile != dataclasses.replace(PROFILES[BASE], name=NAME)
    return out


def _simulate(trace: Path, profile: str, out: Path, *extra: str) -> dict[str, Any]:
    argv = ["simulate", str(trace), "--policy", "reactive,predictive", "--duration", "900"]
    argv += ["--quiet", "--json", str(out), "--profile", profile, *extra]
    assert main(argv) == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def _runs(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each policy's summary less its wall-clock timings."""
    return {
        name: {k: v for k, v in entry.items() if "wall" not in k}
        for name, entry in doc["policies"].items()
    }


def test_simulate_runs_a_fitted_profile_file_relative_or_absolute(
    trace: Path, fitted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every policy runs (the predictive one names the profile in its trigger,
    the one that failed), in one process and in two, with the path relative
    or absolute; the runs are the fitted profile's, not the base's."""
    absolute = _simulate(trace, str(fitted), tmp_path / "a.json")
    monkeypatch.chdir(fitted.parent)
    relative = _simulate(trace, fitted.name, tmp_path / "r.json", "--jobs", "2")
    assert absolute["profile"] == relative["profile"] == NAME
    assert _runs(absolute) == _runs(relative)
    assert set(_runs(absolute)) == {"reactive", "predictive"}
    base = _simulate(trace, BASE, tmp_path / "b.json")
    assert _runs(base) != _runs(absolute)


def test_a_renamed_copy_of_a_catalogue_profile_runs_as_the_catalogue_one(
    trace: Path, tmp_path: Path
) -> None:
    """The same figures under another name give the very runs the catalogue
    name gives: the file's profile is the one every part uses."""
    copy = write_profile_file(
        dataclasses.replace(PROFILES[BASE], name="llama-3-8b@my-copy"), tmp_path / "copy.yml"
    )
    named = _simulate(trace, BASE, tmp_path / "n.json")
    filed = _simulate(trace, str(copy), tmp_path / "f.json")
    assert filed["profile"] == "llama-3-8b@my-copy"
    assert _runs(named) == _runs(filed)


def _tune(trace: Path, profile: str, storage: str, out: Path, trials: int) -> dict[str, Any]:
    argv = [
        "tune", str(trace), "--profile", profile, "--duration", "1200", "--trials", str(trials),
        "--target", "0.3", "--holdout-seeds", "1", "--quiet", "--storage", storage,
        "--json", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def test_tune_runs_a_fitted_profile_file_and_resumes_it_from_another_path(
    trace: Path, fitted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tune --profile fitted.yaml`` tunes (the trials run in worker processes
    too), the ScaledObject to paste names the profile by its name, and the
    same file given by a relative path resumes the same studies."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    first = _tune(trace, str(fitted), storage, tmp_path / "t1.json", trials=1)
    assert first["predictive"]["metadata"]["profile"] == NAME
    monkeypatch.chdir(fitted.parent)
    second = _tune(trace, fitted.name, storage, tmp_path / "t2.json", trials=2)
    assert second["trials"] == 2
    studies = optuna.get_all_study_summaries(storage)
    assert len(studies) == len(second["sides"])  # joined, not started again
    assert all(s.n_trials == 2 for s in studies)


def test_two_profiles_under_one_name_are_refused(fitted: Path, tmp_path: Path) -> None:
    """A file that reuses a built-in's name with other figures, or a name
    another profile of this process holds, is refused: the replicas and the
    scaler's belief about them could otherwise differ without a word."""
    other = dataclasses.replace(use_profile(str(fitted)), price_on_demand_per_hour=9.0)
    with pytest.raises(ValueError, match="another profile this run was given"):
        use_profile(other)
    clash = dataclasses.replace(get_profile(str(fitted)), name=BASE)
    path = write_profile_file(clash, tmp_path / "clash.yaml")
    with pytest.raises(ValueError, match="a built-in profile"):
        use_profile(str(path))
    # the same figures under a built-in name are the built-in
    same = write_profile_file(PROFILES[BASE], tmp_path / "same.yaml")
    assert use_profile(str(same)) is PROFILES[BASE]


def test_a_users_scaledobject_may_name_the_files_profile(
    trace: Path, fitted: Path, tmp_path: Path
) -> None:
    """The user's own ScaledObject names the profile as the cluster will
    (``profile: llama-3-8b@my-l4``, the file mounted there): with the file as
    ``--profile``, that name is the file's profile."""
    shipped = Path(__file__).parents[2] / "manifests" / "vllm" / "gpu" / "scaledobject.yaml"
    text = shipped.read_text()
    assert "profile:" in text
    mine = tmp_path / "scaledobject.yaml"
    mine.write_text(re.sub(r"profile: .*", f'profile: "{NAME}"', text))
    doc = _simulate(trace, str(fitted), tmp_path / "so.json", "--scaledobject", str(mine))
    assert len(doc["policies"]) == 3 and doc["profile"] == NAME
