"""Benchmark (``-m bench``): the forecast ablation grid (:mod:`lab.forecast_ablation`).

The grid is the lab config's ``forecast_ablation`` section (``--lab-config``);
writes ``bench-results/forecast_ablation.json`` and ``forecast_ablation.md``
(``forecast_ablation_day.*`` when whole days are scored, ``focus: false``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lab.forecast_ablation import AblationConfig, markdown_table, run_recorded

pytestmark = [pytest.mark.bench, pytest.mark.timeout(7200)]

RESULTS = Path(__file__).resolve().parents[2] / "bench-results"


def test_forecast_ablation(tmp_path: Path, lab_config_for: Callable[[str], Path]) -> None:
    config = AblationConfig.load(lab_config_for("forecast_ablation"))
    doc = run_recorded(config, RESULTS, tmp_path)
    print(markdown_table(doc))
    for cell in doc["cells"]:
        for row in cell["sides"].values():
            # every request accounted for
            assert row["served"] + row["timed_out"] + row["rejected"] == row["requests"]
