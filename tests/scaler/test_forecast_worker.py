"""The forecast worker: a real child process over a real socket.

It must compute exactly what the in-process forecaster computes (so the
scaler's decisions do not depend on where forecasting runs), survive its
child dying, and forget forecasters the scaler dropped.
"""

from __future__ import annotations

import gc
import math
import os
import signal
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from decision.reading import Reading
from forecasting import make_forecaster
from scaler.forecast_worker import ForecastWorker, ForecastWorkerError
from scaler.sources import Selection, SourceSpec
from scaler.state import ScalerState
from scaler.telemetry import ScalerTelemetry
from tests.scaler.test_state import FakeSource, make_state, meta


@pytest.fixture
def worker() -> Iterator[ForecastWorker]:
    w = ForecastWorker(timeout_s=60.0)
    try:
        yield w
    finally:
        w.close()


def _wave(_s: Selection, t: float, *, bursts: bool = True) -> Reading:
    """A 7-s sine of requests around 5/s, with a 20-s burst every 200 s."""
    rate = 5.0 + 4.0 * math.sin(t / 7.0) + (6.0 if bursts and 140 <= t % 200 < 160 else 0.0)
    return Reading(
        time_s=t,
        ready_replicas=2,
        waiting=max(0.0, rate - 8.0),
        running=3.0,
        kv_usage=0.2,
        arrival_rate_rps=rate,
        completion_rate_rps=min(rate, 8.0),
        prompt_tokens_per_s=rate * 100,
        generation_tokens_per_s=rate * 50,
    )


def _clocked_state(clock: list[float], *, bursts: bool = True, **params: Any) -> ScalerState:
    """A state over the wave on a hand-moved clock: 1-s refreshes, 2-s bins."""
    source = FakeSource(
        SourceSpec("prometheus", "http://prom:9090"), lambda s, t: _wave(s, t, bursts=bursts)
    )
    return make_state(
        source,
        ScalerTelemetry(),
        refresh_interval_s=1.0,
        forecast_step_s=2.0,
        clock=lambda: clock[0],  # type: ignore[arg-type]
        **params,
    )


def _series(n: int = 400) -> np.ndarray:
    rng = np.random.default_rng(3)
    t = np.arange(n)
    return rng.poisson(20 + 10 * np.sin(2 * np.pi * t / 60)).astype(float)


def test_remote_forecasts_are_identical_to_local_ones(worker: ForecastWorker) -> None:
    y = _series()
    local = make_forecaster("prescaler")
    local.fit(y[:300], 15.0)
    remote = worker.forecaster("prescaler")
    remote.fit(y[:300], 15.0)
    for end in (300, 340, 400):
        local.update(y[:end])
        remote.update(y[:end])
        a = local.predict(13, quantiles=(0.5, 0.9))
        b = remote.predict(13, quantiles=(0.5, 0.9))
        assert b.quantiles == a.quantiles
        np.testing.assert_array_equal(b.values, a.values)


def test_errors_of_the_forecaster_come_back_as_they_were(worker: ForecastWorker) -> None:
    with pytest.raises(ValueError):
        make_forecaster("prescaler").fit(np.array([1.0, math.nan, -3.0]), 0.0)
    remote = worker.forecaster("prescaler")
    with pytest.raises(ValueError):
        remote.fit(np.array([1.0, math.nan, -3.0]), 0.0)
    with pytest.raises(ForecastWorkerError, match="not fitted"):
        remote.predict(3)


def test_a_dead_worker_is_replaced_and_its_forecasters_refit(worker: ForecastWorker) -> None:
    y = _series()
    remote = worker.forecaster("prescaler")
    remote.fit(y, 15.0)
    first = worker.pid()
    assert first is not None
    os.kill(first, signal.SIGKILL)
    with pytest.raises(ForecastWorkerError):
        remote.update(y)
        remote.predict(5)
    # the next call starts a fresh child, which holds nothing yet
    with pytest.raises(ForecastWorkerError, match="not fitted"):
        remote.predict(5)
    assert worker.pid() not in (None, first)
    assert worker.starts == 2
    remote.fit(y, 15.0)
    forecast = remote.predict(5)
    assert forecast.values.shape == (2, 5)


def test_dropped_forecasters_are_forgotten_by_the_child(worker: ForecastWorker) -> None:
    y = _series(100)
    kept = worker.forecaster("last_value")
    kept.fit(y, 15.0)
    gone = worker.forecaster("last_value")
    gone.fit(y, 15.0)
    assert worker.count() == 2
    del gone
    gc.collect()
    assert worker.count() == 1
    assert kept.predict(2).values.shape == (2, 2)


def test_closing_stops_the_child(worker: ForecastWorker) -> None:
    one = worker.forecaster("last_value")
    one.fit(_series(50), 15.0)
    pid = worker.pid()
    assert pid is not None
    worker.close()
    assert worker.pid() is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(ForecastWorkerError, match="closed"):
        worker.count()


