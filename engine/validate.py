"""Checks on values read from user input (flags, YAML, JSON), shared by the
dataclasses that validate themselves, so that every count is judged alike."""

from __future__ import annotations

import math

__all__ = ["int_at_least", "require_positive"]


def int_at_least(value: object, minimum: int) -> bool:
    """Whether ``value`` is an ``int`` of at least ``minimum``; ``True`` and
    ``False`` are not counts, though Python's ``bool`` is an ``int``."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def require_positive(name: str, value: object) -> None:
    """Raise ``ValueError`` naming ``name`` unless ``value`` is a finite number > 0
    (``True`` is not a number here)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
