"""The machine's idle probe (``lab.cpu_idle_wake``): its workloads, runs and table."""

from __future__ import annotations

import math

import pytest

from lab.cpu_idle_wake import PAUSES_S, measure, summary, workloads


def test_each_workload_computes_a_finite_figure() -> None:
    figures = {name: work() for name, work in workloads().items()}
    assert set(figures) == {"python_loop", "matmul", "memory_pass"}
    assert all(math.isfinite(v) for v in figures.values())


def test_a_run_is_kept_per_pause_in_the_order_given() -> None:
    calls: list[int] = []

    def work() -> float:
        calls.append(1)
        return float(len(calls))

    rows = measure(work, [0.0, 0.002, 0.0])
    assert [r["pause_s"] for r in rows] == [0.0, 0.002, 0.0]
    assert len(calls) == 3
    assert all(set(r) == {"pause_s", "wall_s", "cpu_s", "oversleep_s"} for r in rows)


def test_the_table_has_a_row_per_pause_that_ran() -> None:
    # pause p: walls of 1, 2 and 3 ms plus 10 ms per second of pause; CPU time half of it
    rows = [
        {"pause_s": p, "wall_s": 1e-3 * k + 0.01 * p, "cpu_s": 0.5e-3 * k, "oversleep_s": 1e-4}
        for p in PAUSES_S[:3]
        for k in (1, 2, 3)
    ]
    table = summary(rows)
    assert [r["pause_s"] for r in table] == list(PAUSES_S[:3])
    for r in table:
        assert r["runs"] == 3
        assert r["wall_p50_ms"] == pytest.approx(2.0 + 10.0 * r["pause_s"])
        assert r["cpu_p50_ms"] == pytest.approx(1.0)
        assert r["oversleep_p50_ms"] == pytest.approx(0.1)
        assert r["wall_p50_ms"] < r["wall_p90_ms"] <= 3.0 + 10.0 * r["pause_s"]
