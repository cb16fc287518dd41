"""An exact, bounded memo of forecasting work, shared by every run in a process.

``prescaler tune`` replays one window once per trial, and arrivals are
exogenous, so most trials hand their forecaster byte-for-byte the history
earlier trials did. A :class:`MemoizedForecaster` answers from an earlier
run given exactly the same inputs (method, config, step, history bytes,
horizon, quantiles) and computes otherwise, so results are bit-identical with
the memo and without it. That rests on the method's forecast being a function
of those inputs alone: :data:`MEMOIZABLE` names the methods read to hold it.
"""

from __future__ import annotations

import hashlib
import pickle
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Generic, TypeVar

import numpy as np

from decision.prediction import ForecasterBackend, ForecasterFactory
from forecasting import make_forecaster
from forecasting.forecast import DEFAULT_QUANTILES, Forecast, Forecaster, check_history

__all__ = [
    "DEFAULT_FITTED_BYTES",
    "DEFAULT_FORECAST_BYTES",
    "MEMOIZABLE",
    "PROCESS_MEMO",
    "ForecastMemo",
    "MemoStats",
    "MemoizedForecaster",
]

MEMOIZABLE: frozenset[str] = frozenset({"prescaler"})
"""Methods whose forecast depends on nothing but the keyed inputs
(``forecasting.prescaler.model``: ``fit`` re-prepares every fitted table,
``update`` sets the history, ``predict``'s lazily fitted horizons and
quantile levels are functions of the fit). The anchors are left out: some
refit inside ``update`` from the state an earlier call left."""

DEFAULT_FITTED_BYTES = 256 * 2**20
"""Bytes of pickled fitted models kept per process. A tune trial asks for
its refits in the same order as the trial before it, so a store too small
for one trial's refits drops each before it comes back and saves nothing:
keep the bound above a trial's ``fits_run`` times a model's pickled size
(a trial's ``forecast_memo`` attribute shows both; the model grows with the
fit window)."""

DEFAULT_FORECAST_BYTES = 32 * 2**20
"""Bytes of forecasts kept (values plus :data:`FORECAST_OVERHEAD` each)."""

FORECAST_OVERHEAD = 400
"""Bytes counted per stored forecast beyond its values (the object, its
key and the LRU's entry), so a bound in bytes also bounds the count."""

_V = TypeVar("_V")


@dataclass
class MemoStats:
    """Counts since the memo was made (or :meth:`ForecastMemo.clear`)."""

    fits_requested: int = 0
    """``fit`` calls recorded."""
    fits_run: int = 0
    """Fits computed (a predict missed and no stored model matched)."""
    fits_restored: int = 0
    """Fits answered by unpickling a stored fitted model."""
    predicts_run: int = 0
    """Forecasts computed."""
    predicts_reused: int = 0
    """Forecasts answered from the memo."""

    @property
    def predict_hit_rate(self) -> float:
        """Share of forecasts answered from the memo (0 before any)."""
        total = self.predicts_run + self.predicts_reused
        return self.predicts_reused / total if total else 0.0

    @property
    def fits_avoided(self) -> int:
        """Fits not computed: restored, or never needed (every forecast of
        that refit hit)."""
        return self.fits_requested - self.fits_run

    def minus(self, earlier: MemoStats) -> MemoStats:
        """The counts since ``earlier`` (a copy taken before a run)."""
        return MemoStats(
            **{f.name: getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)}
        )

    def as_dict(self) -> dict[str, float]:
        """Plain counts plus the derived figures (for a trial's attributes, a bench)."""
        out: dict[str, float] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["fits_avoided"] = self.fits_avoided
        out["predict_hit_rate"] = round(self.predict_hit_rate, 4)
        return out


