"""The forecast memo: exact answers, hits only on identical inputs, bounded stores."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.profiles import get_profile
from forecasting import Forecast, make_forecaster
from simulations.forecast_memo import MEMOIZABLE, ForecastMemo, MemoizedForecaster
from simulations.policies import PolicySpec, make_controller, predictive_spec
from simulations.simulation import SimConfig, SimResult, Simulation
from simulations.traffic import Workload
from simulations.tune.sides import GATEWAY_QUERY
from tests.support.synthetic_traffic import synthetic_workload
from tests.support.tuned_metadata import apply_metadata

PROFILE = get_profile("llama-3-8b@g5.xlarge")
STEP_S = 15.0
QS = (0.5, 0.9)


def _history(seed: int, n: int = 40) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.gamma(2.0, 5.0, n)


def _raw(
    method: str, fit_y: np.ndarray, y: np.ndarray, horizon: int, qs: tuple[float, ...]
) -> Forecast:
    model = make_forecaster(method)
    model.fit(fit_y, STEP_S)
    model.update(y)
    return model.predict(horizon, qs)


def _same(a: Forecast, b: Forecast) -> bool:
    return (
        a.step_s == b.step_s
        and a.horizon_steps == b.horizon_steps
        and a.quantiles == b.quantiles
        and a.values.tobytes() == b.values.tobytes()
    )


def test_the_same_inputs_hit_and_give_the_identical_forecast() -> None:
    """A second forecaster fed what the first was fed gets the first's forecast
    without fitting; both equal the plain forecaster's, byte for byte."""
    memo = ForecastMemo()
    y = _history(0)
    first = memo.forecaster("prescaler")
    first.fit(y[:30], STEP_S)
    first.update(y[:34])
    a = first.predict(12, QS)
    second = memo.forecaster("prescaler")
    second.fit(y[:30], STEP_S)
    second.update(y[:34])
    b = second.predict(12, QS)
    assert b is a
    assert _same(a, _raw("prescaler", y[:30], y[:34], 12, QS))
    stats = memo.stats
    assert (stats.fits_requested, stats.fits_run, stats.fits_restored) == (2, 1, 0)
    assert (stats.predicts_run, stats.predicts_reused) == (1, 1)
    assert stats.predict_hit_rate == 0.5 and stats.fits_avoided == 1


def test_another_history_misses_and_another_quantile_restores_the_fit() -> None:
    """One changed value of the updated history is a new forecast (computed on
    the same fit); a new quantile on a stored fit restores the fitted model
    instead of refitting; a changed fit history refits. Every answer is the
    plain forecaster's."""
    memo = ForecastMemo()
    y = _history(1)
    first = memo.forecaster("prescaler")
    first.fit(y[:30], STEP_S)
    first.update(y[:34])
    first.predict(12, QS)
    changed = y[:34].copy()
    changed[-1] += 1.0
    first.update(changed)
    moved = first.predict(12, QS)
    assert _same(moved, _raw("prescaler", y[:30], changed, 12, QS))
    assert (memo.stats.predicts_run, memo.stats.fits_run) == (2, 1)

    other = memo.forecaster("prescaler")
    other.fit(y[:30], STEP_S)
    other.update(y[:34])
    wider = other.predict(14, (0.5, 0.95))
    assert _same(wider, _raw("prescaler", y[:30], y[:34], 14, (0.5, 0.95)))
    assert (memo.stats.fits_run, memo.stats.fits_restored) == (1, 1)

    refit = memo.forecaster("prescaler")
    fit_y = y[:30].copy()
    fit_y[0] += 1.0
    refit.fit(fit_y, STEP_S)
    refit.update(y[:34])
    refit.predict(12, QS)
    assert memo.stats.fits_run == 2


def test_a_method_not_known_to_be_memoizable_runs_plain() -> None:
    """Methods whose update depends on earlier calls are never wrapped."""
    memo = ForecastMemo()
    assert "prescaler" in MEMOIZABLE and "holt_winters" not in MEMOIZABLE
    assert isinstance(memo.forecaster("prescaler"), MemoizedForecaster)
    assert not isinstance(memo.forecaster("holt_winters"), MemoizedForecaster)


def test_errors_are_the_methods_own() -> None:
    """Bad history fails at fit as the method's does; predicting before a fit too."""
    memo = ForecastMemo()
    model = memo.forecaster("prescaler")
    with pytest.raises(RuntimeError, match="before fit"):
        model.predict(4, QS)
    with pytest.raises(ValueError, match="NaN"):
        model.fit(np.array([1.0, np.nan, 2.0]), STEP_S)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    bound=st.integers(0, 20_000),
    calls=st.lists(st.tuples(st.integers(0, 5), st.integers(1, 30)), min_size=1, max_size=30),
)
def test_the_forecast_store_stays_within_its_bound(
    bound: int, calls: list[tuple[int, int]]
) -> None:
    """Whatever is asked, the forecasts kept never exceed the byte bound, the
    least recently used go first, and every answer is the plain method's."""
    memo = ForecastMemo(max_fitted_bytes=bound, max_forecast_bytes=bound)
    y = np.arange(1.0, 41.0)
    model = MemoizedForecaster("last_value", memo)
    model.fit(y, STEP_S)
    for shift, horizon in calls:
        model.update(y[: 35 + shift])
        got = model.predict(horizon, QS)
        assert _same(got, _raw("last_value", y, y[: 35 + shift], horizon, QS))
        sizes = memo.sizes
        assert sizes["forecast_bytes"] <= bound and sizes["fitted_bytes"] <= bound
    stats = memo.stats
    assert stats.predicts_run + stats.predicts_reused == len(calls)
    if bound == 0:
        assert stats.predicts_reused == 0 and memo.sizes["forecasts"] == 0


