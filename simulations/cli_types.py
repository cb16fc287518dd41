"""Argument types shared by the replay commands (``simulate``, ``tune``, ``stack``).

One parser per kind of value, so every command words a bad flag the same way:
the flag, the rule, and the text it was given.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["count_flag", "fraction_flag", "number_flag", "window_flag"]


def number_flag(name: str, lo: float = 0.0, *, strict: bool = True) -> Callable[[str], float]:
    """A finite float ``> lo`` (``>= lo`` when not ``strict``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be a number, got {text!r}") from None
        if not math.isfinite(value) or (value <= lo if strict else value < lo):
            cmp = ">" if strict else ">="
            raise argparse.ArgumentTypeError(
                f"{name} must be a finite number {cmp} {lo:g}, got {text}"
            )
        return value

    return parse


def fraction_flag(name: str) -> Callable[[str], float]:
    """A finite float in ``(0, 1]``."""

    def parse(text: str) -> float:
        value = number_flag(name)(text)
        if value > 1.0:
            raise argparse.ArgumentTypeError(f"{name} must lie in (0, 1], got {text}")
        return value

    return parse


def count_flag(name: str, lo: int = 1) -> Callable[[str], int]:
    """An integer ``>= lo``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"{name} must be >= {lo}, got {value}")
        return value

    return parse


def window_flag(name: str) -> Callable[[str], tuple[float, float]]:
    """``START:END`` seconds, finite, ``0 <= START < END``."""

    def parse(text: str) -> tuple[float, float]:
        parts = text.split(":")
        try:
            if len(parts) != 2:
                raise ValueError
            start, end = float(parts[0]), float(parts[1])
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{name} must be START:END in seconds, got {text!r}"
            ) from None
        if not (math.isfinite(start) and math.isfinite(end) and 0.0 <= start < end):
            raise argparse.ArgumentTypeError(
                f"{name} must satisfy 0 <= START < END (finite seconds), got {text}"
            )
        return start, end

    return parse