class _LruBytes(Generic[_V]):
    """Key -> value, least recently used dropped first once past ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"a memo bound must be >= 0 bytes, got {max_bytes}")
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: OrderedDict[bytes, tuple[_V, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: bytes) -> _V | None:
        item = self._items.get(key)
        if item is None:
            return None
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: bytes, value: _V, size: int) -> None:
        if size > self.max_bytes:
            return  # would evict everything and still not fit
        old = self._items.pop(key, None)
        if old is not None:
            self.bytes -= old[1]
        self._items[key] = (value, size)
        self.bytes += size
        while self.bytes > self.max_bytes:
            _, (_, dropped) = self._items.popitem(last=False)
            self.bytes -= dropped

    def clear(self) -> None:
        self._items.clear()
        self.bytes = 0


def _digest(*parts: bytes) -> bytes:
    """A 128-bit BLAKE2b of ``parts``, each length-prefixed so no two
    sequences of parts collide by concatenation."""
    h = hashlib.blake2b(digest_size=16)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


def _history_bytes(y: np.ndarray) -> bytes:
    return np.ascontiguousarray(y, dtype=np.float64).tobytes()


class ForecastMemo:
    """Fitted models and forecasts of every :class:`MemoizedForecaster` it
    made, each store LRU-bounded in bytes; safe to share between threads
    (one lock), per process (``--jobs`` processes each keep their own)."""

    def __init__(
        self,
        max_fitted_bytes: int = DEFAULT_FITTED_BYTES,
        max_forecast_bytes: int = DEFAULT_FORECAST_BYTES,
    ) -> None:
        self._fitted: _LruBytes[tuple[bytes, int]] = _LruBytes(max_fitted_bytes)
        self._forecasts: _LruBytes[Forecast] = _LruBytes(max_forecast_bytes)
        self._lock = threading.Lock()
        self._stats = MemoStats()

    # ------------------------------------------------------------- makers
    def forecaster(self, method: str) -> ForecasterBackend:
        """A fresh forecaster for ``method``: memoized if it is in
        :data:`MEMOIZABLE`, else plain (``make_forecaster``'s errors as is)."""
        if method not in MEMOIZABLE:
            return make_forecaster(method)
        return MemoizedForecaster(method, self)

    def factory(self, method: str | None = None) -> ForecasterFactory:
        """A tracker's ``forecasters=``: ``method`` whatever the tracker asks
        for when given (a simulation-only baseline), else the name asked."""
        if method is None:
            return self.forecaster
        fixed = method
        return lambda _name: self.forecaster(fixed)

    # ------------------------------------------------------------- reading
    @property
    def stats(self) -> MemoStats:
        """A copy of the counts."""
        with self._lock:
            return MemoStats(**{f.name: getattr(self._stats, f.name) for f in fields(MemoStats)})

    @property
    def sizes(self) -> dict[str, int]:
        """Entries and bytes held per store."""
        with self._lock:
            return {
                "fitted": len(self._fitted),
                "fitted_bytes": self._fitted.bytes,
                "forecasts": len(self._forecasts),
                "forecast_bytes": self._forecasts.bytes,
            }

    def clear(self) -> None:
        """Forget every entry and count."""
        with self._lock:
            self._fitted.clear()
            self._forecasts.clear()
            self._stats = MemoStats()

    # ----------------------------------------------- for MemoizedForecaster
    def _count(self, name: str) -> None:
        with self._lock:
            setattr(self._stats, name, getattr(self._stats, name) + 1)

    def _forecast(self, key: bytes) -> Forecast | None:
        with self._lock:
            found = self._forecasts.get(key)
            if found is not None:
                self._stats.predicts_reused += 1
            return found

    def _keep_forecast(self, key: bytes, forecast: Forecast) -> None:
        with self._lock:
            self._stats.predicts_run += 1
            self._forecasts.put(key, forecast, forecast.values.nbytes + FORECAST_OVERHEAD)

    def _fitted_model(self, key: bytes) -> tuple[bytes, int] | None:
        with self._lock:
            return self._fitted.get(key)

    def _keep_fitted(self, key: bytes, blob: bytes, horizon: int) -> None:
        with self._lock:
            self._fitted.put(key, (blob, horizon), len(blob))


class MemoizedForecaster:
    """A forecaster that answers from its :class:`ForecastMemo` when given
    exactly what an earlier one was given (see the module docstring).

    It honours :class:`forecasting.Forecaster`: ``fit`` validates its input
    at once (the same error as the method's), but the fit itself runs at the
    first ``predict`` that misses, so a failure inside it surfaces there
    (the tracker handles either the same way: no forecast, refit next bin).
    """

    def __init__(
        self, method: str, memo: ForecastMemo, make: Callable[[], Forecaster] | None = None
    ) -> None:
        self._make: Callable[[], Forecaster] = make or (lambda: make_forecaster(method))
        self._memo = memo
        self._inner: Forecaster = self._make()
        self.name: str = self._inner.name
        kind = type(self._inner)
        config = repr(getattr(self._inner, "config", None))
        self._method_key = _digest(
            method.encode(), f"{kind.__module__}.{kind.__qualname__}".encode(), config.encode()
        )
        self._inner_fit: bytes | None = None  # the fit the inner model holds
        self._fit_key: bytes | None = None
        self._fit_y: np.ndarray | None = None
        self._step_s = 0.0
        self._y: np.ndarray | None = None
        self._y_key = b""
        self._kept_horizon = 0  # the horizon the memo's model of this fit reached

    def fit(self, y: np.ndarray, step_s: float) -> None:
        arr = np.array(check_history(y, step_s), dtype=np.float64)  # a copy: keyed as given
        self._step_s = float(step_s)
        self._fit_y = arr
        self._fit_key = _digest(self._method_key, np.float64(step_s).tobytes(), _history_bytes(arr))
        self._y, self._y_key = None, b""
        # The inner model may hold a later update of an identical earlier fit:
        # it no longer stands for this fit until restored or refitted.
        self._inner_fit = None
        self._memo._count("fits_requested")

    def update(self, y: np.ndarray) -> None:
        if self._fit_key is None:
            self._inner.update(y)  # the method's own "before fit" error
            return
        arr = np.array(check_history(y, self._step_s), dtype=np.float64)
        self._y, self._y_key = arr, _history_bytes(arr)

    def predict(
        self, horizon_steps: int, quantiles: Sequence[float] = DEFAULT_QUANTILES
    ) -> Forecast:
        fit_key = self._fit_key
        if fit_key is None:
            return self._inner.predict(horizon_steps, quantiles)  # "before fit"
        qs = tuple(float(q) for q in quantiles)
        key = _digest(
            fit_key,
            self._y_key if self._y is not None else b"-",
            repr(horizon_steps).encode(),
            np.array(qs, dtype=np.float64).tobytes(),
        )
        found = self._memo._forecast(key)
        if found is not None:
            return found
        inner = self._fitted(fit_key)
        if self._y is not None:
            inner.update(self._y)
        forecast = inner.predict(horizon_steps, quantiles)
        self._memo._keep_forecast(key, forecast)
        if self._y is not None and int(horizon_steps) > self._kept_horizon:
            # Store the model with what this predict fitted lazily (further
            # horizons), so a restore does not redo it.
            self._kept_horizon = int(horizon_steps)
            blob = pickle.dumps(inner, pickle.HIGHEST_PROTOCOL)
            self._memo._keep_fitted(fit_key, blob, self._kept_horizon)
        return forecast

    def _fitted(self, fit_key: bytes) -> Forecaster:
        """The inner model holding the recorded fit: as it is when it already
        does, else restored from the memo, else fitted now (from a fresh
        model, so no earlier fit's state can leak in).

        A stored model was stored after an ``update`` and a ``predict`` (its
        lazily fitted horizons are worth keeping); a later ``update``
        replaces its history, so it stands for the fit only when an update
        follows: without one, the fit runs.
        """
        if self._inner_fit == fit_key:
            return self._inner
        self._inner_fit = None
        stored = self._memo._fitted_model(fit_key) if self._y is not None else None
        if stored is not None:
            inner: Forecaster = pickle.loads(stored[0])
            self._kept_horizon = stored[1]
            self._memo._count("fits_restored")
        else:
            assert self._fit_y is not None
            inner = self._make()
            inner.fit(self._fit_y, self._step_s)
            self._kept_horizon = 0
            self._memo._count("fits_run")
        self._inner, self._inner_fit = inner, fit_key
        return inner


PROCESS_MEMO = ForecastMemo()
"""The memo the simulator's prescaler triggers share within a process (the
trials a tune worker runs one after another, a simulate's policies)."""