def test_the_least_recently_used_forecast_is_dropped_first() -> None:
    """With room for two forecasts, asking a third drops the one not used longest."""
    y = np.arange(1.0, 41.0)
    one = 2 * 8 * 10 + 400  # two quantiles x 10 steps of float64, plus the overhead
    memo = ForecastMemo(max_forecast_bytes=2 * one)
    model = MemoizedForecaster("last_value", memo)
    model.fit(y, STEP_S)

    def ask(n: int) -> None:
        model.update(y[:n])
        model.predict(10, QS)

    ask(30)
    ask(31)
    ask(30)  # hit: 30 is now the most recent
    ask(32)  # evicts 31
    before = memo.stats.predicts_reused
    ask(30)
    assert memo.stats.predicts_reused == before + 1
    ask(31)
    assert memo.stats.predicts_reused == before + 1  # 31 was dropped: computed again


def _workload() -> Workload:
    return synthetic_workload(
        duration_s=420.0,
        base_rps=0.5,
        seed=3,
        bursts=((240.0, 120.0, 4.0),),
        prompt_tokens=(400, 0.5),
        output_tokens=(80, 0.5),
    )


def _run(memo: ForecastMemo | None, gateway: bool = True) -> SimResult:
    w = _workload()
    spec = predictive_spec(PROFILE.name, max_replicas=6)
    if gateway:
        assert spec.scaledobject is not None
        so = apply_metadata(spec.scaledobject, {"gatewayRateQuery": GATEWAY_QUERY})
        spec = PolicySpec("gateway", "scaledobject", scaledobject=so)
    controller = make_controller(spec, w, PROFILE, forecast_memo=memo)
    return Simulation(w, PROFILE, controller, SimConfig()).run()


def _outcome(r: SimResult) -> list[bytes]:
    keys = sorted(r.timeline)
    return [
        *(np.asarray(r.timeline[k], dtype=float).tobytes() for k in keys),
        np.asarray(r.ttft_s, dtype=float).tobytes(),
        np.asarray(r.status).tobytes(),
    ]


def test_a_simulated_run_is_the_same_with_and_without_the_memo() -> None:
    """A prescaler run without the memo, with a cold memo and again with the
    warm one: identical timelines (forecast band included), TTFTs and
    outcomes; the repeat computes no forecast."""
    plain = _outcome(_run(None))
    memo = ForecastMemo()
    cold = _outcome(_run(memo))
    computed = memo.stats.predicts_run
    assert computed > 0 and memo.stats.fits_run > 0
    warm = _outcome(_run(memo))
    assert cold == plain and warm == plain
    assert memo.stats.predicts_run == computed
    assert memo.stats.predicts_reused == computed


def test_a_tracker_fed_by_vllm_counters_does_not_use_the_memo() -> None:
    """Without a gateway series the tracker's history depends on which pods a
    run started, so it cannot match another run's: the memo is left alone."""
    memo = ForecastMemo()
    _run(memo, gateway=False)
    assert memo.stats.fits_run == 0 and memo.stats.predicts_run == 0


def test_a_gateway_fed_tracker_shares_its_forecasts_across_settings() -> None:
    """With ``gatewayRateQuery`` the tracker's demand is the gateway's count,
    which no scaling decision changes: a run with another target reuses every
    forecast, and one that also asks another quantile computes its forecasts
    on the first run's fits without refitting."""
    w = _workload()
    base = predictive_spec(PROFILE.name, max_replicas=6).scaledobject
    assert base is not None
    memo = ForecastMemo()

    def run(meta: dict[str, str]) -> None:
        so = apply_metadata(base, {"gatewayRateQuery": GATEWAY_QUERY, **meta})
        spec = PolicySpec("gateway", "scaledobject", scaledobject=so)
        controller = make_controller(spec, w, PROFILE, forecast_memo=memo)
        Simulation(w, PROFILE, controller, SimConfig()).run()

    run({"targetWaitingPerReplica": "3"})
    first = memo.stats
    assert first.fits_run > 0 and first.predicts_run > 0
    run({"targetWaitingPerReplica": "6"})
    second = memo.stats
    assert (second.fits_run, second.predicts_run) == (first.fits_run, first.predicts_run)
    assert second.predicts_reused == first.predicts_run
    run({"targetWaitingPerReplica": "6", "forecastQuantile": "0.8"})
    third = memo.stats
    assert third.fits_run == first.fits_run and third.fits_restored > 0
    assert third.predicts_run > second.predicts_run


def test_a_refit_on_the_same_history_forgets_the_update_between() -> None:
    """fit(y), update(y2), predict, then fit(y) again with no update: the
    second forecast is the plain forecaster's for y alone, not y2's."""
    rng = np.random.default_rng(5)
    y = rng.poisson(20.0, 300).astype(float)
    y2 = np.concatenate([y, rng.poisson(60.0, 40).astype(float)])
    memo = ForecastMemo()
    model = MemoizedForecaster("prescaler", memo)
    model.fit(y, STEP_S)
    model.update(y2)
    model.predict(8, QS)
    model.fit(y, STEP_S)
    again = model.predict(8, QS)
    plain = make_forecaster("prescaler")
    plain.fit(y, STEP_S)
    assert again.values.tobytes() == plain.predict(8, QS).values.tobytes()
