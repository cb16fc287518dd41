"""Where ``engine``'s compiled modules live, when they may be used.

``make native`` compiles the replica model with mypyc into
``build/native/`` (see ``native/build.py``) with a manifest of the
sources' hashes. Putting that folder first on the package's ``__path__``
makes Python import the extensions instead of the sources, but only when
every hash matches this checkout and the build is for this interpreter:
an edited or foreign build is ignored, never run stale. Set
``PRESCALER_PURE_PYTHON=1`` to run the sources regardless.
"""

from __future__ import annotations

import hashlib
import json
import os
import sysconfig
from pathlib import Path

PURE_ENV = "PRESCALER_PURE_PYTHON"
MANIFEST = "manifest.json"


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes"}


def native_dir(package_dir: Path, build_dir: Path | None = None) -> Path | None:
    """The compiled package folder to search first, or None to run the sources.

    `build_dir` defaults to ``build/native`` beside the package's checkout
    (``PRESCALER_NATIVE_DIR`` overrides it, e.g. for a build kept elsewhere).
    """
    if _truthy(os.environ.get(PURE_ENV)):
        return None
    if build_dir is None:
        override = os.environ.get("PRESCALER_NATIVE_DIR")
        build_dir = Path(override) if override else package_dir.parent / "build" / "native"
    try:
        manifest = json.loads((build_dir / MANIFEST).read_text())
        if manifest.get("ext_suffix") != sysconfig.get_config_var("EXT_SUFFIX"):
            return None
        root = package_dir.parent
        for rel, digest in manifest["sources"].items():
            if hashlib.sha256((root / rel).read_bytes()).hexdigest() != digest:
                return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
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
    return str(getattr(module, "__file__", "")).endswith(
        sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    )
