"""What the forecasting bench reads off a backtest beside the scores: a row cut
before a held-out span, and the best anchor and statsforecast baseline."""

from __future__ import annotations

import math

from forecasting.backtest import BacktestResult
from forecasting.registry import ANCHORS, BASELINES
from forecasting.series import DemandSeries


def series_until(series: DemandSeries, end_s: float) -> DemandSeries:
    """The steps that end at or before ``end_s`` (all of them if the series
    ends by then): a row that must not see a span held out elsewhere (the
    same demand at another resolution) stops where that span begins."""
    if not math.isfinite(end_s):
        raise ValueError(f"{series.source}: end_s must be finite, got {end_s}")
    keep = math.floor((end_s - series.start_s) / series.step_s + 1e-9)
    if keep >= series.values.size:
        return series
    if keep < 1:
        raise ValueError(f"{series.source}: no step ends by {end_s:g} s")
    return DemandSeries(
        series.start_s, series.step_s, series.values[:keep], series.signal, series.source
    )


def best_anchor(result: BacktestResult, horizon: int, metric: str = "pinball_p90") -> str:
    """The anchor method with the lowest ``metric`` at ``horizon``."""
    anchors = {m: s for m, s in result.scores[horizon].items() if m in ANCHORS}
    if not anchors:
        raise ValueError("no anchor method in this backtest")
    return min(anchors, key=lambda m: getattr(anchors[m], metric))


def best_baseline(result: BacktestResult, horizon: int, metric: str = "pinball_p90") -> str | None:
    """The best statsforecast baseline scored (None when none was)."""
    scored = {m: s for m, s in result.scores[horizon].items() if m in BASELINES}
    if not scored:
        return None
    return min(scored, key=lambda m: getattr(scored[m], metric))
