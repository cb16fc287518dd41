"""prescaler's own forecaster: direct multi-horizon regression, combined with
cheap smoothers, with a conformal band.

Demand is multiplicative and its noise grows with its level, so the model
works on ``z = log(y + c)``, ``c`` a fraction of the recent busy bins' mean
chosen on a time-ordered holdout. Per horizon ``h`` a small ridge predicts
``z[t+h] - z[t]`` from recent means and seasonal profiles
(:mod:`forecasting.prescaler.features`), pulled toward "the recent mean" so a
few points give a cautious forecast. The point combines the ridge's median
with the smoothers of :mod:`forecasting.combination`, weighted on a
rolling-origin holdout (:mod:`forecasting.prescaler.holdout`); the band is
:mod:`forecasting.prescaler.band`'s. Until enough independent errors exist,
forecasts stay within ``cold_start_growth`` times the largest value seen.
Why each choice and what it costs: ``docs/decisions/forecasting.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from forecasting.combination import CANDIDATES, SmoothingBank, SmoothingParams
from forecasting.forecast import (
    DEFAULT_QUANTILES,
    Forecast,
    check_history,
    check_predict_args,
    daily_period,
)
from forecasting.prescaler.band import (
    BAND_LEVELS,
    LawLevels,
    calibrated,
    holdout_error_band,
    level_spread,
    ppf,
    resid_quantile,
    tail_factor,
)
from forecasting.prescaler.config import PrescalerConfig
from forecasting.prescaler.features import (
    SCALE_WINDOW,
    TrainRows,
    features,
    local_scale,
    origin_ranges,
    scale_floor,
)
from forecasting.prescaler.holdout import rolling_forecasts
from forecasting.prescaler.members import (
    guarded_weights,
    member_weights,
    smoothers_equal,
)

__all__ = ["PrescalerConfig", "PrescalerForecaster"]


class PrescalerForecaster:
    """See the module docstring; implements :class:`forecasting.Forecaster`."""

    name = "prescaler"

    def __init__(self, config: PrescalerConfig | None = None) -> None:
        self.config = config or PrescalerConfig()
        self._step_s = 0.0
        self._c = 1.0
        self._offset_fraction: float | None = None
        self._periods: tuple[int, ...] = ()
        self._train_z: np.ndarray | None = None
        self._y: np.ndarray | None = None
        self._coef: dict[int, np.ndarray | None] = {}
        self._resid: dict[int, np.ndarray] = {}
        self._diff_sd = 0.2
        self._score = 0.0
        self._use_scale = False
        self._scale_floor: float | None = None
        self._level = 0.0
        self._scored = 0
        self._train_y: np.ndarray | None = None
        self._smooth: dict[int, SmoothingParams] = {}
        self._weights: dict[int, np.ndarray | None] = {}
        self._ridge_q50: dict[int, float] = {}
        self._bank: SmoothingBank | None = None
        self._ridge_resid: dict[int, np.ndarray] = {}
        self._tail: dict[int, float] = {}
        self._band: dict[int, np.ndarray] = {}
        self._bank_rows = 0
        self._rows_cache: TrainRows | None = None
        self._penalties: dict[tuple[int, float, float], tuple[np.ndarray, np.ndarray]] = {}
        self._laws = LawLevels()
        self._all_kept: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    # ----------------------------------------------------------------- fitting
    def fit(self, y: np.ndarray, step_s: float) -> None:
        arr = check_history(y, step_s)
        self._step_s = float(step_s)
        day = daily_period(step_s)
        max_rows = int(self.config.max_train_days * day) if day else 40_000
        recent = arr[-max_rows:]
        # The level that scales the offset is the mean of the busy bins: idle
        # bins would dilute it, and a tiny offset turns a fleet waking from
        # idle into a jump of ten log units that the ridge then extrapolates.
        window = recent[-max(1, min(recent.size, day or 1440)) :]
        busy = window[window > 0]
        self._level = float(np.mean(busy)) if busy.size else 0.0
        periods = []
        if day:
            for p in (day, 7 * day):
                # Two full cycles, and room for at least one cycle of rows.
                if arr.size >= 2 * p:
                    periods.append(p)
        self._periods = tuple(periods)
        self._y = arr
        keep = max(max_rows, 2 * max(periods, default=0) + 1)
        train = arr[-keep:]
        # The transform offset (near multiplicative .. near additive) is chosen
        # on a time-ordered holdout (the last third of the rows): each
        # candidate is fitted on the rows before it and scored by pinball loss
        # at q = 0.5 and 0.9 in demand units, summed over the eager horizons.
        split = train.size - max(train.size // 3, 1)
        fractions = self.config.offset_fractions
        if train.size - split < self.config.min_independent_errors * self.config.fit_horizon:
            # Fewer than ``min_independent_errors`` independent errors at the
            # longest eager horizon: choosing a transform on them picks the
            # luckiest, so the default stands.
            fractions = (self.config.default_offset_fraction,)
        choice = len(fractions) > 1
        scores: dict[tuple[str, float], float] = {}
        for frac in fractions if choice else ():
            self._prepare(train, frac)
            self._score, self._scored = 0.0, 0
            for h in range(1, self.config.fit_horizon + 1):
                self._fit_h(h, split=split)
            if self._scored:
                scores[("reg", frac)] = self._score
        if scores:
            value = min(scores, key=lambda k: scores[k])[1]
        else:
            # Nothing to choose between (or nothing scored): the only
            # candidate, or the default.
            value = fractions[0] if len(fractions) == 1 else self.config.default_offset_fraction
        self._prepare(train, value)
        self._weights, self._ridge_q50, self._ridge_resid = {}, {}, {}
        self._tail, self._band = {}, {}
        self._train_y, self._bank, self._smooth = None, None, {}
        self._train_y = train
        # The weights' holdout is the recent past (at most a day and
        # ``holdout_rows``: the regime the next forecasts live in);
        # everything before it trains the candidates.
        span = train.size if self.config.holdout_refits > 0 else train.size // 3
        if day and self.config.holdout_days > 0:
            span = min(span, int(self.config.holdout_days * day))
        span = max(min(span, self.config.holdout_rows), 1)
        # The smoothers see the holdout and as many rows before it (at
        # least ``smoother_rows``): their memory is short, the ridge's
        # seasonal profile is what needs the whole history.
        self._bank_rows = min(train.size, max(self.config.smoother_rows, 2 * span))
        self._bank = self._recent_bank()
        w_split = train.size - span
        for h in range(1, self.config.fit_horizon + 1):
            weights = self._holdout_weights(h, w_split, self._bank)
            if (
                weights is None
                and self.config.min_independent_errors > 0
                and any(self._weights.get(k) is not None for k in range(1, h))
            ):
                # Too short a holdout for this horizon, though not for a
                # shorter one: the fewest independent errors of all, so
                # the same rule as ``min_independent_errors`` (equal
                # smoothers), not a shorter horizon's fitted weights.
                weights = smoothers_equal(len(CANDIDATES) + 1)
            self._weights[h] = weights
        for h in range(1, self.config.fit_horizon + 1):
            self._fit_h(h)
        # The smoothers' cached paths (several MB), the training rows and the
        # transformed history are only needed again for a lazily fitted
        # horizon, which rebuilds them from the training history.
        self._bank = None
        self._rows_cache = None
        self._train_z = None

    def _prepare(self, train: np.ndarray, frac: float) -> None:
        day = daily_period(self._step_s)
        self._offset_fraction = frac
        self._c = max(frac * self._level, 1e-6) if self._level > 0 else 1.0
        self._train_z = self._z(train)
        start = max(self._periods, default=0)
        self._use_scale = self._train_z.size - start >= self.config.local_scale_rows
        self._scale_floor = None
        dz = np.diff(self._train_z[-(day or 2880) :])
        self._diff_sd = float(np.std(dz)) if dz.size >= 2 else 0.2
        self._coef = {}
        self._resid = {}
        self._rows_cache = None
        self._laws = LawLevels()
        self._all_kept = {}

    @property
    def offset_fraction(self) -> float | None:
        """The offset fraction (of ``config.offset_fractions``) the last :meth:`fit`'s
        holdout picked; ``None`` before any fit."""
        return self._offset_fraction

    def combination_weights(self, h: int) -> np.ndarray | None:
        """A copy of the weights (the ridge, then :data:`~forecasting.combination.CANDIDATES`)
        of the point ``h`` steps ahead, or the nearest shorter horizon's; ``None``
        where the ridge alone speaks."""
        w = self._weights_at(h)
        return None if w is None else w.copy()

    @property
    def offset(self) -> float | None:
        """The offset ``c`` of the model's scale ``log(max(y, 0) + c)``, where its band's
        errors live; ``None`` before any fit."""
        return None if self._offset_fraction is None else self._c

    @property
    def periods(self) -> tuple[int, ...]:
        """The seasonal periods (steps) the last :meth:`fit` found two full cycles of."""
        return self._periods

    def smoothing_params(self, h: int) -> SmoothingParams | None:
        """The smoothers' parameters of the combination ``h`` steps ahead; ``None``
        where that horizon has none (the ridge alone) or is not fitted yet."""
        return self._smooth.get(h)

    def holdout_band(self, h: int) -> np.ndarray | None:
        """A copy of the combined point's holdout errors at ``h`` (log scale over the
        local volatility) at :data:`~forecasting.prescaler.band.BAND_LEVELS`;
        ``None`` where too few (``band_min_errors``) left the ridge's band standing."""
        band = self._band.get(h)
        return None if band is None else band.copy()

    def ridge_residuals(self, h: int) -> np.ndarray | None:
        """A copy of the ridge's sorted residual law at ``h`` that the guard reads (every
        kept residual, or a percent grid); ``None`` where ``h`` has no combination."""
        law = self._ridge_resid.get(h)
        return None if law is None else law.copy()

    def _train_rows(self) -> TrainRows:
        """The training history's rows (:class:`TrainRows`), built once per
        history and transform."""
        if self._rows_cache is None:
            z = self._train_log()
            self._rows_cache = TrainRows.build(
                z, self._periods, self.config.max_seasons, self._use_scale
            )
        return self._rows_cache

    def _train_scale(self, lo: int, hi: int) -> np.ndarray:
        """The local scale of the training origins at positions ``lo .. hi - 1``;
        its floor, once set, holds for every later row and prediction."""
        if not self._use_scale:
            return np.ones(hi - lo)
        rows = self._train_rows()
        if self._scale_floor is None:
            self._scale_floor = rows.scale_floor
        return rows.scale(lo, hi, self._scale_floor)

    def update(self, y: np.ndarray) -> None:
        """Condition on a longer history; the fitted parameters stay."""
        if self._train_y is None:
            raise RuntimeError("prescaler: update() called before fit()")
        self._y = check_history(y, self._step_s)

    def _z(self, y: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(y, 0.0) + self._c)

    def _fit_h(self, h: int, split: int | None = None) -> None:
        z = self._train_log()
        # Origins whose target phase has a past season (for the season terms).
        start, count, n_fit, first_test = origin_ranges(
            z.size, h, max(self._periods, default=0), split
        )
        if n_fit < self.config.min_rows:
            self._coef[h] = None
            return
        x = self._train_rows().features(h, 0, n_fit)
        target = z[start + h : start + h + n_fit] - z[start : start + n_fit]
        # Ridge toward the prior "mean of the last three steps" (feature 1).
        coef = self._solve(x, target)
        resid = target - x @ coef
        scale = self._train_scale(0, n_fit)
        keep = slice(-self.config.residual_rows, None)
        self._coef[h] = coef
        self._resid[h] = np.sort(resid[keep] / scale[keep])
        weights = self._weights_at(h) if split is None else None
        if weights is not None and self._train_y is not None:
            # The ridge's median offset (the ridge member of the combination)
            # and the smoothers' parameters for this horizon.
            q50 = float(np.median(self._resid[h]))
            self._ridge_q50[h] = q50
            if self._bank is None:
                self._bank = self._recent_bank()
            if h not in self._smooth:
                self._smooth[h] = self._bank.select(
                    h, self._bank.y.size, self.config.min_independent_errors
                )
            self._ridge_resid[h] = self._resid[h]
            if h in self._band or self._resid[h].size > self.config.law_grid_rows:
                # Where the band is the holdout's, the ridge's law only feeds
                # the guard's 0.1 and 0.9 quantiles, which the percent grid
                # holds exactly; a long law (``law_grid_rows``) the band reads
                # at its calibrated levels, between grid points by linear
                # interpolation. Either way keep 101 values, not every
                # residual (a fitted forecaster per ScaledObject).
                self._resid[h] = self._ridge_resid[h] = np.quantile(self._resid[h], BAND_LEVELS)
        if first_test < count:
            self._scored += 1
            test = slice(start + first_test, start + count)
            centre = z[test] + self._train_rows().features(h, first_test, count) @ coef
            test_scale = self._train_scale(first_test, count)
            actual = np.exp(z[start + first_test + h : start + count + h]) - self._c
            law, least = self._resid[h], self.config.min_empirical
            for q in (0.5, 0.9):
                off = resid_quantile(law, q, 1.0, least, self._diff_sd) * test_scale
                pred = np.maximum(np.exp(centre + off) - self._c, 0.0)
                diff = actual - pred
                self._score += float(np.mean(np.maximum(q * diff, (q - 1) * diff)))

    def _train_log(self) -> np.ndarray:
        """The training history's ``log(y + c)``, recomputed (the same floats)
        after a fit has dropped it: a fitted forecaster per ScaledObject
        keeps one copy of its window, not two."""
        if self._train_z is None:
            assert self._train_y is not None
            self._train_z = self._z(self._train_y)
        return self._train_z

    def _recent_bank(self) -> SmoothingBank:
        """The smoothers over the training history's last ``_bank_rows`` rows."""
        assert self._train_y is not None
        return SmoothingBank(self._train_y[self._train_y.size - self._bank_rows :])

    def _solve(self, x: np.ndarray, target: np.ndarray) -> np.ndarray:
        """Ridge toward the prior "mean of the last three steps" (feature 1);
        the penalty and its pull are built once per feature count."""
        key = (x.shape[1], self.config.ridge, self.config.prior_weight)
        cached = self._penalties.get(key)
        if cached is None:
            prior = np.zeros(x.shape[1])
            prior[1] = self.config.prior_weight
            penalty = np.diag(np.full(x.shape[1], self.config.ridge))
            cached = self._penalties[key] = (penalty, penalty @ prior)
        penalty, pull = cached
        return np.asarray(np.linalg.solve(x.T @ x + penalty, x.T @ target + pull))

    def _holdout_weights(self, h: int, split: int, bank: SmoothingBank) -> np.ndarray | None:
        """Combination weights from the members' rolling-origin holdout
        (:func:`rolling_forecasts`, from ``split`` on); records on the way the
        ridge band's holdout coverage (``_tail``, see ``calibrate_rows``) and,
        given enough errors, the combined point's holdout error law
        (:func:`holdout_error_band`, see ``band_min_errors``)."""
        z = self._train_log()
        start, count, _, _ = origin_ranges(z.size, h, max(self._periods, default=0), None)
        refits = self.config.holdout_refits
        if refits > 0:
            # Rolling origin: the holdout starts once the ridge has ``min_rows`` rows.
            split = max(split, start + self.config.min_rows + h) if count else split
        # Origins at positions first .. count - 1 are held out (idx >= split).
        first = min(max(split - start, 0), count)
        n_test = count - first
        if first < self.config.min_rows or n_test < self.config.min_holdout:
            return None
        x = self._train_rows().features(h, 0, count)
        target = z[start + h : start + h + count] - z[start : start + count]
        scale = self._train_scale(0, count)
        cands, covered = rolling_forecasts(
            z,
            x,
            target,
            scale,
            bank,
            self._solve,
            h=h,
            start=start,
            first=first,
            refits=refits,
            c=self._c,
            min_independent_errors=self.config.min_independent_errors,
            bank_start=z.size - bank.y.size,
        )
        if self.config.calibrate_rows > 0:
            self._tail[h] = tail_factor(float(np.mean(covered)), n_test, self.config.calibrate_rows)
        assert self._train_y is not None
        actual = self._train_y[start + first + h : start + count + h]
        weights = member_weights(
            cands,
            actual,
            h,
            min_independent_errors=self.config.min_independent_errors,
            combine_power=self.config.combine_power,
            shrink_rows=self.config.shrink_rows,
        )
        if n_test >= self.config.band_min_errors * h > 0:
            self._band[h] = holdout_error_band(
                weights @ cands, actual, scale[first:], self._c, self.config.band_half_life
            )
        return weights

    def _guarded(
        self, weights: np.ndarray, cands: np.ndarray, centre: float, h: int, scale: float
    ) -> np.ndarray:
        """:func:`guarded_weights` with horizon ``h``'s ridge residual law at
        0.1 and 0.9; ``weights`` unchanged where that law is empty."""
        guard = self.config.guard
        law = self._ridge_resid.get(h)
        if guard <= 0 or law is None or law.size == 0:
            return weights
        q_low = self._law_quantile("ridge", h, law, 0.1, scale)
        q_high = self._law_quantile("ridge", h, law, 0.9, scale)
        return guarded_weights(
            weights,
            cands,
            centre,
            q_low,
            q_high,
            guard=guard,
            c=self._c,
            memo=self._all_kept,
            key=h,
        )

    def _law_quantile(self, kind: str, h: int, law: np.ndarray, q: float, scale: float) -> float:
        """:func:`resid_quantile` of ``law`` (``kind`` "ridge" is
        ``_ridge_resid[h]``, "resid" ``_resid[h]``), its levels kept."""
        return self._laws.quantile(kind, h, law, q, scale, self.config.min_empirical, self._diff_sd)

    def _calibrated(self, q: float, h: int) -> float:
        """Quantile level ``q`` with its tail probability scaled by ``_tail[h]``."""
        factor = next((self._tail[hh] for hh in range(h, 0, -1) if hh in self._tail), 1.0)
        return calibrated(q, factor)

    def _weights_at(self, h: int) -> np.ndarray | None:
        """The fitted array behind :meth:`combination_weights` (not a copy: the
        guard's memo compares it by identity)."""
        for hh in range(h, 0, -1):
            if hh in self._weights:
                w = self._weights[hh]
                if w is not None:
                    return w
        return None

    def _local_scale(self, z: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """:func:`local_scale` of origins ``idx``; the floor, if no training
        row has set it yet, from ``z``."""
        if not self._use_scale:
            return np.ones(idx.size)
        if self._scale_floor is None:
            self._scale_floor = scale_floor(z)
        return local_scale(z, idx, self._scale_floor)

    # -------------------------------------------------------------- predicting
    def predict(
        self, horizon_steps: int, quantiles: Sequence[float] = DEFAULT_QUANTILES
    ) -> Forecast:
        if self._y is None or self._train_y is None:
            raise RuntimeError("prescaler: predict() called before fit()")
        qs = check_predict_args(horizon_steps, quantiles)
        horizon = int(horizon_steps)
        # Enough history for every feature: seasons, mean windows, the horizon.
        p_max = max(self._periods, default=0)
        longest = (self.config.max_seasons + 1) * p_max + p_max // 96 + 64 + horizon
        tail = self._y[-longest:]
        z = self._z(tail)
        zz = z[-(SCALE_WINDOW + 1) :]
        scale_now = float(self._local_scale(zz, np.array([zz.size - 1]))[0])
        cs = np.concatenate(([0.0], np.cumsum(z)))
        idx, hs = np.full(horizon, z.size - 1), np.arange(1, horizon + 1)
        rows = features(z, idx, hs, self._periods, self.config.max_seasons, cs)
        out = np.empty((len(qs), horizon))
        bank: SmoothingBank | None = None
        lazy = False
        recent_mean: float | None = None
        # Cold start: the rows since demand was first seen (idle rows before
        # it teach nothing about its dynamics) bound how far a band may reach.
        growth = self.config.cold_start_growth
        history = self._y[-max(self._train_y.size, 1) :]
        busy_rows = np.flatnonzero(history > 0)
        seen = history.size - int(busy_rows[0]) if busy_rows.size else 0
        peak = float(np.max(history)) if busy_rows.size else 0.0
        cap = growth * peak if growth > 0 and busy_rows.size else None
        # In log space, so a runaway band can neither overflow exp nor size a fleet.
        top = (
            math.log(self.config.max_growth * peak + self._c)
            if self.config.max_growth > 0
            else 700.0
        )
        for h in range(1, horizon + 1):
            if h not in self._coef:
                self._fit_h(h)
                lazy = True
            coef, resid, h_used = self._model_for(h)
            if coef is None:
                if recent_mean is None:
                    recent_mean = float(np.mean(z[-3:]))
                center = recent_mean
                spread = [ppf(q) * self._diff_sd * math.sqrt(h) for q in qs]
            else:
                center = float(z[-1] + rows[h - 1] @ coef)
                ridge_center = center
                weights = self._weights_at(h_used)
                if weights is not None and h_used in self._ridge_q50:
                    if bank is None:
                        # The smoothers forget geometrically: 1024 steps hold
                        # their state to far below the noise.
                        bank = SmoothingBank(self._y[-1024:])
                    ridge = math.exp(center + self._ridge_q50[h_used] * scale_now) - self._c
                    cands = np.array([max(ridge, 0.0), *bank.last_values(self._smooth[h_used], h)])
                    weights = self._guarded(weights, cands, center, h_used, scale_now)
                    center = math.log(max(float(weights @ cands), 0.0) + self._c)
                    point = True
                else:
                    point = False
                widen = math.sqrt(h / h_used)
                if not point:
                    spread = [
                        self._law_quantile("resid", h_used, resid, q, scale_now) * widen for q in qs
                    ]
                elif h_used in self._band:
                    # The combined point's own holdout error law, around it.
                    band = self._band[h_used]
                    spread = [
                        level_spread(self._laws.band(h_used, band, q), q, scale_now, widen)
                        for q in qs
                    ]
                else:
                    # The ridge's band, clipped so that it holds the point:
                    # lower quantiles never above it, upper never below.
                    law = self._ridge_resid[h_used]
                    shift = ridge_center - center
                    spread = [
                        0.0
                        if q == 0.5
                        else (min if q < 0.5 else max)(
                            0.0,
                            shift
                            + self._law_quantile(
                                "ridge", h_used, law, self._calibrated(q, h_used), scale_now
                            )
                            * widen,
                        )
                        for q in qs
                    ]
            for i, s in enumerate(spread):
                out[i, h - 1] = math.exp(min(center + s, top)) - self._c
            if cap is not None and seen < self.config.band_min_errors * h:
                np.minimum(out[:, h - 1], cap, out=out[:, h - 1])
        if lazy:
            # A lazily fitted horizon rebuilt the smoothers' cached paths
            # (several times the history's size); the next one rebuilds them.
            self._bank = None
            self._rows_cache = None
            self._train_z = None
        return Forecast(self._step_s, horizon, qs, out)

    def _model_for(self, h: int) -> tuple[np.ndarray | None, np.ndarray, int]:
        for hh in range(h, 0, -1):
            coef = self._coef.get(hh)
            if coef is not None:
                return coef, self._resid[hh], hh
        return None, np.empty(0), h
