"""The forecast ablation's pure parts: where a session starts, when the
fleet gained a replica for it, and the grid read from a lab config."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lab.config import ConfigError
from lab.forecast_ablation import (
    SIDES,
    AblationConfig,
    markdown_table,
    onset_minutes,
    replica_lead,
)
from lab.regime_generator import regime_counts


def test_sparse_bursts_sessions_start_where_the_rate_leaves_zero() -> None:
    rate = regime_counts("sparse-bursts", 2, seed=3) / 60.0
    expected = [m for m in range(1, len(rate)) if rate[m] > 0 and rate[m - 1] == 0]
    assert onset_minutes(rate) == expected
    assert len(expected) == 8  # four sessions a day


def test_business_hours_ramp_and_nightly_batch_start_once_a_day() -> None:
    ramp = onset_minutes(regime_counts("business-hours", 1, seed=0) / 60.0)
    assert len(ramp) == 1 and abs(ramp[0] - 9 * 60) <= 6  # 09:00 give or take 5, +1
    assert onset_minutes(regime_counts("scheduled-batch", 1, seed=0) / 60.0) == [120]


def test_first_replica_after_the_start_counts_late_and_before_counts_early() -> None:
    t = np.arange(0.0, 3600.0, 10.0)
    late = np.where(t >= 2000.0 + 90.0, 1.0, 0.0)
    assert replica_lead(t, late, 2000.0)["added_ready_s"] == 90.0
    early = np.where(t >= 2000.0 - 300.0, 1.0, 0.0)
    found = replica_lead(t, early, 2000.0)
    assert found["added_ready_s"] == -300.0 and found["ready_at_onset"] == 1.0
    assert replica_lead(t, np.zeros_like(t), 2000.0)["added_ready_s"] is None


def test_a_fleet_scaling_in_before_the_start_counts_from_its_low_point() -> None:
    t = np.arange(0.0, 3600.0, 10.0)
    ready = np.select([t < 1500.0, t < 2100.0], [3.0, 0.0], 1.0)
    found = replica_lead(t, ready, 2000.0)
    assert found["low_before"] == 0.0 and found["added_ready_s"] == 100.0


@given(st.lists(st.integers(0, 4), min_size=2, max_size=200), st.integers(0, 199))
def test_the_added_replica_is_the_first_above_the_low_point(counts: list[int], at: int) -> None:
    t = 15.0 * np.arange(len(counts))
    ready = np.asarray(counts, dtype=float)
    onset = float(t[min(at, len(t) - 1)])
    found = replica_lead(t, ready, onset)
    added = found["added_ready_s"]
    if added is None:
        return
    k = int(np.flatnonzero(t == onset + added)[0])
    assert found["low_before"] is not None and ready[k] > found["low_before"]


def test_grid_from_a_lab_config_names_a_bad_key(tmp_path: Path) -> None:
    path = tmp_path / "lab.yaml"
    path.write_text("forecast_ablation:\n  regimes: [business-hours]\n  leads_min: [15]\n")
    config = AblationConfig.load(path)
    assert config.regimes == ("business-hours",) and config.leads_min == (15.0,)
    path.write_text("forecast_ablation:\n  leads_min: [soon]\n")
    with pytest.raises(ConfigError, match=r"forecast_ablation\.leads_min: expected a finite"):
        AblationConfig.load(path)
    path.write_text("forecast_ablation:\n  leads_min: [7]\n")
    with pytest.raises(ConfigError, match=r"forecast_ablation\.leads_min: lead time 7 min"):
        AblationConfig.load(path)
    path.write_text("forecast_ablation:\n  focus: 1\n")
    with pytest.raises(ConfigError, match=r"lab\.yaml: forecast_ablation\.focus: expected true"):
        AblationConfig.load(path)
    with pytest.raises(ValueError, match="unknown side"):
        AblationConfig(sides=("keda-cpu",))


def test_table_has_a_row_per_side_and_the_pair_ratio() -> None:
    row = {
        "served": 9,
        "timed_out": 1,
        "rejected": 0,
        "requests": 10,
        "attainment": 0.9,
        "cost_usd": 2.0,
        "onsets": [
            {"added_ready_s": -120.0, "ready_at_onset": 1.0, "low_before": 0.0},
            {"added_ready_s": 60.0, "ready_at_onset": 1.0, "low_before": 1.0},
            {"added_ready_s": None, "ready_at_onset": 0.0},
            {"added_ready_s": None, "ready_at_onset": 2.0},
        ],
    }
    doc = {
        "cells": [
            {
                "regime": "sparse-bursts",
                "lead_time_min": 15.0,
                "on_vs_off_cost": 1.0,
                "on_minus_off_attainment": 0.0,
                "sides": {name: row for name in SIDES},
            }
        ]
    }
    lines = markdown_table(doc).splitlines()
    assert len(lines) == 2 + len(SIDES)
    assert "-2.0 / +1.0 (from 1) / never / held 2" in lines[2] and "1.00x" in lines[2]
    assert "1.00x" not in lines[2 + SIDES.index("keda-gateway")]  # on prescaler's rows only
