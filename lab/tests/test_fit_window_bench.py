"""The fit window's accuracy and cost (``-m bench``; bench-results/fit_window.json, .md).

A tracker's forecaster fitted on the last 2 h against one fitted on the last
3 days, on each regime's trace as the tracker reads it
(:mod:`lab.fit_window`), over the regimes of the lab config's
``fit_window`` section (``--lab-config``). The test checks what the long
window is for: its fits find the daily season, the short one's cannot; how
much that buys is recorded, not asserted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lab.fit_window import FitWindowConfig, run_recorded

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]

RESULTS = Path(__file__).resolve().parents[2] / "bench-results"


def test_fit_window(lab_config_for: Callable[[str], Path]) -> None:
    doc = run_recorded(FitWindowConfig.load(lab_config_for("fit_window")), RESULTS)
    day_bins = round(86400 / doc["step_s"])
    for row in doc["regimes"].values():
        assert row["2h"]["cost"]["seasonal_periods_bins"] == []
        assert row["3d"]["cost"]["seasonal_periods_bins"] == [day_bins]
        for label in ("2h", "3d"):
            assert row[label]["tracker_bytes"] > 0
            assert all(a["origins"] > 0 for a in row[label]["accuracy"].values())
