"""A clone with nothing beside it: provenance tests skip outside CI, fail in CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.reference import ENV

ROOT = Path(__file__).resolve().parents[1]
# The tests that compare shipped data with its reference original.
PROVENANCE = [
    "tests/engine/test_calibration_bench.py::test_fixture_is_the_reference_calibration_csv",
    "tests/manifests/test_seeds.py",
]


def _pytest(*args: str, ci: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env[ENV] = ""  # hide the reference folder
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=-q -rs", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_collection_needs_no_reference_folder() -> None:
    done = _pytest("--collect-only", "tests/engine", "tests/manifests", ci=None)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_provenance_tests_skip_with_the_reason_outside_ci() -> None:
    done = _pytest(*PROVENANCE, ci=None)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "reference folder not found" in done.stdout
    assert " failed" not in done.stdout


@pytest.mark.parametrize("ci", ["true", "1"])
def test_provenance_tests_fail_in_ci(ci: str) -> None:
    done = _pytest(PROVENANCE[0], ci=ci)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "reference folder not found" in done.stdout
