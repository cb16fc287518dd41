"""Each side's written ScaledObject on a sweep's parts (``benchmarks.regime_bases``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.regime_bases import main, markdown, score_bases
from benchmarks.regimes import SweepConfig


def test_written_scaledobjects_are_scored_on_both_parts_against_the_sweeps_targets(
    tmp_path: Path,
) -> None:
    config = SweepConfig(
        regimes=("sparse-bursts",), leads_min=(2.5,), prewarm=(False,), target=0.85,
        focus=True, history_days=0,
    )  # fmt: skip
    rows = score_bases("sparse-bursts", config, ["keda-gateway"], tmp_path)
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
