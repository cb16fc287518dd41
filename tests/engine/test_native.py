"""The compiled engine (``make native``, mypyc) gives the very same results, and a
stale build is never used.

mypyc compiles the annotated source as it is; C doubles are Python floats and
ints stay exact, so every record must match bit for bit. The check runs a
fixed battery (tests/support/native_digest.py: engine replays with preemption
and aborts, simulations of every policy with spot interruptions) once on a
fresh build and once on the sources, in separate processes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from prescaler_native.build import PACKAGES, source_hashes
from prescaler_native.loader import (
    MANIFEST,
    PURE_ENV,
    compiled_first,
    compiled_warning,
    ext_suffix,
    native_dir,
)
from tests.support.ci import fail_in_ci_else_skip

ROOT = Path(__file__).parents[2]


def _can_compile() -> str | None:
    """Why mypyc cannot build here, or None."""
    try:
        import mypyc.build  # noqa: F401
        import setuptools  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed (mypyc ships with mypy; both are dev dependencies)"
    include = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if not include.exists():
        return f"no Python headers ({include})"
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc})"
    return None


@pytest.fixture(scope="module")
def native_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkout's own ``make native`` build when it is current (``make test``
    has just made it: compiling again would only repeat it), else a fresh one."""
    made = ROOT / "build" / "native"
    if native_dir(ROOT / "engine", made) is not None:
        return made
    why = _can_compile()
    if why is not None:
        fail_in_ci_else_skip(f"the compiled engine cannot be built: {why}")
    out = tmp_path_factory.mktemp("native")
    proc = subprocess.run(
        [sys.executable, "-m", "prescaler_native.build", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _digests(*envs_extra: dict[str, str]) -> list[dict[str, Any]]:
    """The battery's digests under each environment, the processes run at once (the
    battery is single-threaded; CI's second core would otherwise wait)."""
    procs = []
    for extra in envs_extra:
        env = {k: v for k, v in os.environ.items() if k not in (PURE_ENV, "PRESCALER_NATIVE_DIR")}
        env.update(extra)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.support.native_digest"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    docs = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        docs.append(json.loads(out))
    return docs


def test_compiled_engine_gives_identical_records(native_build: Path) -> None:
    """Same battery, compiled and pure: every digest equal, and the battery reaches
    preemption, aborts and spot interruptions."""
    native, pure = _digests({"PRESCALER_NATIVE_DIR": str(native_build)}, {PURE_ENV: "1"})
    assert native["native"] is True
    assert pure["native"] is False
    assert native["digests"] == pure["digests"]
    assert native["covers"] == pure["covers"]
    assert all(count > 0 for count in native["covers"].values()), native["covers"]


def test_an_installed_copy_loads_the_build_made_from_its_checkout(
    native_build: Path, tmp_path: Path
) -> None:
    """The container image's layout: the packages installed from a wheel into
    another folder (site-packages), the build kept elsewhere and named by
    ``PRESCALER_NATIVE_DIR``. The installed sources must be exactly the
    checkout's, or the loader would fall back to them without a word."""
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(site), str(ROOT)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    probe = (
        "import json, engine.replica as r, forecasting.filters as f, simulations.router as s\n"
        "import engine.histogram as h, simulations.events as e\n"
        "from prescaler_native.loader import is_native\n"
        "print(json.dumps([r.__file__, [is_native(m) for m in (r, f, s, h, e)]]))"
    )
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV}
    env.update({"PYTHONPATH": str(site), "PRESCALER_NATIVE_DIR": str(native_build)})
    proc = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    where, native = json.loads(proc.stdout)
    assert Path(where).is_relative_to(native_build) and native == [True] * 5


def _fake_build(
    tmp_path: Path,
    sources: dict[str, str],
    *,
    suffix: str | None = None,
    extensions: tuple[str, ...] = ("engine/replica",),
    on_disk: tuple[str, ...] | None = None,
) -> Path:
    """A build folder with a manifest listing the `extensions` (module paths; the
    suffix is added) and, on disk, the `on_disk` ones (default: the same)."""
    suffix = ext_suffix() if suffix is None else suffix
    build = tmp_path / "build"
    listed = [e + suffix for e in extensions]
    for rel in listed if on_disk is None else [e + suffix for e in on_disk]:
        (build / rel).parent.mkdir(parents=True, exist_ok=True)
        (build / rel).write_bytes(b"")
    (build / "engine").mkdir(parents=True, exist_ok=True)
    manifest = {
        "ext_suffix": suffix,
        "packages": list(PACKAGES),
        "sources": sources,
        "extensions": listed,
    }
    (build / MANIFEST).write_text(json.dumps(manifest))
    return build


@pytest.fixture(autouse=True)
def _sources_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PURE_ENV, raising=False)


