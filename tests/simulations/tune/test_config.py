"""``prescaler tune --config FILE``: the rarely changed flags from a YAML file."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulations.cli import UsageError
from simulations.tune.cli import main
from simulations.tune.request import WrittenCron, tune_request
from tests.simulations.tune.conftest import config_request


def test_the_file_sets_what_the_command_line_does_not(tmp_path: Path) -> None:
    request = config_request(
        tmp_path,
        "trial-grace: 90\nprune: exact\nnamespace: llm\nholdout-seeds: 2\n"
        "add-sides: [prescaler-cron]\ncron-window: '07:45-17:30/3'\nstorage: sqlite:///x.db\n",
    )
    assert request.study.trial_grace_s == 90 and request.study.prune == "exact"
    assert request.study.storage == "sqlite:///x.db"
    assert request.paste.namespace == "llm" and request.protocol.holdout_seeds == 2
    assert request.choice.cron_window == WrittenCron(465, 1050, 3)
    assert request.choice.sides[-1] == "prescaler-cron"


def test_a_cron_window_the_command_lines_sides_cannot_use_is_said_to_be_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--sides naming no cron side wins over the file's add-sides, and its
    cron-window is dropped with one line on stderr saying why."""
    text = "add-sides: [prescaler-cron]\ncron-window: '07:45-17:30/3'\n"
    request = config_request(tmp_path, text, "--sides", "prescaler")
    assert request.choice.cron_window is None and request.choice.sides == ("prescaler",)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cron-window ignored" in err and "prescaler-cron" in err
    config_request(tmp_path, text)
    assert capsys.readouterr().err == ""


def test_a_flag_on_the_command_line_wins_even_at_its_default(tmp_path: Path) -> None:
    """Given before ``--config`` and at the value it defaults to, the flag still wins."""
    request = config_request(tmp_path, "prune: exact\nholdout-seeds: 5\n", "--prune", "pace")
    assert request.study.prune == "pace" and request.protocol.holdout_seeds == 5


def test_an_unknown_key_is_one_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(UsageError, match="unknown key 'trails'"):
        config_request(tmp_path, "trails: 3\n")
    with pytest.raises(UsageError, match="trial-grace"):
        config_request(tmp_path, "trial-grace: 1\n")
    path = tmp_path / "bad.yaml"
    path.write_text("margin: 1\nsince_: 7d\n", encoding="utf-8")
    assert main(["t.csv", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'since_'" in err and err.count("\n") == 1


def test_the_flat_names_read_the_side_choice() -> None:
    """``sides``, ``cron_window`` and ``prescaler_fixed`` read as before the parts."""
    window = WrittenCron(480, 1080, 2)
    request = tune_request(
        profile="p", sides=("prescaler",), cron_window=window, prescaler_fixed=(("prewarm", "0"),)
    )
    assert request.sides == request.choice.sides == ("prescaler",)
    assert request.cron_window is request.choice.cron_window is window
    assert request.prescaler_fixed == (("prewarm", "0"),)
