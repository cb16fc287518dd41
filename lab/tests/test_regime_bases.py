"""Each side's written ScaledObject on a sweep's parts (``lab.regime_bases``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.regime_bases import (
    BaseScore,
    main,
    markdown,
    markdown_hours,
    regime_cells,
    score_bases,
)
from lab.regime_config import SweepConfig


def test_written_scaledobjects_are_scored_on_both_parts_against_the_sweeps_targets(
    tmp_path: Path,
) -> None:
    config = SweepConfig(
        regimes=("sparse-bursts",), leads_min=(2.5,), prewarm=(False,), target=0.85,
        focus=True, history_days=0,
    )  # fmt: skip
    cells = regime_cells("sparse-bursts", config, tmp_path)
    rows = score_bases("sparse-bursts", config, ["keda-gateway"], tmp_path, cells=cells)
    assert [(r.side, r.lead_min) for r in rows] == [("keda-gateway", 2.5)]
    row = rows[0]
    for attained, target, cost in (
        (row.tuning_attainment, row.tuning_target, row.tuning_cost_usd),
        (row.held_attainment, row.held_target, row.held_cost_usd),
    ):
        assert 0.0 < attained <= 1.0 and 0.0 < target < 0.85 and cost > 0.0
    assert row.would_be_chosen == (row.tuning_attainment >= row.tuning_target)
    lower = score_bases(
        "sparse-bursts", config, ["keda-gateway"], tmp_path, {"triggers.0.threshold": "0.1"}
    )[0]
    # a fifth of the threshold asks for more replicas: never cheaper
    assert lower.held_cost_usd >= row.held_cost_usd
    table = markdown(rows)
    assert "| keda-gateway | 2.5 min |" in table
    assert table.count("\n") == 3
    # every miss on the held-back part is in exactly one hour's count
    missed = round((1.0 - row.held_attainment) * len(cells[2.5].held))
    assert sum(row.held_misses_by_hour) == missed
    assert len(row.held_misses_by_hour) == 6  # sparse-bursts' focus hours
    hours = markdown_hours(rows)
    if missed:
        assert "| keda-gateway | 2.5 min |" in hours


def test_hours_without_a_miss_say_so() -> None:
    row = BaseScore("s", 2.5, 0.9, 0.8, 1.0, 0.9, 0.8, 1.0, (0, 0, 0))
    assert markdown_hours([row]).startswith("no request missed")
    hit = BaseScore("s", 2.5, 0.9, 0.8, 1.0, 0.9, 0.8, 1.0, (0, 4, 0))
    table = markdown_hours([hit, row])
    assert "| 01h |" in table and "| s | 2.5 min | 4 |" in table and "00h" not in table


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["no-such-regime"], "is not one of"),
        (["sparse-bursts", "--leads", "7"], "no preset for [7.0]"),
        (["sparse-bursts", "--set", "threshold"], "--set wants KEY=VALUE"),
    ],
)
def test_bad_arguments_name_the_cause(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(argv)
    assert says in capsys.readouterr().err
