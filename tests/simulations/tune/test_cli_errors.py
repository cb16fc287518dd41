"""``prescaler tune``'s usage errors and what it prints about its storage:
each error one line naming its cause, the storage's password never shown,
``--config`` values read as written and yielding to the command line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from simulations.tune.cli import ConfigError, main, register
from simulations.tune.interrupted import SoFar, interrupted_document, so_far_line
from simulations.tune.sides import Side
from simulations.tune.storage import StorageUnavailable, open_storage, shown_url
from simulations.tune.study import StudyResult, TrialRecord
from simulations.tune.tie_break import TieBreak
from tests.simulations.tune.conftest import config_request
from tests.support.counts_trace import write_counts_trace

SECRET = "s3cret-pw"
URL = f"postgresql://tuner:{SECRET}@127.0.0.1:1/optuna"


def _one_error(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> str:
    """What ``prescaler tune --config`` says of ``text``: exit 2, one line."""
    path = tmp_path / "tune.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["t.csv", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert str(path) in err
    return err


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """90 minutes of per-minute counts."""
    return write_counts_trace(tmp_path_factory.mktemp("trace"), 90, 5)


def test_scalars_stay_as_written(tmp_path: Path) -> None:
    """YAML 1.1 would read ``0123`` as octal 83 and ``no`` as false."""
    request = config_request(tmp_path, "name: 0123\nnamespace: no\ntarget-name: 1e3\nstudy: ~x\n")
    assert request.paste.name == "0123" and request.paste.namespace == "no"
    assert request.paste.target_name == "1e3" and request.study.study == "~x"


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("namespace:\n", "namespace: no value (null)"),
        ("namespace: null\n", "namespace: no value (null)"),
        ("name: {a: 1}\n", "name: a mapping where one value is wanted"),
        ("selector: [a, b]\n", "selector: a list where one value is wanted"),
        ("add-sides: [prescaler-cron, ~]\n", "add-sides: want a list of side names"),
        ("margin: 1\nmargin: 2\n", ":2: margin is given twice"),
        ("- margin\n", "want a mapping of flag names to values"),
    ],
)
def test_a_value_that_is_no_flag_text_is_one_line_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, said: str
) -> None:
    assert said in _one_error(tmp_path, text, capsys)


def test_broken_yaml_is_one_line_with_its_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _one_error(tmp_path, "margin: 1\nname: [a\n", capsys)
    assert "tune.yaml:3:1: expected ',' or ']'" in err


def test_the_unknown_key_error_lists_the_keys_as_the_file_names_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _one_error(tmp_path, "arrivals: poisson\ntrails: 3\n", capsys)
    assert "unknown key 'trails'" in err
    assert "arrivals, cv" in err and "--arrivals" not in err


def test_sides_on_the_command_line_win_over_the_files_add_sides_and_cron_window(
    tmp_path: Path,
) -> None:
    text = "add-sides: [prescaler-cron]\ncron-window: '07:00-17:00/3'\n"
    request = config_request(tmp_path, text, "--sides", "prescaler")
    assert request.choice.sides == ("prescaler",) and request.choice.cron_window is None
    request = config_request(tmp_path, text, "--add-sides", "keda-gateway")
    assert request.choice.sides[-1] == "keda-gateway" and request.choice.cron_window is None
    request = config_request(tmp_path, text, "--sides", "prescaler,keda-queue-kv-cron")
    assert request.choice.sides == ("prescaler", "keda-queue-kv-cron")
    assert request.choice.cron_window is not None and request.choice.cron_window.replicas == 3


def test_a_cron_window_in_the_file_without_a_cron_side_names_the_file_and_key(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match=r"--config .*tune\.yaml: cron-window writes"):
        config_request(tmp_path, "cron-window: '07:00-17:00'\n")


def test_the_given_flags_are_those_on_the_command_line(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser(prog="prescaler")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["tune", "t.csv", "--prune", "pace", "--arrivals", "poisson"])
    assert {"prune", "arrivals"} <= args.given_flags
    assert "namespace" not in args.given_flags and "since" not in args.given_flags


def test_a_password_is_never_shown() -> None:
    assert shown_url(URL) == "postgresql://tuner:***@127.0.0.1:1/optuna"
    assert shown_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    assert shown_url("not a url") == "not a url"
    assert shown_url(f"postgresql://tuner:{SECRET}@h:port/db") == "postgresql://tuner:***@h:port/db"


def test_an_unreachable_storage_is_one_line_exit_2_without_its_password(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [str(trace), "--sides", "prescaler", "--trials", "1", "--target", "0.3"]
    missing = f"sqlite:///{tmp_path / 'no' / 'such' / 'dir.db'}"
    assert main([*argv, "--storage", missing]) == 2
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert f"the storage {missing} cannot be opened: unable to open database file" in captured.err
    assert main([*argv, "--storage", URL]) == 2  # no driver here, or no server: either way
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and SECRET not in captured.err + captured.out
    assert "tuner:***@127.0.0.1:1" in captured.err and "tuner:***@" in captured.out


def test_a_storage_that_is_no_url_is_refused_before_the_trace_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--storage notaurl`` is one line and exit 2, not SQLAlchemy's
    traceback; the trace named is never read (it does not exist)."""
    argv = [str(tmp_path / "absent.csv"), "--sides", "prescaler", "--trials", "1"]
    assert main([*argv, "--storage", "notaurl"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "the storage notaurl cannot be opened" in err
    bad = "postgresql://tuner:" + SECRET + "@host:notaport/optuna"
    assert main([*argv, "--storage", bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot be opened" in err and SECRET not in err
    with pytest.raises(StorageUnavailable, match="notaurl"):
        open_storage("notaurl")
    for bad in (f"no such://tuner:{SECRET}@h/db", f"postgresql://tuner:{SECRET}@h:x/db"):
        with pytest.raises(StorageUnavailable) as caught:
            open_storage(bad)
        assert SECRET not in str(caught.value) and "\n" not in str(caught.value)


def test_open_storage_says_which_storage_failed(tmp_path: Path) -> None:
    with pytest.raises(StorageUnavailable, match="cannot be opened") as caught:
        open_storage(f"sqlite:///{tmp_path / 'no' / 'x.db'}")
    assert "\n" not in str(caught.value)


def test_the_ctrl_c_json_and_line_hide_the_password_and_carry_the_tie_break() -> None:
    best = TrialRecord(3, {"prewarm": "0"}, 0.9, 12.0, finished=True, feasible=True)
    tied = StudyResult((best,), best, best, "s", URL, tie_break=TieBreak(2))
    alone = StudyResult((best,), best, best, "k", URL)
    side = cast(Side, SimpleNamespace(name="prescaler", description="p"))
    other = cast(Side, SimpleNamespace(name="keda-queue", description="k"))
    so_far = SoFar("t", 1.0, 0.9, 0.8, 0.1, URL, ((side, tied), (other, alone)))
    doc = interrupted_document(so_far)
    assert SECRET not in json.dumps(doc) and doc["storage"].startswith("postgresql://tuner:***@")
    assert doc["sides"]["prescaler"]["tie_break"] == TieBreak(2).as_dict()
    assert doc["sides"]["keda-queue"]["tie_break"] is None
    line = so_far_line(so_far, [], "prescaler tune")
    assert SECRET not in line and "tuner:***@" in line
