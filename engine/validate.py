"""Checks on values read from user input (flags, YAML, JSON), shared by the
dataclasses that validate themselves, so that every count is judged alike."""

from __future__ import annotations

__all__ = ["int_at_least"]


def int_at_least(value: object, minimum: int) -> bool:
    """Whether ``value`` is an ``int`` of at least ``minimum``; ``True`` and
    ``False`` are not counts, though Python's ``bool`` is an ``int``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum
