"""Benchmark (``-m bench``): the forecast ablation grid (:mod:`benchmarks.forecast_ablation`).

The grid comes from ``PRESCALER_ABLATION_{REGIMES,LEADS,SIDES,FOCUS,JOBS}``;
writes ``bench-results/forecast_ablation.json`` and ``forecast_ablation.md``
(``forecast_ablation_day.*`` when whole days are scored, FOCUS 0).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from benchmarks.forecast_ablation import AblationConfig, markdown_table, run_ablation

pytestmark = [pytest.mark.bench, pytest.mark.timeout(7200)]

RESULTS = Path(__file__).resolve().parents[2] / "bench-results"


def test_forecast_ablation(tmp_path: Path) -> None:
    config = AblationConfig.from_env(os.environ)
    doc = run_ablation(config, tmp_path)
    doc["load_average"] = list(os.getloadavg())
    RESULTS.mkdir(exist_ok=True)
    stem = "forecast_ablation" if config.focus else "forecast_ablation_day"
    (RESULTS / f"{stem}.json").write_text(json.dumps(doc, indent=2) + "\n", "utf-8")
    table = markdown_table(doc)
    (RESULTS / f"{stem}.md").write_text(table, encoding="utf-8")
    print(table)
    for cell in doc["cells"]:
        for row in cell["sides"].values():
            # every request accounted for
            assert row["served"] + row["timed_out"] + row["rejected"] == row["requests"]
