"""The house's shape holds: no import loop, no long module or docstring, no
``PRESCALER_*`` variable but the product settings, every decision record short."""

from __future__ import annotations

import sys
from pathlib import Path

from lab.house_counts import counts, import_loops

ROOT = Path(__file__).resolve().parents[2]
PRODUCT_SETTINGS = {"PRESCALER_PROFILE_DIR", "PRESCALER_PURE_PYTHON", "PRESCALER_NATIVE_DIR"}


def test_the_product_keeps_its_shape() -> None:
    c = counts(ROOT)
    assert c["import_loops"] == []
    assert c["modules_over_600_lines"] == []
    assert c["docstrings_over_15_lines"] == []
    names = c["prescaler_env_names"]
    assert isinstance(names, list) and set(names) <= PRODUCT_SETTINGS
    records = c["decision_record_lines"]
    assert isinstance(records, dict) and records
    assert max(records.values()) < 300
    assert isinstance(c["product_lines"], int) and c["product_lines"] > 0


def test_a_loop_is_found(tmp_path: Path) -> None:
    """Two modules importing each other are one loop; a chain is none."""
    pkg = tmp_path / "looppkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from looppkg import b\n")
    (pkg / "b.py").write_text("def f() -> None:\n    from looppkg import a\n")
    (pkg / "c.py").write_text("from looppkg import a\n")
    sys.path.insert(0, str(tmp_path))
    try:
        assert import_loops(("looppkg",)) == [["looppkg.a", "looppkg.b"]]
    finally:
        sys.path.remove(str(tmp_path))
