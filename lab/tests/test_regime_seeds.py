"""The sweep's summary over seeds, on sweep documents built by hand."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from lab.regime_config import SweepConfig
from lab.regime_seeds import markdown_seeds, run_seeds, seeds_summary
from lab.regimes import run_sweeps


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a / b


def _sweep(seed: int, keda: float | None, on: float | None, off: float | None) -> dict[str, Any]:
    row = {
        "forecast-on": {"cost_at_target_usd": on},
        "forecast-off": {"cost_at_target_usd": off},
        "ratio_on_vs_best_keda": _ratio(on, keda),
        "ratio_off_vs_best_keda": _ratio(off, keda),
        "ratio_forecast_on_vs_off": _ratio(on, off),
    }
    cell = {
        "lead_time_min": 15.0,
        "keda": {"keda-gateway": {"cost_at_target_usd": keda}},
        "best_keda_side": None if keda is None else "keda-gateway",
        "best_keda_cost_usd": keda,
        "prescaler": {"prewarm-off": row},
    }
    return {
        "config": {"seed": seed, "keda_sides": ["keda-gateway"]},
        "regimes": {"sparse-bursts": {"cells": [cell]}},
    }


def test_a_verdict_must_hold_under_every_seed() -> None:
    # seed 0: much better; seed 1: prescaler's forecast-on setting misses
    # out of sample while KEDA meets its target
    docs = [_sweep(0, keda=10.0, on=7.0, off=9.0), _sweep(1, keda=10.0, on=None, off=9.5)]
    summary = seeds_summary(docs)
    rows = summary["cells"]["sparse-bursts @ 15 min, prewarm-off"]
    assert [r["seed"] for r in rows] == [0, 1]
    assert rows[0]["ratio_on_vs_best_keda"] == pytest.approx(0.7)
    assert rows[1]["ratio_on_vs_best_keda"] is None
    held = summary["held_out_seeds"]
    assert held["sparse-bursts @ 15 min: prescaler prewarm-off, forecast on"] == [0]
    assert held["sparse-bursts @ 15 min: prescaler prewarm-off, forecast off"] == [0, 1]
    assert held["sparse-bursts @ 15 min: keda-gateway"] == [0, 1]
    targets = summary["targets"]
    # forecast off (0.95x) keeps seed 1 never worse; the 0.7x of seed 0 is not confirmed
    assert targets["never_worse_every_seed"]
    assert targets["somewhere_much_better_every_seed"] == []


def test_a_cell_worse_under_one_seed_is_named() -> None:
    docs = [_sweep(0, keda=10.0, on=7.0, off=9.0), _sweep(2, keda=10.0, on=12.0, off=None)]
    targets = seeds_summary(docs)["targets"]
    assert not targets["never_worse_every_seed"]
    assert targets["worse_cells"] == ["sparse-bursts @ 15 min, prewarm-off"]


def test_much_better_under_every_seed_names_the_cell() -> None:
    docs = [_sweep(0, keda=10.0, on=7.0, off=9.0), _sweep(1, keda=10.0, on=7.5, off=9.0)]
    targets = seeds_summary(docs)["targets"]
    assert targets["somewhere_much_better_every_seed"] == ["sparse-bursts @ 15 min, prewarm-off"]


def test_the_table_has_a_row_per_seed_and_the_hold_out_counts() -> None:
    docs = [_sweep(0, keda=10.0, on=7.0, off=9.0), _sweep(1, keda=None, on=None, off=9.5)]
    text = markdown_seeds({"seeds": [0, 1], "summary": seeds_summary(docs)})
    lines = text.splitlines()
    assert lines[2] == (
        "| sparse-bursts @ 15 min, prewarm-off | 0 | $10.00 (keda-gateway) | $7.00 | $9.00 "
        "| 0.70x | 0.78x |"
    )
    assert (
        lines[3] == "| sparse-bursts @ 15 min, prewarm-off | 1 | missed | missed | $9.50 | - | - |"
    )
    assert "| sparse-bursts @ 15 min: keda-gateway | 1 of 2 (0) |" in lines
    assert (
        "| sparse-bursts @ 15 min: prescaler prewarm-off, forecast off | 2 of 2 (0, 1) |" in lines
    )
    assert lines[-1] == "Much better under every seed: nowhere"


def test_a_sweep_of_prescaler_alone_says_keda_was_not_tuned() -> None:
    """Rerunning prescaler's columns without KEDA sides is not a KEDA miss,
    and no never-worse verdict is drawn from it."""
    docs = [_sweep(s, keda=None, on=7.0, off=9.0) for s in (0, 1)]
    for doc in docs:
        cell = doc["regimes"]["sparse-bursts"]["cells"][0]
        cell["keda"] = {}
        doc["config"]["keda_sides"] = []
    lines = markdown_seeds({"seeds": [0, 1], "summary": seeds_summary(docs)}).splitlines()
    assert lines[2] == (
        "| sparse-bursts @ 15 min, prewarm-off | 0 | not tuned | $7.00 | $9.00 | - | 0.78x |"
    )
    assert "Never worse under every seed: not judged (no KEDA side tuned)" in lines


def test_further_forecasters_get_their_own_table_and_hold_out_counts() -> None:
    """A sweep with ``forecasters`` compares each one's tuned cost with
    prescaler's own (on) and none (off), seed by seed."""
    docs = [_sweep(0, keda=10.0, on=8.0, off=9.0), _sweep(1, keda=10.0, on=7.0, off=9.5)]
    for doc, cost in zip(docs, (6.0, None), strict=True):
        row = doc["regimes"]["sparse-bursts"]["cells"][0]["prescaler"]["prewarm-off"]
        row["forecast-sf_autoets"] = {"cost_at_target_usd": cost}
    summary = seeds_summary(docs)
    rows = summary["cells"]["sparse-bursts @ 15 min, prewarm-off"]
    assert [r["forecasters_cost_usd"] for r in rows] == [{"sf_autoets": 6.0}, {"sf_autoets": None}]
    assert summary["held_out_seeds"][
        "sparse-bursts @ 15 min: prescaler prewarm-off, forecast sf_autoets"
    ] == [0]
    lines = markdown_seeds({"seeds": [0, 1], "summary": summary}).splitlines()
    assert "| cell | seed | prescaler's (on) | sf_autoets | none (off) | sf_autoets / on |" in lines
    assert "| sparse-bursts @ 15 min, prewarm-off | 0 | $8.00 | $6.00 | $9.00 | 0.75x |" in lines
    assert "| sparse-bursts @ 15 min, prewarm-off | 1 | $7.00 | missed | $9.50 | - |" in lines
    # without further forecasters there is no such table
    assert "prescaler's (on)" not in markdown_seeds(
        {"seeds": [0], "summary": seeds_summary([_sweep(0, keda=10.0, on=8.0, off=9.0)])}
    )


@pytest.mark.parametrize("seeds", [[], [1, 1]], ids=["none", "repeated"])
def test_seeds_must_be_distinct(seeds: list[int], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="seeds must be distinct"):
        run_seeds(SweepConfig(), seeds, tmp_path)


def test_two_sweeps_in_one_directory_are_refused(tmp_path: Path) -> None:
    config = SweepConfig(regimes=("sparse-bursts",), leads_min=(15.0,), prewarm=(False,))
    with pytest.raises(ValueError, match="its own directory"):
        run_sweeps([(config, tmp_path), (dataclasses.replace(config, seed=1), tmp_path)])
