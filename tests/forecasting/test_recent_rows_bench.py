"""prescaler's recent-row caps on the long shipped rows (``-m bench``;
bench-results/prescaler_recent_rows.json).

``PrescalerConfig.smoother_rows``, ``holdout_rows`` and ``law_grid_rows``
change a fit only where the history is longer than they are: of the
backtest bench's rows (``tests/forecasting/test_backtest_bench.py``), the
per-minute ones with more than ``smoother_rows`` steps and the held-out 10 s
day. This bench backtests prescaler alone on those rows with the protocol's
settings (the same origins and refits), once with the defaults and once with
the caps lifted (the forecaster before them), and records MAE and pinball
loss at 0.9 per row and horizon, their ratios (capped / uncapped) and the
backtests' wall time. The held-out row is reported apart and consulted by
no choice. The test checks only that both configurations scored every row.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

import pytest

from forecasting.backtest import backtest
from forecasting.forecast import Forecaster
from forecasting.prescaler.model import PrescalerConfig, PrescalerForecaster
from tests.forecasting.test_backtest_bench import CASES, HOLDOUT, OUT, TRACES, bench_series

pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]

CONFIGS = {
    "capped": PrescalerConfig(),
    "uncapped": PrescalerConfig(holdout_rows=10**9, smoother_rows=10**9, law_grid_rows=10**9),
}
"""The defaults, and the same forecaster reading every row for everything."""


def _factory(config: PrescalerConfig) -> Callable[[str], Forecaster]:
    return lambda _name: PrescalerForecaster(config)


def test_recent_row_caps_on_the_long_rows() -> None:
    if not TRACES.is_dir():
        pytest.skip(f"{TRACES} not found (traces live beside the checkout)")
    caps = CONFIGS["capped"]
    held = {name for name, *_ in HOLDOUT}
    rows: dict[str, dict[str, Any]] = {}
    for name, step, horizons_s, window in CASES + HOLDOUT:
        series = bench_series(name, step, window)
        if len(series) <= caps.smoother_rows and name not in held:
            continue  # the caps cannot bind: the forecasts are the uncapped ones
        hs = tuple(round(h / series.step_s) for h in horizons_s)
        scores: dict[str, dict[int, tuple[float, float]]] = {}
        walls: dict[str, float] = {}
        for label, config in CONFIGS.items():
            t0 = time.perf_counter()
            result = backtest(series, hs, ("prescaler",), factory=_factory(config))
            walls[label] = time.perf_counter() - t0
            scores[label] = {
                h: (result.scores[h]["prescaler"].mae, result.scores[h]["prescaler"].pinball_p90)
                for h in hs
            }
        for h_s, h in zip(horizons_s, hs, strict=True):
            (mae_c, pin_c), (mae_u, pin_u) = scores["capped"][h], scores["uncapped"][h]
            rows[f"{name}@{h_s}"] = {
                "holdout": name in held,
                "steps": len(series),
                "mae": {"capped": mae_c, "uncapped": mae_u, "ratio": mae_c / mae_u},
                "pinball_p90": {"capped": pin_c, "uncapped": pin_u, "ratio": pin_c / pin_u},
                "backtest_wall_s": walls,
            }
    shipped = [r for r in rows.values() if not r["holdout"]]

    def geomean(metric: str) -> float:
        logs = [math.log(r[metric]["ratio"]) for r in shipped]
        return math.exp(sum(logs) / len(logs)) if logs else math.nan

    doc = {
        "shipped_geomean_mae_ratio": geomean("mae"),
        "shipped_geomean_pinball_ratio": geomean("pinball_p90"),
        "rows": rows,
    }
    OUT.mkdir(exist_ok=True)
    (OUT / "prescaler_recent_rows.json").write_text(json.dumps(doc, indent=2) + "\n")
    for key, r in rows.items():
        print(
            f"{key[:48]:48s} MAE {r['mae']['ratio']:.3f} "
            f"pinball {r['pinball_p90']['ratio']:.3f} "
            f"wall {r['backtest_wall_s']}"
        )
    print(f"shipped geomean: MAE {doc['shipped_geomean_mae_ratio']:.4f}, "
          f"pinball {doc['shipped_geomean_pinball_ratio']:.4f}")  # fmt: skip
    assert shipped and any(r["holdout"] for r in rows.values())
