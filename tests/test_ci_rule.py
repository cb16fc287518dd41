"""One rule for "in CI", the same in the tests and in the Makefile."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.ci import in_ci

ROOT = Path(__file__).resolve().parents[1]
CASES = [
    ("true", True),
    ("TRUE", True),
    ("1", True),
    ("yes", True),
    (" True ", True),
    ("", False),
    ("0", False),
    ("false", False),
    ("no", False),
    ("anything", False),
]


@pytest.mark.parametrize(("value", "expected"), CASES)
def test_in_ci(value: str, expected: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", value)
    assert in_ci() is expected


def test_unset_is_not_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    assert not in_ci()


@pytest.mark.skipif(shutil.which("make") is None, reason="make not installed")
@pytest.mark.parametrize(("value", "expected"), CASES)
def test_makefile_reads_ci_the_same_way(value: str, expected: bool) -> None:
    """``make -pnq`` prints the Makefile's variables without running a recipe."""
    done = subprocess.run(
        ["make", "-pnq", "front"],
        cwd=ROOT,
        env={**os.environ, "CI": value},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith("IN_CI :="))
    assert (line.split(":=", 1)[1].strip() != "") is expected
