"""Compile the hot pure-Python modules to C with mypyc (``make native``).

The replica model's stepping and the request path around it are most of a
simulation's time, and the smoothers' loops most of the forecaster's. mypyc
compiles the same annotated source (the speed-up:
``docs/decisions/simulator-speed.md``) with the same arithmetic (C doubles
are Python floats, ints stay exact, no fused multiply-add), so records and
forecasts are identical (``tests/engine/test_native.py``); the sources stay
the reference and the fallback. The extensions go to ``build/native/``
beside a manifest that ``prescaler_native.loader`` checks.

Usage: ``python -m prescaler_native.build [OUT_DIR]`` from the repository root.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

from prescaler_native.loader import (
    MANIFEST,
    ext_suffix,
    extensions_in,
    file_sha256,
    package_sources,
)

ROOT = Path(__file__).resolve().parents[1]
GROUPS: dict[str, tuple[str, ...]] = {
    "engine.native": (
        "engine/histogram.py",
        "engine/replica_state.py",
        "engine/replica_counters.py",
        "engine/replica_loop.py",
        "engine/replica.py",
        "engine/steptime.py",
        "simulations/events.py",
        "simulations/router.py",
    ),
    "forecasting.native": ("forecasting/filters.py",),
}
"""Modules compiled together (calls within a group stay in C), by group name.
A group's shared library lands in the package its name starts with, so
``forecasting`` never loads ``engine``'s; each package holding a compiled
module puts its compiled folder first on its ``__path__`` (prescaler_native.loader)."""
MODULES = tuple(m for group in GROUPS.values() for m in group)
PACKAGES = ("engine", "forecasting", "simulations", "prescaler_native")
"""Whose every source file the manifest records: the compiled modules are
checked against the types of what they import from these packages, and this
package's build flags shape the code (the Makefile's prerequisites are the same files)."""
CFLAGS = ("-ffp-contract=off",)


def source_hashes(root: Path = ROOT) -> dict[str, str]:
    """SHA-256 of every source file of PACKAGES, keyed by its path."""
    return {rel: file_sha256(root / rel) for rel in package_sources(root, PACKAGES)}


def _extensions(target_dir: str) -> list[Any]:
    from mypyc.build import mypycify  # dev dependency: ships with mypy

    groups: list[tuple[list[str], str | None]] = [(list(m), n) for n, m in GROUPS.items()]
    extensions = mypycify(list(MODULES), separate=groups, opt_level="3", target_dir=target_dir)
    for ext in extensions:
        ext.extra_compile_args = [*ext.extra_compile_args, *CFLAGS]
    return list(extensions)


def build(out: Path) -> None:
    """Compile MODULES into ``out`` (a package tree), replacing what was there.

    The build goes to a sibling folder first and replaces ``out`` whole once
    it succeeded, so no extension of an earlier build is ever left beside a
    new manifest, and a failed build leaves no manifest at all.
    """
    from setuptools import setup

    # setuptools reads the project's pyproject.toml on the way; its packaging
    # advice is not about this build
    warnings.filterwarnings("ignore", module=r"setuptools(\..*)?$")
    hashes = source_hashes()
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(out, ignore_errors=True)  # a failed build leaves nothing to load
    partial.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="prescaler-native-") as tmp:
        cwd = os.getcwd()
        os.chdir(ROOT)  # mypycify takes paths relative to the package root
        try:
            setup(
                name="prescaler-native",
                ext_modules=_extensions(f"{tmp}/c"),
                script_args=[
                    *("build_ext", "--build-lib", str(partial), "--build-temp", tmp, "-q"),
                ],
            )
        finally:
            os.chdir(cwd)
    manifest = {
        "ext_suffix": ext_suffix(),
        "packages": list(PACKAGES),
        "sources": hashes,
        "extensions": extensions_in(partial),
    }
    (partial / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    partial.rename(out)


def main(argv: list[str]) -> int:
    out = Path(argv[1]).resolve() if len(argv) > 1 else ROOT / "build" / "native"
    build(out)
    print(f"native: {', '.join(MODULES)} compiled into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
