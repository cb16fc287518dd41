"""The `prescaler` dispatcher: every subcommand module must load."""

from __future__ import annotations

import sys

import pytest

from prescaler.cli import CommandModuleError, main


def test_every_package_registers_its_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    """The shipped packages all load, so each package's top-level command is offered."""
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    usage = capsys.readouterr().out
    for command in ("engine", "emulate", "backtest", "serve", "demo"):
        assert command in usage


@pytest.mark.parametrize("module", ["simulations.cli", "forecasting.cli"])
def test_a_module_that_fails_to_import_is_an_error_naming_it(
    module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken module used to be skipped and its subcommands silently vanished."""
    monkeypatch.setitem(sys.modules, module, None)  # importing it now raises
    with pytest.raises(CommandModuleError, match=module.replace(".", r"\.")) as err:
        main(["engine", "--help"])
    assert err.value.module == module


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["simulate", "t.csv", "--duration", "abc"], "prescaler simulate"),
        (["tune", "t.csv", "--trials", "0"], "prescaler tune"),
        (["serve", "--port", "x"], "prescaler serve"),
        (["emulate", "--no-such-flag"], "prescaler emulate"),
        (["engine", "fit-profile", "--base", "x"], "prescaler engine fit-profile"),
        (["engine"], "prescaler engine"),
        (["stack", "--speed"], "prescaler stack"),
        (["no-such-command"], "prescaler"),
    ],
)
def test_a_usage_error_is_one_line_naming_the_command(
    argv: list[str], command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad flag prints the error and where help is, not 20 lines of usage
    above it; the subcommand that refused it is named; the status stays 2."""
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert captured.out == "" and len(lines) == 1, captured.err
    assert lines[0].startswith(f"{command}: error: ")
    assert lines[0].endswith(f"(see '{command} --help')")


def test_help_still_prints_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["simulate", "--help"])
    assert done.value.code == 0 and "usage: prescaler simulate" in capsys.readouterr().out


def test_ctrl_c_anywhere_is_one_line_and_status_130(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ctrl-C while the commands load, or in a command that does not handle it
    itself, ends with one line and the shell's status for SIGINT."""
    import prescaler.cli as cli

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert main(["simulate", "t.csv"]) == 130
    assert capsys.readouterr().err == "prescaler: interrupted\n"
