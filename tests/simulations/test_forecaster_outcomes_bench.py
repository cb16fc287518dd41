"""Benchmark (``make bench``): forecasters compared by the outcome they buy.

Pinball loss ranks forecasts; a platform engineer pays for replicas and SLO
misses. Here the predictive policy runs on every shipped trace window of the
outcome bench (``test_simulator_bench.CASES``, with the demand before a
window backfilled as the live scaler would) once per forecasting method: the
anchors, prescaler's default, and statsforecast's automatic models (simulation
only). Per trace it reports each method's SLO attainment and cost, and
whether another method is at least as good on attainment and cheaper
(then prescaler's default is dominated there, by the cost ratio given).

Writes ``bench-results/simulator_forecasters.json``.
"""

from __future__ import annotations

import io
import json
import time

import pytest

from forecasting import METHODS
from forecasting.baselines import available
from simulations.cli import SimulateOptions, simulate
from tests.simulations.test_simulator_bench import CASES, OUT, TRACES, window_and_scale

BASELINE_METHODS = ("sf_autoets", "sf_autotheta")
"""The statsforecast models fast enough to refit in a long replay (AutoARIMA and
MSTL take seconds per fit; they stay in the forecasting backtest)."""


def _dominating(rows: dict[str, dict[str, float]], who: str) -> tuple[str, float] | None:
    """The cheapest method with attainment >= ``who``'s and lower cost, and
    ``who``'s cost as a multiple of it; None when ``who`` is not dominated."""
    mine = rows[who]
    better = [
        (r["cost_usd"], name)
        for name, r in rows.items()
        if name != who
        and r["slo_attainment"] >= mine["slo_attainment"]
        and r["cost_usd"] < mine["cost_usd"]
    ]
    if not better:
        return None
    cost, name = min(better)
    return name, mine["cost_usd"] / cost


@pytest.mark.bench
@pytest.mark.timeout(7200)
def test_bench_forecasters_by_outcome() -> None:
    if not TRACES.is_dir():
        pytest.skip(f"{TRACES} not found (traces live beside the checkout)")
    methods = [*METHODS, *(BASELINE_METHODS if available() else ())]
    OUT.mkdir(exist_ok=True)
    report: dict[str, object] = {}
    for name, length in CASES:
        path = TRACES / name
        if not path.exists():
            continue
        start, duration, scale = window_and_scale(path, length)
        rows: dict[str, dict[str, float]] = {}
        t0 = time.perf_counter()
        for method in methods:
            opts = SimulateOptions(
                trace=str(path), policies=("predictive",), rate_scale=scale, start_s=start,
                duration_s=duration, forecaster=method, quiet=True,
            )  # fmt: skip
            doc = simulate(opts, out=io.StringIO())
            p = doc["policies"]["predictive"]
            rows[method] = {
                "slo_attainment": p["slo_attainment"],
                "cost_usd": p["cost_usd"],
                "ttft_p99_s": p["ttft_p99_s"],
            }
        dom = _dominating(rows, "prescaler")
        report[name] = {
            "start_s": start,
            "rate_scale": scale,
            "wall_s": round(time.perf_counter() - t0, 1),
            "methods": rows,
            "prescaler_dominated_by": None if dom is None else dom[0],
            "prescaler_cost_over_dominating": None if dom is None else dom[1],
        }
        print(f"\n== {name}")
        for method, r in sorted(rows.items(), key=lambda kv: kv[1]["cost_usd"]):
            print(f"  {method:16s} SLO {r['slo_attainment']:.2%}  cost ${r['cost_usd']:.2f}")
        print(f"  prescaler dominated by: {dom}")
        (OUT / "simulator_forecasters.json").write_text(json.dumps(report, indent=2) + "\n")
    assert report
