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
