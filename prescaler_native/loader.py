"""Where the compiled copies of the hot modules live, and when they may load.

``make native`` compiles a few modules of ``engine``, ``simulations`` and
``forecasting`` into ``build/native/`` (``prescaler_native/build.py``) with a
manifest of every source file of those packages and every extension written.
The build's folder goes first on a package's ``__path__`` only while the
build is whole and current: the packages' ``.py`` files are exactly the
manifest's, each with its SHA-256 (a compiled module is checked against the
types of all it imports, so any edit in these packages makes the build
stale), and the build holds exactly the listed extensions for this
interpreter. The check runs once per process and answers every package
alike. ``PRESCALER_PURE_PYTHON=1`` runs the sources regardless.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sysconfig
from collections.abc import Iterable
from pathlib import Path

PURE_ENV = "PRESCALER_PURE_PYTHON"
DIR_ENV = "PRESCALER_NATIVE_DIR"
MANIFEST = "manifest.json"


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes"}


def ext_suffix() -> str:
    """This interpreter's extension-module suffix (e.g. ``.cpython-311-x86_64-linux-gnu.so``)."""
    return str(sysconfig.get_config_var("EXT_SUFFIX") or ".so")


def package_sources(root: Path, packages: Iterable[str]) -> list[str]:
    """Every ``.py`` file of `packages` under `root`, as sorted POSIX paths relative to it."""
    return sorted(
        p.relative_to(root).as_posix()
        for pkg in packages
        for p in (root / pkg).rglob("*.py")
        if "__pycache__" not in p.parts
    )


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def extensions_in(build_dir: Path) -> list[str]:
    """Every extension module under `build_dir`, as sorted paths relative to it."""
    return sorted(p.relative_to(build_dir).as_posix() for p in build_dir.rglob(f"*{ext_suffix()}"))


@functools.cache
def _build_is_current(build_dir: Path, root: Path) -> bool:
    """Whether the build in `build_dir` was made from exactly the sources under `root`."""
    try:
        manifest = json.loads((build_dir / MANIFEST).read_text())
        if manifest["ext_suffix"] != ext_suffix():
            return False
        sources: dict[str, str] = manifest["sources"]
        if package_sources(root, manifest["packages"]) != sorted(sources):
            return False
        if any(file_sha256(root / rel) != digest for rel, digest in sources.items()):
            return False
        listed: list[str] = sorted(manifest["extensions"])
        return extensions_in(build_dir) == listed
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def native_dir(package_dir: Path, build_dir: Path | None = None) -> Path | None:
    """The compiled package folder to search first, or None to run the sources.

    `build_dir` defaults to ``build/native`` beside the package's checkout
    (``PRESCALER_NATIVE_DIR`` overrides it, e.g. for a build kept elsewhere).
    """
    if _truthy(os.environ.get(PURE_ENV)):
        return None
    if build_dir is None:
        override = os.environ.get(DIR_ENV)
        build_dir = Path(override) if override else package_dir.parent / "build" / "native"
    if not _build_is_current(build_dir.resolve(), package_dir.parent.resolve()):
        return None
    compiled = build_dir / package_dir.name
    return compiled if compiled.is_dir() else None


def compiled_first(path: list[str], init_file: str) -> list[str]:
    """A package's ``__path__`` with its compiled folder first, when one may be used.

    Called at the top of the package's ``__init__``, before it imports any
    of its own modules: a module imported earlier stays the source one.
    """
    compiled = native_dir(Path(init_file).resolve().parent)
    return path if compiled is None else [str(compiled), *path]


def is_native(module: object) -> bool:
    """Whether `module` was loaded from a compiled extension."""
    return str(getattr(module, "__file__", "")).endswith(ext_suffix())


def compiled_warning(modules: Iterable[object]) -> str | None:
    """A warning naming those of `modules` that run from their Python
    sources; None when every one is compiled.

    Why: the loader falls back to the sources without a word whenever the
    build is missing or older than an edited source, and a prescaler tune
    trial then takes about 1.8 times as long (``docs/decisions/tune-speed.md``);
    a long run should say so.
    """
    slow = [str(getattr(m, "__name__", m)) for m in modules if not is_native(m)]
    if not slow:
        return None
    return (
        f"the compiled modules of `make native` are not loaded ({', '.join(slow)} run as "
        "Python: the build is missing or older than an edited source, or "
        f"{PURE_ENV}=1), and a prescaler trial takes about 1.8 times as long; run "
        "`make native`"
    )
