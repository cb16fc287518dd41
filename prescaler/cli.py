"""Thin dispatcher: every package registers its own subcommands."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

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
    "simulations.hindsight_cli",
    "stack.cli",
    "prescaler.demo",
    "prescaler.doctor",
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


_PARSER_ATTR = "_prescaler_parser"


class OneLineErrors(argparse.ArgumentParser):
    """A parser whose usage errors are one line: the error and where help is.

    argparse prints the whole usage block (20 lines and more for the
    simulator's flags) above the one line that says what was wrong. Every
    subcommand's parser is made by ``add_subparsers``, which makes them of
    its parent's class, so setting it here reaches them all. The exit status
    stays argparse's 2.
    """

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        ns, extra = super().parse_known_args(args, namespace)
        # the innermost parser finishes first: it is the subcommand that ran
        if not hasattr(ns, _PARSER_ATTR):
            setattr(ns, _PARSER_ATTR, self)
        return ns, extra

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """As argparse's, but a flag the subcommand does not know is its error
        (``prescaler emulate: error: unrecognized arguments``), not the top
        parser's."""
        ns, extra = self.parse_known_args(args, namespace)
        parser: argparse.ArgumentParser = getattr(ns, _PARSER_ATTR, self)
        delattr(ns, _PARSER_ATTR)
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        return ns


def build_parser() -> argparse.ArgumentParser:
    """Every package's subcommands; raises CommandModuleError naming a module that fails."""
    parser = OneLineErrors(
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
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
        result = args.func(args)
    except KeyboardInterrupt:
        # a command that can say more on Ctrl-C (tune, stack) says it and
        # returns; anywhere else (importing, a command without its own
        # handling) one line, not a traceback, and the shell's status
        from simulations.tune.interrupts import EXIT_INTERRUPTED

        print("prescaler: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