async def test_scaler_decisions_are_the_same_with_the_worker() -> None:
    """Backfill, then refresh across several forecast bins and refits: every
    decision and every forecast is identical in and out of process."""

    runs = []
    for in_worker in (False, True):
        clock = [1000.0]
        state = _clocked_state(
            clock, refit_interval_s=20.0, fit_window_s=120.0, forecast_worker=in_worker
        )
        for name in ("a", "b"):
            state.register(
                "ns",
                name,
                meta(forecast="auto", leadTimeSeconds="6", capacityTokensPerSecond="900"),
            )
        seen = []
        try:
            await state.loop.backfill(clock[0])
            for _ in range(60):
                clock[0] += 1.0
                await state.refresh(clock[0])
                for name in ("a", "b"):
                    d = state.decision("ns", name)
                    seen.append((d.replicas, d.reason, sorted(d.proposals.items())))
                    entry = state.objects[("ns", name)]
                    f = entry.forecast
                    seen.append(
                        None if f is None else (f.upper_requests_per_s, f.median_requests_per_s)
                    )
            assert state.status()["forecasters_fitted"] == 2
        finally:
            await state.stop()
        runs.append(seen)
    assert any(isinstance(x, tuple) and len(x) == 2 for x in runs[0])  # forecasts were made
    assert runs[1] == runs[0]


def test_a_batch_answers_like_single_calls_and_keeps_errors_apart(
    worker: ForecastWorker,
) -> None:
    y = _series()
    local = make_forecaster("prescaler")
    local.fit(y[:300], 15.0)
    local.update(y[:340])
    expected = local.predict(13, quantiles=(0.5, 0.9))
    fitted, never_fitted = worker.forecaster("prescaler"), worker.forecaster("prescaler")
    answers = worker.batch(
        [
            (fitted.fid, "prescaler", y[:300], 15.0, y[:340], 13, (0.5, 0.9)),
            (never_fitted.fid, "prescaler", None, 15.0, y[:340], 13, (0.5, 0.9)),
            (fitted.fid, "prescaler", None, 15.0, y[:340], 13, (0.5, 0.9)),
            (fitted.fid, "prescaler", np.array([1.0, math.nan]), 0.0, y[:340], 13, (0.5,)),
        ]
    )
    np.testing.assert_array_equal(answers[0].values, expected.values)
    assert isinstance(answers[1], ForecastWorkerError) and "not fitted" in str(answers[1])
    np.testing.assert_array_equal(answers[2].values, expected.values)
    assert isinstance(answers[3], ValueError)  # a failed refit keeps the old fit
    again = worker.batch([(fitted.fid, "prescaler", None, 15.0, y[:340], 13, (0.5, 0.9))])
    np.testing.assert_array_equal(again[0].values, expected.values)


async def test_a_refresh_sends_all_forecasts_in_a_few_round_trips() -> None:
    """150 objects whose bin closes together: 2 round trips (chunks of 100), not 150."""
    from scaler.stepper import PREDICT_CHUNK

    clock = [1000.0]
    state = _clocked_state(
        clock, bursts=False, refit_interval_s=1000.0, fit_window_s=60.0, forecast_worker=True
    )
    objects = 150
    for i in range(objects):
        state.register("ns", f"so-{i}", meta(forecast="auto", leadTimeSeconds="6"))
    try:
        while state.objects.has_pending:  # in chunks
            await state.loop.backfill(clock[0])
        assert state.worker is not None
        calls: list[str] = []
        real_call = state.worker._call

        def counting(op: str, fid: int, args: tuple) -> object:
            calls.append(f"{op}:{len(args[0]) if op == 'batch' else ''}")
            return real_call(op, fid, args)

        state.worker._call = counting  # type: ignore[method-assign]
        for _ in range(2):  # one of two refreshes closes a 2 s bin
            clock[0] += 1.0
            await state.refresh(clock[0])
        assert calls == [f"batch:{PREDICT_CHUNK}", f"batch:{objects - PREDICT_CHUNK}"]
        fitted = sum(1 for e in state.objects if e.prediction is not None)
        assert fitted == objects
    finally:
        await state.stop()


async def test_missed_refreshes_are_filled_like_ones_that_ran() -> None:
    """A scaler that misses refreshes (a busy node) catches up tick by tick,
    each tick's forecasts in one batch: afterwards its decision history and
    forecasts equal a scaler that ran every tick."""

    def decisions(state: ScalerState) -> list[object]:
        out: list[object] = []
        for entry in state.objects:
            out.append([(d.time_s, d.replicas, d.reason) for d in entry.decisions])
            f = entry.forecast
            out.append(None if f is None else (f.upper_requests_per_s, f.median_requests_per_s))
        return out

    runs = []
    for skip in (False, True):
        clock = [1000.0]
        state = _clocked_state(clock, refit_interval_s=20.0, fit_window_s=60.0)
        for i in range(3):
            state.register(
                "ns",
                f"so-{i}",
                meta(forecast="auto", leadTimeSeconds="6", scaleDownStabilizationSeconds="30"),
            )
        try:
            await state.loop.backfill(clock[0])
            await state.refresh(clock[0])  # the loop's first tick
            for n in range(1, 41):
                clock[0] += 1.0
                if skip and n % 8 != 0:
                    continue  # the loop missed this refresh
                if skip:
                    last_tick = state.loop.last_tick_s
                    assert last_tick is not None
                    await state.loop.catch_up(last_tick, clock[0])
                await state.refresh(clock[0])
            runs.append(decisions(state))
        finally:
            await state.stop()
    assert any(isinstance(x, tuple) for x in runs[0])  # forecasts were made
    assert runs[1] == runs[0]
