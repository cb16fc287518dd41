"""Subcommands of the simulator (``simulate``, ``tune``): added by the simulator issue."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """No simulator subcommands yet; kept so the dispatcher's list is complete."""