def test_a_matching_build_is_used(tmp_path: Path) -> None:
    """Every source hash of this checkout and this interpreter's suffix: the build comes first."""
    build = _fake_build(tmp_path, source_hashes(ROOT))
    assert native_dir(ROOT / "engine", build) == build / "engine"


def test_an_edit_anywhere_in_the_packages_makes_the_build_stale(tmp_path: Path) -> None:
    """One source (any module of the packages, compiled or not) changed since the build."""
    hashes = source_hashes(ROOT)
    hashes["engine/requests.py"] = "0" * 64
    assert native_dir(ROOT / "engine", _fake_build(tmp_path, hashes)) is None


def test_a_source_file_added_since_the_build_makes_it_stale(tmp_path: Path) -> None:
    """The manifest lacks a file the packages have now: the sources run."""
    hashes = source_hashes(ROOT)
    del hashes["forecasting/filters.py"]
    assert native_dir(ROOT / "forecasting", _fake_build(tmp_path, hashes)) is None


def test_another_interpreters_build_is_ignored(tmp_path: Path) -> None:
    """A build for another Python (extension suffix differs) is never loaded."""
    build = _fake_build(tmp_path, source_hashes(ROOT), suffix=".cpython-399-other.so")
    assert native_dir(ROOT / "engine", build) is None


def test_an_extension_the_manifest_does_not_list_is_refused(tmp_path: Path) -> None:
    """A leftover extension of an earlier build would load unchecked: the build is refused."""
    build = _fake_build(
        tmp_path, source_hashes(ROOT), on_disk=("engine/replica", "engine/leftover")
    )
    assert native_dir(ROOT / "engine", build) is None


def test_a_listed_extension_that_is_missing_is_refused(tmp_path: Path) -> None:
    """Half a build (one package's folder gone) would mix compiled and source modules."""
    build = _fake_build(
        tmp_path,
        source_hashes(ROOT),
        extensions=("engine/replica", "simulations/router"),
        on_disk=("engine/replica",),
    )
    assert native_dir(ROOT / "simulations", build) is None
    assert native_dir(ROOT / "engine", build) is None


def test_pure_python_on_request_and_without_a_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PRESCALER_PURE_PYTHON=1 wins over a good build; no or a broken manifest: sources."""
    build = _fake_build(tmp_path / "good", source_hashes(ROOT))
    monkeypatch.setenv(PURE_ENV, "1")
    assert native_dir(ROOT / "engine", build) is None
    monkeypatch.delenv(PURE_ENV)
    assert native_dir(ROOT / "engine", tmp_path / "nowhere") is None
    broken = _fake_build(tmp_path / "broken", source_hashes(ROOT))
    (broken / MANIFEST).write_text("{not json")
    assert native_dir(ROOT / "engine", broken) is None


def test_compiled_first_puts_a_current_build_ahead_of_the_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package's __path__ gains the build's folder in front, or stays as it is."""
    init = str(ROOT / "engine" / "__init__.py")
    source_path = [str(ROOT / "engine")]
    build = _fake_build(tmp_path / "good", source_hashes(ROOT))
    monkeypatch.setenv("PRESCALER_NATIVE_DIR", str(build))
    assert compiled_first(source_path, init) == [str(build / "engine"), *source_path]
    monkeypatch.setenv("PRESCALER_NATIVE_DIR", str(tmp_path / "nowhere"))
    assert compiled_first(source_path, init) == source_path


def test_the_warning_names_the_modules_that_run_as_python() -> None:
    """``prescaler tune`` warns when a hot module runs from its source; an
    extension module (numpy's core, loaded from a shared library with this
    interpreter's suffix) is not named, and all compiled: no warning."""
    import numpy._core._multiarray_umath as compiled

    import forecasting.combination as source

    assert compiled_warning([compiled]) is None
    note = compiled_warning([compiled, source])
    assert note is not None
    assert "forecasting.combination" in note and "_multiarray_umath" not in note
