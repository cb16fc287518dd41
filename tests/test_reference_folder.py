"""A clone with nothing beside it: provenance tests skip outside CI, fail in CI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.reference import OPTION

ROOT = Path(__file__).resolve().parents[1]
# The tests that compare shipped data with its reference original.
PROVENANCE = [
    "tests/engine/test_calibration_bench.py::test_fixture_is_the_reference_calibration_csv",
    "tests/manifests/test_seeds.py",
]
# The same tests picked out of their folders' full collection (-k matches a
# test's name and its module's file name).
PROVENANCE_K = "test_fixture_is_the_reference_calibration_csv or test_seeds.py"


def _pytest(*args: str, ci: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    # addopts is replaced, so the suite's plugin blocks are repeated (pyproject.toml)
    blocked = ["-p", "no:cacheprovider", "-p", "no:fugue_test", "-p", "no:fugue_test_fixtures"]
    return subprocess.run(
        # an empty --reference-dir hides the reference folder
        [sys.executable, "-m", "pytest", *blocked, "-o", "addopts=-q -rs", f"{OPTION}=", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_collection_needs_no_reference_folder_and_provenance_tests_skip_outside_ci() -> None:
    """One pytest run (each costs a start-up): it collects every test of the
    folders holding provenance tests, which must not need the reference
    folder, and runs the provenance tests alone, which skip with the reason."""
    done = _pytest("tests/engine", "tests/manifests", "-k", PROVENANCE_K, ci=None)
    out = done.stdout
    assert done.returncode == 0, out[-3000:] + done.stderr[-3000:]  # 2: a collection error
    assert "reference folder not found" in out
    assert " failed" not in out
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert any("calibration" in line for line in skipped), skipped
    assert any("seeds" in line for line in skipped), skipped


def test_provenance_tests_fail_in_ci() -> None:
    """With CI set as .ci/run sets it; that every spelling of "in CI" is read
    alike is tests/test_ci_rule.py's job."""
    done = _pytest(PROVENANCE[0], ci="true")
    assert done.returncode == 1, done.stdout[-3000:]
    assert "reference folder not found" in done.stdout
