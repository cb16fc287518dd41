"""A run's fit checked on another run's loads (``lab.profile_fit_across``)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from engine.profile_files import read_profile_file
from lab.profile_fit_across import (
    KeptRun,
    crossing_table,
    crossings,
    fit_table,
    kept_runs,
    loads_table,
    summary_table,
)
from lab.profile_fit_refit import BASE
from lab.tests.test_profile_fit_refit import _run
from lab.tests.test_profile_fit_spread import _fitted, _record


def _kept_run(tolerance: float = 0.25) -> dict[str, Any]:
    """A bench JSON with what the cross-check reads: the refit's fields and a fit
    record, held to ``tolerance`` on every figure."""
    doc = _run()
    doc["fits"]["bench"] = _record(_fitted())
    doc["target_relative_error"] = tolerance
    doc["target_p90_ttft_relative_error"] = tolerance
    return doc


def _slower(doc: dict[str, Any], factor: float) -> dict[str, Any]:
    """The same run on a server ``factor`` times as slow to its first token on load B."""
    out = copy.deepcopy(doc)
    out["real"]["median_ttft_s"] *= factor
    return out


def test_every_fit_meets_every_run_and_its_own_is_the_diagonal() -> None:
    runs = [KeptRun("one", 0, _kept_run()), KeptRun("two", 0, _slower(_kept_run(), 2.0))]
    rows = crossings(runs, read_profile_file(BASE))
    assert [(r.fit_run, r.load_run, r.own) for r in rows] == [
        ("one", "one", True), ("one", "two", False), ("two", "one", False), ("two", "two", True),
    ]  # fmt: skip
    by_pair = {(r.fit_run, r.load_run): dict((n, e) for n, e, _ in r.errors) for r in rows}
    own = by_pair["one", "one"]["B TTFT p50"]
    # the same fit, a server twice as slow: the prediction is half as far above it
    assert by_pair["one", "two"]["B TTFT p50"] == pytest.approx((1 + own) / 2 - 1)
    # load C's figures are the run's, not load B's
    assert by_pair["one", "two"]["C TTFT p50"] == by_pair["one", "one"]["C TTFT p50"]


def test_the_tables_count_own_runs_sessions_and_misses_apart() -> None:
    # held to 10x every figure, the made-up runs meet every target; a server that
    # answers load B 1000 times as fast does not
    runs = [
        KeptRun("one", 0, _kept_run(tolerance=10.0)),
        KeptRun("two", 0, _kept_run(tolerance=10.0)),
        KeptRun("three", 1, _slower(_kept_run(tolerance=10.0), 0.001)),
    ]
    rows = crossings(runs, read_profile_file(BASE))
    relations = {(r.fit_run, r.load_run): r.relation for r in rows}
    assert relations["one", "two"] == "the same session"
    assert relations["three", "one"] == relations["one", "three"] == "another session"
    assert {(r.fit_run, r.load_run) for r in rows if not r.met} == {
        ("one", "three"), ("two", "three"), ("three", "three"),
    }  # fmt: skip
    table = crossing_table(rows)
    assert "| one | three | **+" in table  # load B's TTFT miss in bold
    assert "| one | two | " in table and "| yes |" in table
    assert table.count("(own)") == 3
    summary = summary_table(rows)
    assert "| its own run | 3 | 2 |" in summary
    assert "| the same session | 2 | 2 |" in summary
    assert "| another session | 4 | 2 |" in summary
    assert "| one | 1 of 1 | 1 of 1 | 0 of 1 |" in fit_table(rows)
    assert "| three | 0 of 1 | - | 0 of 2 |" in loads_table(rows)
    assert "| one | 1 of 1 | 1 of 1 | 1 of 1 |" in loads_table(rows)


def test_the_command_line_parts_sessions_with_a_double_dash(tmp_path: Path) -> None:
    paths = []
    for name in ("a", "b", "c"):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(_kept_run()))
        paths.append(str(path))
    runs = kept_runs([paths[0], paths[1], "--", paths[2]])
    assert [(r.name, r.session) for r in runs] == [("a", 0), ("b", 0), ("c", 1)]
    with pytest.raises(ValueError, match="each run once"):
        crossings(kept_runs([paths[0], "--", paths[0]]), read_profile_file(BASE))
