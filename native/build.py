"""Compile the hot pure-Python modules to C with mypyc (``make native``).

The replica model's stepping and the request path around it are most of a
simulation's time, and the smoothers' loops most of the forecaster's. mypyc
turns the same type-annotated source into C extensions 2-3x faster (far more
for the float loops), with the same arithmetic: C doubles are Python floats,
ints stay exact, and floating-point contraction (fused multiply-add) is
turned off so no compiler merges two roundings into one. Records and
forecasts are identical (``tests/engine/test_native.py`` checks it). The
pure-Python modules stay the reference and the fallback.

The extensions go to ``build/native/`` beside a manifest of the sources'
SHA-256. ``native/loader.py`` puts them ahead of the sources only while
every hash still matches, so an edited module never runs a stale build.

Usage: ``python native/build.py [OUT_DIR]`` from the repository root.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import sysconfig
import tempfile
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GROUPS: dict[str, tuple[str, ...]] = {
    "engine.native": ("engine/replica.py", "engine/steptime.py", "simulations/router.py"),
    "forecasting.native": ("forecasting/filters.py",),
}
"""Modules compiled together (calls within a group stay in C), by group name.
A group's shared library lands in the package its name starts with, so
``forecasting`` never loads ``engine``'s; each package holding a compiled
module puts its compiled folder first on its ``__path__`` (native.loader)."""
MODULES = tuple(m for group in GROUPS.values() for m in group)
CFLAGS = ("-ffp-contract=off",)
MANIFEST = "manifest.json"


def source_hashes(root: Path = ROOT) -> dict[str, str]:
    """SHA-256 of each compiled module's source, keyed by its path."""
    return {m: hashlib.sha256((root / m).read_bytes()).hexdigest() for m in MODULES}


def _extensions(target_dir: str) -> list[Any]:
    from mypyc.build import mypycify  # dev dependency: ships with mypy

    groups: list[tuple[list[str], str | None]] = [(list(m), n) for n, m in GROUPS.items()]
    extensions = mypycify(list(MODULES), separate=groups, opt_level="3", target_dir=target_dir)
    for ext in extensions:
        ext.extra_compile_args = [*ext.extra_compile_args, *CFLAGS]
    return list(extensions)


def build(out: Path) -> None:
    """Compile MODULES into ``out`` (a package tree) and write the manifest last."""
    from setuptools import setup

    # setuptools reads the project's pyproject.toml on the way; its packaging
    # advice is not about this build
    warnings.filterwarnings("ignore", module=r"setuptools(\..*)?$")
    hashes = source_hashes()
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)  # a half-done build is never used
    with tempfile.TemporaryDirectory(prefix="prescaler-native-") as tmp:
        cwd = os.getcwd()
        os.chdir(ROOT)  # mypycify takes paths relative to the package root
        try:
            setup(
                name="prescaler-native",
                ext_modules=_extensions(f"{tmp}/c"),
                script_args=[
                    *("build_ext", "--build-lib", str(out), "--build-temp", tmp, "-q"),
                ],
            )
        finally:
            os.chdir(cwd)
    manifest = {
        "ext_suffix": sysconfig.get_config_var("EXT_SUFFIX"),
        "sources": hashes,
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def main(argv: list[str]) -> int:
    out = Path(argv[1]).resolve() if len(argv) > 1 else ROOT / "build" / "native"
    build(out)
    print(f"native: {', '.join(MODULES)} compiled into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
