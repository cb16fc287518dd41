"""One rule for "this run is CI": the ``CI`` environment variable.

Under CI a test that lacks something it needs (a binary, a data folder) must
fail rather than skip, so a green CI run means the tests really ran. Hosted CI
services set ``CI=true`` (GitHub Actions, GitLab CI) or ``CI=1``; every test,
``.ci/run`` and the Makefile read the variable with the same rule, written
once here and mirrored in ``docs/contracts.md``: case-insensitively ``1``,
``true`` or ``yes`` means CI; unset, empty or anything else does not.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

CI_VALUES = frozenset({"1", "true", "yes"})


def in_ci() -> bool:
    """True when ``CI`` is ``1``, ``true`` or ``yes`` (any case, spaces ignored)."""
    return os.environ.get("CI", "").strip().lower() in CI_VALUES


def fail_in_ci_else_skip(reason: str) -> NoReturn:
    """Fail under CI (a missing prerequisite is a broken build there), skip elsewhere."""
    if in_ci():
        pytest.fail(f"CI={os.environ['CI'].strip()} but {reason}", pytrace=False)
    pytest.skip(reason)
