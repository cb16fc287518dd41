"""Where prediction pays: the regime sweep (``-m bench``; bench-results/regimes.json, .md, .png).

prescaler's trigger tuned with the forecast on and off against the best
tuned KEDA set-up, per regime x lead time x pre-warming (:mod:`lab.regimes`).
The grid and budget are the lab config's ``regimes`` section
(``--lab-config PATH``; lab/configs/default.yaml lists every key), so the
same test runs a reduced sweep on a shared machine and the full one
elsewhere. The test checks the sweep ran every cell and that the verdicts
agree with the figures; whether the targets are met is recorded
(``targets``), not asserted: it is the finding.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lab.regime_config import LEAD_TIMES, load_run
from lab.regimes import run_recorded
from lab.regimes_report import targets_met

pytestmark = [pytest.mark.bench, pytest.mark.timeout(12 * 3600)]

RESULTS = Path(__file__).resolve().parents[2] / "bench-results"


def test_regime_sweep(tmp_path: Path, lab_config_for: Callable[[str], Path]) -> None:
    run = load_run(lab_config_for("regimes"))
    config = run.sweep
    docs = run_recorded(run, RESULTS, tmp_path)
    assert [d["config"]["seed"] for d in docs] == list(run.seeds)
    for one in docs:
        for regime in config.regimes:
            cells = one["regimes"][regime]["cells"]
            assert [c["lead_time_min"] for c in cells] == list(config.leads_min)
            for cell in cells:
                assert cell["lead_time_preset"] == LEAD_TIMES[cell["lead_time_min"]]
                assert set(cell["keda"]) == set(config.keda_sides)
                assert len(cell["prescaler"]) == len(config.prewarm)
                for side in cell["keda"].values():
                    assert side["trials"] == config.trials
        assert one["targets"] == targets_met(one)
