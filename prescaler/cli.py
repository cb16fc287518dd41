"""Thin dispatcher: every package registers its own subcommands."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module exposes ``register(subparsers)``; it adds its subcommands and sets
# ``func`` on them. They are imported when the parser is built, not when this
# module is, so importing ``prescaler.cli`` stays cheap. Every one ships with
# the package, so a module that fails to import is a broken install or a bug,
# never an optional feature: the error names the module instead of the
# subcommand silently vanishing from --help.
_COMMAND_MODULES: tuple[str, ...] = (
    "engine.cli",
    "engine.emulator.cli",
    "forecasting.cli",
    "scaler.cli",
    "simulations.cli",
    "simulations.tune.cli",
    "stack.cli",
    "prescaler.demo",
)


class CommandModuleError(ImportError):
    """A subcommand module failed to import; ``module`` names it."""

    def __init__(self, module: str, cause: BaseException) -> None:
        super().__init__(
            f"prescaler: subcommand module {module!r} failed to import: "
            f"{type(cause).__name__}: {cause}",
            name=module,
        )
        self.module = module


def build_parser() -> argparse.ArgumentParser:
    """Every package's subcommands; raises CommandModuleError naming a module that fails."""
    parser = argparse.ArgumentParser(
        prog="prescaler",
        description="Predictive autoscaler for vLLM on Kubernetes (KEDA external scaler).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            raise CommandModuleError(name, exc) from exc
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the chosen subcommand; its result is the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
