"""Rolling-origin backtest: no model ever sees a value at or after its target.

At origin ``t`` a model has seen ``y[:t]`` only; its forecast ``H`` steps
ahead is scored against ``y[t + H - 1]``, the value the scaler provisions
for one lead time ahead. At most ``max_origins`` origins, every ``stride``
steps from ``initial``; a model is refitted at the first origin and every
``refit_every`` origins and ``update``-d in between, as the scaler refits in
the background and predicts on the hot path (no look-ahead either way).
Metrics per method and horizon: MAE of the median, MASE (against the
in-sample one-step naive MAE, Hyndman & Koehler), pinball loss at q = 0.9,
coverage of the 0.9 quantile and mean seconds per fit.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from forecasting.forecast import Forecaster
from forecasting.registry import METHODS, make_forecaster
from forecasting.series import DemandSeries

BAND_QUANTILES: tuple[float, ...] = (0.1, 0.5, 0.9)


@dataclass(frozen=True)
class MethodScore:
    mae: float
    mase: float
    pinball_p90: float
    coverage_p90: float
    fit_seconds: float
    origins: int

    def as_contract(self) -> dict[str, float]:
        """The five fields of the ``backtest --json`` contract."""
        return {
            "mae": self.mae,
            "mase": self.mase,
            "pinball_p90": self.pinball_p90,
            "coverage_p90": self.coverage_p90,
            "fit_seconds": self.fit_seconds,
        }


@dataclass(frozen=True, eq=False)
class Trajectory:
    """What a method forecast at each scored origin (for plots)."""

    target_index: np.ndarray
    actual: np.ndarray
    q10: np.ndarray
    median: np.ndarray
    q90: np.ndarray


@dataclass(frozen=True, eq=False)
class BacktestResult:
    source: str
    step_s: float
    horizons: tuple[int, ...]
    initial: int
    stride: int
    refit_every: int
    scores: dict[int, dict[str, MethodScore]]
    trajectories: dict[int, dict[str, Trajectory]]


def pinball(actual: np.ndarray, forecast: np.ndarray, q: float) -> float:
    diff = np.asarray(actual) - np.asarray(forecast)
    return float(np.mean(np.maximum(q * diff, (q - 1) * diff)))


def plan_origins(
    n: int, max_horizon: int, *, initial: int | None = None, max_origins: int = 400
) -> tuple[np.ndarray, int, int]:
    """(origins, initial, stride): which histories ``y[:t]`` get scored."""
    if max_horizon < 1:
        raise ValueError(f"horizon must be at least one step, got {max_horizon}")
    first = max(10, n // 4) if initial is None else int(initial)
    if first < 1:
        raise ValueError(f"initial history must be >= 1 step, got {first}")
    last = n - max_horizon
    if last < first:
        raise ValueError(
            f"series of {n} steps is too short to backtest a {max_horizon}-step horizon "
            f"after {first} steps of history"
        )
    count = last - first + 1
    stride = max(1, math.ceil(count / max(1, max_origins)))
    return np.arange(first, last + 1, stride), first, stride


def backtest(
    series: DemandSeries,
    horizons: Sequence[int],
    methods: Sequence[str] = METHODS,
    *,
    initial: int | None = None,
    max_origins: int = 400,
    max_refits: int = 20,
    progress: bool = False,
    factory: Callable[[str], Forecaster] = make_forecaster,
) -> BacktestResult:
    """Score every method at every horizon (in steps) over the same origins."""
    hs = tuple(sorted({int(h) for h in horizons}))
    if not hs or hs[0] < 1:
        raise ValueError(f"horizons must be positive step counts, got {list(horizons)}")
    for m in methods:
        factory(m)  # fail fast on unknown names
    y = np.asarray(series.values, dtype=float)
    origins, first, stride = plan_origins(y.size, hs[-1], initial=initial, max_origins=max_origins)
    refit_every = max(1, math.ceil(origins.size / max(1, max_refits)))
    naive = np.abs(np.diff(y[:first]))
    scale = float(naive.mean()) if naive.size and naive.mean() > 0 else float(np.mean(y)) or 1.0

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(methods) * origins.size, desc="backtest", unit="origin")
    scores: dict[int, dict[str, MethodScore]] = {h: {} for h in hs}
    trajs: dict[int, dict[str, Trajectory]] = {h: {} for h in hs}
    try:
        for name in methods:
            model = factory(name)
            fit_times: list[float] = []
            preds = np.empty((len(hs), 3, origins.size))
            for j, t in enumerate(origins):
                history = y[:t]
                if j % refit_every == 0:
                    t0 = time.perf_counter()
                    model.fit(history, series.step_s)
                    fit_times.append(time.perf_counter() - t0)
                else:
                    model.update(history)
                fc = model.predict(hs[-1], BAND_QUANTILES)
                for i, h in enumerate(hs):
                    preds[i, :, j] = fc.values[:, h - 1]
                if bar is not None:
                    bar.update(1)
            for i, h in enumerate(hs):
                target = origins + h - 1
                actual = y[target]
                q10, med, q90 = preds[i]
                mae = float(np.mean(np.abs(actual - med)))
                scores[h][name] = MethodScore(
                    mae=mae,
                    mase=mae / scale,
                    pinball_p90=pinball(actual, q90, 0.9),
                    coverage_p90=float(np.mean(actual <= q90)),
                    fit_seconds=float(np.mean(fit_times)),
                    origins=int(origins.size),
                )
                trajs[h][name] = Trajectory(target, actual, q10, med, q90)
    finally:
        if bar is not None:
            bar.close()
    return BacktestResult(
        source=series.source,
        step_s=series.step_s,
        horizons=hs,
        initial=first,
        stride=stride,
        refit_every=refit_every,
        scores=scores,
        trajectories=trajs,
    )
