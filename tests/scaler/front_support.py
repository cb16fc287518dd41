"""The compiled gRPC front for tests: built once per session if Go is there.

Without Go (a user who cloned only the project and has no root), the
front's tests skip and ``prescaler serve`` uses Python gRPC alone; under
CI (``tests.support.ci``) a front that cannot be built fails the run, never a silent skip.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

from scaler.front import FrontOptions, find_front_binary
from tests.support.ci import fail_in_ci_else_skip

ROOT = Path(__file__).resolve().parents[2]
BUILT = ROOT / "build" / "prescaler-front"


def front_sources() -> list[Path]:
    """What the binary is built from: its Go files (not the tests), go.mod, the scripts."""
    front = ROOT / "front"
    go = [p for p in front.glob("*.go") if not p.name.endswith("_test.go")]
    return [*go, front / "go.mod", front / "go.sh", front / "build.sh"]


@functools.cache
def _build() -> tuple[Path | None, str]:
    newest = max(p.stat().st_mtime for p in front_sources())
    if BUILT.exists() and BUILT.stat().st_mtime >= newest:
        return BUILT, ""
    done = subprocess.run(
        ["sh", str(ROOT / "front" / "build.sh"), str(BUILT)], capture_output=True, text=True
    )
    if done.returncode != 0:
        return None, done.stderr[-2000:]
    return BUILT, ""


def front_binary() -> Path:
    """The front binary (a source checkout's build/, else the usual lookup)."""
    built, why = _build()
    binary = built or find_front_binary()
    if binary is None:
        message = f"prescaler-front cannot be built (needs Go and grpc-go): {why}"
        fail_in_ci_else_skip(message)
    return binary


def front_options(report_interval_s: float = 0.1) -> FrontOptions:
    return FrontOptions(front_binary(), report_interval_s=report_interval_s)
