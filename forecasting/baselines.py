"""Nixtla statsforecast's automatic models as backtest baselines.

``sf_autoets``, ``sf_autoarima``, ``sf_autotheta`` and ``sf_mstl`` score
statsforecast's models with their OWN prediction intervals (the 0.9 quantile
is the upper bound of the central 80 % interval), so prescaler is compared
with the strongest off-the-shelf statistical models. Their fits cost far more
than the scaler's refit budget, so they are backtest references, not in
``METHODS`` (cost and scores: ``docs/decisions/forecasting.md``), and need
the optional extra ``prescaler[baselines]``. The daily season is used only
with two full days of history, and only up to ``MAX_SHORT_SEASON`` /
``MAX_SEASON`` steps (longer seasons are slow to fit); fits see the last
``MAX_FIT_STEPS`` steps; ``update`` keeps the parameters (statsforecast's
``forward``); a model that fails to fit falls back to a random walk with a
Gaussian band, logged once.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from forecasting.forecast import (
    DEFAULT_QUANTILES,
    Forecast,
    check_history,
    check_predict_args,
    daily_period,
)

log = logging.getLogger(__name__)

BASELINES: tuple[str, ...] = ("sf_autoets", "sf_autoarima", "sf_autotheta", "sf_mstl")
MAX_SEASON = 288
"""Longest season (steps) given to AutoTheta (5-minute bins' day)."""
MAX_SHORT_SEASON = 24
"""Longest season (steps) given to AutoETS and AutoARIMA (hourly bins' day)."""
MAX_FIT_STEPS = 5760
"""Steps a fit sees at most (four days of one-minute bins, room for MSTL's two
seasons): older demand is another regime, and a fit's cost grows with it."""
_ppf = NormalDist().inv_cdf


def available() -> bool:
    """Whether statsforecast is installed (the ``baselines`` extra)."""
    return importlib.util.find_spec("statsforecast") is not None


def require() -> None:
    if not available():
        raise ValueError(
            "the sf_* baselines need statsforecast: pip install 'prescaler[baselines]' "
            "(or 'statsforecast>=2.1,<2.2')"
        )


def _level(q: float) -> float | int:
    """The central-interval level (percent) one of whose bounds is quantile ``q``
    (an int when whole: statsforecast names its bounds ``hi-80``, ``lo-80``)."""
    lv = round(100.0 * abs(2.0 * q - 1.0), 6)
    return int(lv) if lv == int(lv) else lv


def _levels(qs: Sequence[float]) -> list[float | int]:
    return sorted({_level(q) for q in qs if q != 0.5})


def _pick(res: dict[str, np.ndarray], q: float) -> np.ndarray:
    if q == 0.5:
        return np.asarray(res["mean"], dtype=float)
    return np.asarray(res[("hi-" if q > 0.5 else "lo-") + str(_level(q))], dtype=float)


class StatsForecastBaseline:
    """One statsforecast model behind the :class:`forecasting.Forecaster` protocol."""

    def __init__(self, name: str) -> None:
        if name not in BASELINES:
            raise ValueError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}")
        require()
        self.name = name
        self._step_s = 0.0
        self._y: np.ndarray | None = None
        self._fit_n = 0
        self._model: Any = None
        self._season = 1
        self._mstl_seas: np.ndarray | None = None
        self._fit_sa: np.ndarray | None = None
        self._diff_sd = 0.0
        self._warned = False

    # ----------------------------------------------------------------- fitting
    def fit(self, y: np.ndarray, step_s: float) -> None:
        arr = check_history(y, step_s)
        self._step_s = float(step_s)
        day = daily_period(step_s)
        train = arr[-MAX_FIT_STEPS:]
        self._y = arr
        self._fit_n = arr.size
        dz = np.diff(train)
        self._diff_sd = float(np.std(dz)) if dz.size >= 2 else float(np.std(train) or 1.0)
        season = day if day and train.size >= 2 * day else 1
        self._mstl_seas, self._fit_sa, self._model = None, None, None
        try:
            self._model = self._make(season, train)
        except Exception as exc:  # statsforecast raises plain Exceptions
            self._note(f"{self.name}: fit failed on {train.size} points ({exc}); random walk")
            self._model = None

    def _make(self, season: int, train: np.ndarray) -> Any:
        from statsforecast.models import MSTL, AutoARIMA, AutoETS, AutoTheta

        short = season if season <= MAX_SEASON else 1
        if self.name == "sf_mstl":
            if season > 1:
                self._season = season
                model = MSTL(season_length=season).fit(train)
                comp = model.model_
                seas = comp.drop(columns=["data", "trend", "remainder"]).sum(axis=1).to_numpy()
                self._mstl_seas = np.asarray(seas[-season:], dtype=float)
                self._fit_sa = np.asarray(
                    comp[["trend", "remainder"]].sum(axis=1).to_numpy(), dtype=float
                )
                return model
            self._note(
                f"sf_mstl: {train.size} steps hold fewer than two daily seasons; "
                "AutoETS on the raw series instead"
            )
            self._season = 1
            return AutoETS(season_length=1).fit(train)
        tiny = season if season <= MAX_SHORT_SEASON else 1
        if self.name == "sf_autoets":
            self._season = tiny
            return AutoETS(season_length=tiny).fit(train)
        if self.name == "sf_autoarima":
            self._season = tiny
            return AutoARIMA(season_length=tiny).fit(train)
        self._season = short
        return AutoTheta(season_length=short).fit(train)

    def _note(self, message: str) -> None:
        if not self._warned:
            log.info(message)
            self._warned = True

    def update(self, y: np.ndarray) -> None:
        """Condition on a longer history; the fitted parameters stay."""
        if self._y is None:
            raise RuntimeError(f"{self.name}: update() called before fit()")
        self._y = check_history(y, self._step_s)

    # -------------------------------------------------------------- predicting
    def predict(
        self, horizon_steps: int, quantiles: Sequence[float] = DEFAULT_QUANTILES
    ) -> Forecast:
        if self._y is None:
            raise RuntimeError(f"{self.name}: predict() called before fit()")
        qs = check_predict_args(horizon_steps, quantiles)
        h = int(horizon_steps)
        levels = _levels(qs)
        res = None
        if self._model is not None:
            try:
                res = self._forecast(h, levels)
            except Exception as exc:
                self._note(f"{self.name}: forecast failed ({exc}); random walk")
        if res is None:
            sd = self._diff_sd * np.sqrt(np.arange(1, h + 1))
            last = float(self._y[-1])
            out = np.array([last + _ppf(q) * sd for q in qs])
        else:
            out = np.array([_pick(res, q) for q in qs])
        out = np.where(np.isfinite(out), out, float(self._y[-1]))
        return Forecast(self._step_s, h, qs, out)

    def _forecast(self, h: int, levels: list[float | int]) -> dict[str, np.ndarray]:
        assert self._y is not None
        new = self._y[self._fit_n :] if self._y.size > self._fit_n else self._y[:0]
        lv: list[Any] | None = levels or None
        if self._mstl_seas is not None and self._fit_sa is not None:
            # The fitted season continues over the new steps (decomposing again is
            # slow at 1-minute bins); only the deseasonalised series is re-filtered.
            m = self._season
            k = new.size
            phase = np.arange(k) % m
            sa = np.concatenate((self._fit_sa, new - self._mstl_seas[phase]))
            trend = self._model.trend_forecaster
            res = trend.predict(h=h, level=lv) if k == 0 else trend.forward(y=sa, h=h, level=lv)
            ahead = self._mstl_seas[(k + np.arange(h)) % m]
            return {key: np.asarray(val) + ahead for key, val in res.items()}
        if new.size == 0:
            return dict(self._model.predict(h=h, level=lv))
        window = self._y[-MAX_FIT_STEPS:]
        return dict(self._model.forward(y=window, h=h, level=lv))
