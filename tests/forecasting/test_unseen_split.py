"""Data tuned on is never data reported as unseen: the backtest's split is pinned.

The forecasting bench (``tests/forecasting/test_backtest_bench.py``) scores
``CASES``, the shipped rows every design choice is measured on, and
``HOLDOUT``, the last day of the 10-s Azure 2024 coding counts, which no
choice may consult and which is reported apart. The per-minute coding counts
in ``CASES`` are the same requests binned by minute, so that row stops where
the held-out day begins (``SAME_DEMAND``). These tests fail if the holdout is
renamed, moved, named by a shipped row, reached through another resolution
of its demand, or read by any default in the code.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from forecasting.readers import read_series
from tests.forecasting.test_backtest_bench import CASES, HOLDOUT, SAME_DEMAND, bench_series
from tests.support.reference import reference_path

ROOT = Path(__file__).parents[2]
HOLDOUT_FILE = "azure_llm2024_coding_10s_counts.csv"
DAY_S = 86_400.0


def test_the_holdout_is_the_last_day_of_the_10s_coding_counts() -> None:
    """The unseen rows are fixed: one file, its last day (8,640 steps of 10 s),
    at 60 s and 300 s. Changing them is a decision for the decisions record,
    not a side effect."""
    assert HOLDOUT == [(HOLDOUT_FILE, None, (60, 300), 8_640)]
    assert DAY_S == 8_640 * 10.0


def test_no_shipped_row_is_a_holdout_file_and_aliases_stop_before_it() -> None:
    """No tuned row reads a holdout file; a tuned file that holds a holdout's
    demand at another resolution is declared and stops by the held-out day
    (six days into the week-long trace)."""
    tuned = {name for name, *_ in CASES}
    held = {name for name, *_ in HOLDOUT}
    assert tuned.isdisjoint(held)
    assert set(SAME_DEMAND) <= tuned
    for holdout_file, held_from_s in SAME_DEMAND.values():
        assert holdout_file in held
        assert held_from_s <= 6 * DAY_S  # the week's last day is held out


def test_no_default_in_the_code_names_a_holdout_file() -> None:
    """No module of the product (defaults, grids, CLIs) names a holdout file,
    so no default can have been chosen on it; only the benches may."""
    stems = {Path(name).stem for name, *_ in HOLDOUT}
    packages = ("engine", "forecasting", "prescaler", "scaler", "simulations", "stack")
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            for stem in stems:
                assert stem not in text, f"{path.relative_to(ROOT)} names {stem}"


def test_the_per_minute_row_is_the_holdouts_demand_and_ends_before_its_day() -> None:
    """The declared alias is real (the per-minute counts are the 10-s counts
    binned by minute) and the shipped row built from it ends before the first
    held-out 10-s bin begins (a bin labelled T covers [T - 5 s, T + 5 s))."""
    ten_s_path = reference_path("traces", HOLDOUT_FILE)
    ten_s = read_series(ten_s_path)
    name, step, _, window = HOLDOUT[0]
    held = bench_series(name, step, window)
    held_from = held.start_s - ten_s.start_s - ten_s.step_s / 2
    for case_name, (holdout_file, _) in SAME_DEMAND.items():
        assert holdout_file == HOLDOUT_FILE
        full = read_series(reference_path("traces", case_name))
        by_minute = read_series(ten_s_path, full.step_s)
        n = min(len(full), len(by_minute))
        assert np.corrcoef(full.values[:n], by_minute.values[:n])[0, 1] > 0.999
        row = next(c for c in CASES if c[0] == case_name)
        case = bench_series(row[0], row[1], row[3])
        assert case.start_s + len(case) * case.step_s - full.start_s <= held_from


def test_the_simulator_benches_compare_forecasters_before_the_held_out_day() -> None:
    """The outcome benches (which compare forecasting methods by cost and SLO)
    replay a window of the 10-s counts and backfill the demand before it: the
    window must end before the held-out day."""
    from tests.simulations.test_simulator_bench import CASES as SIM_CASES
    from tests.simulations.test_simulator_bench import window_and_scale

    aliases = {HOLDOUT_FILE, *SAME_DEMAND}
    for name, length_s in SIM_CASES:
        if name not in aliases:
            continue
        assert length_s is not None, f"{name}: the whole trace holds the held-out day"
        start_s, _, _ = window_and_scale(reference_path("traces", name), length_s)
        assert start_s + length_s <= 6 * DAY_S - 5.0, name
