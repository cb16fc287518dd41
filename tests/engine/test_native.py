"""The compiled engine (``make native``, mypyc) gives the very same results, and a
stale build is never used.

mypyc compiles the annotated source as it is; C doubles are Python floats and
ints stay exact, so every record must match bit for bit. The check runs a
fixed battery (tests/support/native_digest.py: engine replays with preemption
and aborts, simulations of every policy with spot interruptions) once on a
fresh build and once on the sources, in separate processes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from native.loader import MANIFEST, PURE_ENV, native_dir
from tests.support.ci import fail_in_ci_else_skip

ROOT = Path(__file__).parents[2]


def _can_compile() -> str | None:
    """Why mypyc cannot build here, or None."""
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return "mypyc is not installed (it ships with mypy, a dev dependency)"
    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not include.exists():
        return f"no Python headers ({include})"
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if subprocess.run(["sh", "-c", f"command -v {cc}"], capture_output=True).returncode:
        return f"no C compiler ({cc})"
    return None


@pytest.fixture(scope="module")
def native_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    why = _can_compile()
    if why is not None:
        fail_in_ci_else_skip(f"the compiled engine cannot be built: {why}")
    out = tmp_path_factory.mktemp("native")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "native" / "build.py"), str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _digest(env_extra: dict[str, str]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in (PURE_ENV, "PRESCALER_NATIVE_DIR")}
    env.update(env_extra)
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.native_digest"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def test_compiled_engine_gives_identical_records(native_build: Path) -> None:
    """Same battery, compiled and pure: every digest equal, and the battery reaches
    preemption, aborts and spot interruptions."""
    native = _digest({"PRESCALER_NATIVE_DIR": str(native_build)})
    pure = _digest({PURE_ENV: "1"})
    assert native["native"] is True
    assert pure["native"] is False
    assert native["digests"] == pure["digests"]
    assert native["covers"] == pure["covers"]
    assert all(count > 0 for count in native["covers"].values()), native["covers"]


def _fake_build(tmp_path: Path, sources: dict[str, str], suffix: str | None) -> Path:
    build = tmp_path / "build"
    (build / "engine").mkdir(parents=True)
    manifest = {"ext_suffix": suffix, "sources": sources}
    (build / MANIFEST).write_text(json.dumps(manifest))
    return build


def _current_hashes() -> dict[str, str]:
    """What native/build.py records for this checkout (loaded from its file: it is a script)."""
    spec = importlib.util.spec_from_file_location("native_build", ROOT / "native" / "build.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    hashes: dict[str, str] = script.source_hashes(ROOT)
    return hashes


def test_a_matching_build_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hashes of this checkout and this interpreter's suffix: the build comes first."""
    monkeypatch.delenv(PURE_ENV, raising=False)
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    build = _fake_build(tmp_path, _current_hashes(), suffix)
    assert native_dir(ROOT / "engine", build) == build / "engine"


def test_a_stale_build_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One source edited since the build (its hash differs): the sources run."""
    monkeypatch.delenv(PURE_ENV, raising=False)
    hashes = _current_hashes()
    first = next(iter(hashes))
    hashes[first] = "0" * 64
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    assert native_dir(ROOT / "engine", _fake_build(tmp_path, hashes, suffix)) is None


def test_another_interpreters_build_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build for another Python (extension suffix differs) is never loaded."""
    monkeypatch.delenv(PURE_ENV, raising=False)
    build = _fake_build(tmp_path, _current_hashes(), ".cpython-399-other.so")
    assert native_dir(ROOT / "engine", build) is None


def test_pure_python_on_request_and_without_a_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PRESCALER_PURE_PYTHON=1 wins over a good build; no or a broken manifest: sources."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    build = _fake_build(tmp_path, _current_hashes(), suffix)
    monkeypatch.setenv(PURE_ENV, "1")
    assert native_dir(ROOT / "engine", build) is None
    monkeypatch.delenv(PURE_ENV)
    assert native_dir(ROOT / "engine", tmp_path / "nowhere") is None
    (build / MANIFEST).write_text("{not json")
    assert native_dir(ROOT / "engine", build) is None
