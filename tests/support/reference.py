"""The reference folder beside the checkout: where provenance tests find originals.

A few tests prove that data shipped in this repo (a CSV under tests/engine/data,
seed manifests under tests/manifests/data) is a faithful copy of the reference
material it was taken from. That material is not part of the repo and a
fresh clone has none of it, so every such test reaches it through
:func:`reference_path` alone: outside CI a missing folder skips the test with
the reason; in CI (``tests.support.ci``) it fails, because there the check
is expected to run. The tests that need only the shipped copies never call it,
so ``make test`` passes on a clone with nothing beside it.

``pytest --reference-dir PATH`` points elsewhere; ``--reference-dir=``
hides the folder (tests/test_reference_folder.py does, to prove the skip).
"""

from __future__ import annotations

from pathlib import Path

from tests.support.ci import fail_in_ci_else_skip
from tests.support.options import suite_options

ROOT = Path(__file__).resolve().parents[2]
OPTION = "--reference-dir"
DEFAULT = ROOT.parent / "shared"


def reference_dir() -> Path | None:
    """The folder if present (``--reference-dir``, else the default), else None."""
    configured = suite_options().reference_dir
    folder = DEFAULT if configured is None else (Path(configured) if configured else None)
    return folder if folder is not None and folder.is_dir() else None


def reference_path(*parts: str) -> Path:
    """``parts`` under the reference folder; skip (fail in CI) when it is not there."""
    folder = reference_dir()
    if folder is None:
        fail_in_ci_else_skip(
            f"reference folder not found (give {OPTION}; a fresh clone has none): "
            f"cannot compare with the original of {'/'.join(parts)}"
        )
    path = folder.joinpath(*parts)
    if not path.exists():
        fail_in_ci_else_skip(f"{'/'.join(parts)} not in the reference folder {folder}")
    return path
