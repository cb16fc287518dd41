"""The efficiency table on real traffic (``-m bench``; one JSON per cell in
the config's directory, default bench-results/efficiency/).

Runs the grid of the lab config's ``efficiency`` section (``--lab-config``;
cells already in the directory are kept) and checks each cell is whole:
a bound on the held-back day and every side's study. What the table shows
(each side's multiple of the bound, prescaler against the best KEDA side)
is recorded and printed, not asserted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lab.efficiency import cell_path, load_config, main
from lab.efficiency_report import cells

pytestmark = [pytest.mark.bench, pytest.mark.timeout(24 * 3600)]


def test_efficiency_table(lab_config_for: Callable[[str], Path]) -> None:
    path = lab_config_for("efficiency")
    config = load_config(path)
    assert main([str(path)]) == 0
    for trace in config.traces:
        for lead in config.leads_min:
            for seed in config.seeds:
                assert cell_path(config.directory, trace, lead, seed).is_file()
    for cell in cells(config.directory):
        assert cell["hindsight"]["terms"]["bound"]["cost_usd"] > 0
        assert all(side["trials"] > 0 for side in cell["sides"].values())
