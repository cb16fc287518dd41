"""Thin dispatcher: every package registers its own subcommands."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Each module exposes ``register(subparsers)``; it adds its subcommands and sets
# ``func`` on them. Imported lazily so that ``prescaler engine profiles`` does
# not pay for grpc or statsmodels.
_COMMAND_MODULES: tuple[str, ...] = (
    "engine.cli",
    "engine.emulator.cli",
    "forecasting.cli",
    "scaler.cli",
    "simulations.cli",
    "prescaler.demo",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="prescaler",
        description="Predictive autoscaler for vLLM on Kubernetes (KEDA external scaler).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            # A package whose subcommands are not built yet; anything else
            # missing (a broken import inside the module) still raises.
            missing = exc.name or ""
            if not (name == missing or name.startswith(missing + ".")):
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    result = args.func(args)
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
