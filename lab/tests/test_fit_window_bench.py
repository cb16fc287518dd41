"""The fit window's accuracy and cost (``-m bench``; bench-results/fit_window.json, .md).

A tracker's forecaster fitted on the last 2 h against one fitted on the last
3 days, on each regime's trace as the tracker reads it
(:mod:`benchmarks.fit_window`). ``PRESCALER_FIT_WINDOW_REGIMES`` (all)
limits the regimes. The test checks what the long window is for: its fits
find the daily season, the short one's cannot; how much that buys is
recorded, not asserted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from benchmarks.fit_window import FitWindowConfig, markdown, run
from simulations.regimes import REGIMES

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]

RESULTS = Path(__file__).resolve().parents[2] / "bench-results"


def test_fit_window() -> None:
    names = os.environ.get("PRESCALER_FIT_WINDOW_REGIMES", ",".join(REGIMES))
    config = FitWindowConfig(regimes=tuple(n.strip() for n in names.split(",") if n.strip()))
    doc = run(config)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "fit_window.json").write_text(json.dumps(doc, indent=2) + "\n")
    (RESULTS / "fit_window.md").write_text(markdown(doc))
    day_bins = round(86400 / doc["step_s"])
    for row in doc["regimes"].values():
        assert row["2h"]["cost"]["seasonal_periods_bins"] == []
        assert row["3d"]["cost"]["seasonal_periods_bins"] == [day_bins]
        for label in ("2h", "3d"):
            assert row[label]["tracker_bytes"] > 0
            assert all(a["origins"] > 0 for a in row[label]["accuracy"].values())
