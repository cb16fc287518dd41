"""The screening-fidelity experiment reads the cells' choices and reports
each longer refit's attainment and cost against the scaler's own."""

from __future__ import annotations

import json
from pathlib import Path

from lab.screening_fidelity import chosen_settings, report


def test_the_chosen_settings_come_from_the_cells_of_that_trace_and_lead(tmp_path: Path) -> None:
    """By seed; a cell of another lead time, or whose prescaler side chose
    nothing, adds none."""
    for name, seed, setting in (
        ("t-lead2.5-seed1.json", 1, {"forecast": "off"}),
        ("t-lead2.5-seed0.json", 0, {"forecast": "auto"}),
        ("t-lead2.5-seed2.json", 2, None),
        ("t-lead15-seed0.json", 0, {"forecast": "auto", "minReplicas": "3"}),
    ):
        cell = {"seed": seed, "sides": {"prescaler": {"setting": setting}}}
        (tmp_path / name).write_text(json.dumps(cell))
    assert chosen_settings(tmp_path, "t", 2.5) == [{"forecast": "auto"}, {"forecast": "off"}]


def test_the_table_gives_each_longer_refit_against_the_scalers() -> None:
    """Differences in points of attainment and percent of cost; a setting the
    longer refit moves across the target is marked."""
    doc = {
        "target": 0.727,
        "refits_s": [600.0, 1800.0],
        "settings": [
            {"setting": {}, "runs": [
                {"refit_s": 600.0, "attainment": 0.7272, "cost_usd": 400.0, "wall_s": 45.0},
                {"refit_s": 1800.0, "attainment": 0.7281, "cost_usd": 404.0, "wall_s": 27.0},
            ]},
            {"setting": {}, "runs": [
                {"refit_s": 600.0, "attainment": 0.7280, "cost_usd": 500.0, "wall_s": 50.0},
                {"refit_s": 1800.0, "attainment": 0.7260, "cost_usd": 495.0, "wall_s": 30.0},
            ]},
        ],
    }  # fmt: skip
    rows = report(doc).splitlines()
    assert len(rows) == 4
    assert "72.72 %, $400, 45 s" in rows[2] and "+0.09, +1.0 %, 27 s" in rows[2]
    assert "(flips)" not in rows[2]
    assert "-0.20, -1.0 %, 30 s (flips)" in rows[3]
