"""engine.validate: the count check every self-validating dataclass uses."""

from __future__ import annotations

import pytest

from engine.validate import int_at_least


@pytest.mark.parametrize(
    ("value", "minimum", "ok"),
    [
        (1, 1, True),
        (0, 0, True),
        (0, 1, False),
        (-1, 0, False),
        (True, 0, False),
        (False, 0, False),
        (1.0, 1, False),
        ("2", 1, False),
        (None, 0, False),
    ],
)
def test_int_at_least(value: object, minimum: int, ok: bool) -> None:
    assert int_at_least(value, minimum) is ok
