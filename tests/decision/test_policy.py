"""decision.policy: worked examples and hypothesis properties of decide()."""

from __future__ import annotations

import dataclasses
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from decision.policy import (
    REASONS,
    Decision,
    DemandForecast,
    Observation,
    ReplicaCapacity,
    burst_started,
    decide,
    is_active,
)
from decision.settings import ScalerSettings, parse_settings

NAN = math.nan
BASE = ScalerSettings(prometheus_address="http://p:9090")
UNKNOWN = ReplicaCapacity.unknown()


def obs(**kw: float) -> Observation:
    values = dict(
        time_s=1000.0,
        ready_replicas=2,
        waiting=0.0,
        running=0.0,
        kv_usage=0.0,
        arrival_rate_rps=0.0,
        prompt_tokens_per_s=0.0,
        generation_tokens_per_s=0.0,
        preemptions_per_s=0.0,
        data_age_s=1.0,
    )
    values.update(kw)
    return Observation(**values)  # type: ignore[arg-type]


def fc(
    upper: float, median: float | None = None, horizon: float = 300.0, tokens: float | None = None
) -> DemandForecast:
    return DemandForecast(horizon, 0.9, upper, upper if median is None else median, tokens)


def test_queue_term_is_todays_keda_trigger() -> None:
    """waiting / targetWaitingPerReplica, rounded up."""
    d = decide(obs(waiting=30.0, running=8.0), None, BASE, [], UNKNOWN)
    assert (d.replicas, d.reason, d.proposals["queue"]) == (10, "queue", 10.0)
    assert decide(obs(waiting=31.0), None, BASE, [], UNKNOWN).replicas == 11


def test_kv_term_brings_usage_under_target() -> None:
    d = decide(obs(ready_replicas=4, kv_usage=0.95), None, BASE, [], UNKNOWN)
    assert (d.replicas, d.reason) == (5, "kv_cache")  # ceil(4 * 0.95 / 0.8) = 5
    exact = decide(obs(ready_replicas=4, kv_usage=0.8), None, BASE, [], UNKNOWN)
    assert exact.replicas == 4  # float noise must not round 4.0000001 up


def test_load_term_uses_capacity() -> None:
    cap = ReplicaCapacity(requests_per_s=2.0, tokens_per_s=1000.0)
    d = decide(
        obs(prompt_tokens_per_s=3000.0, generation_tokens_per_s=1500.0, arrival_rate_rps=3.0),
        None,
        BASE,
        [],
        cap,
    )
    assert (d.replicas, d.reason, d.proposals["load"]) == (5, "load", 5.0)


def test_forecast_term_adds_capacity_ahead() -> None:
    cap = ReplicaCapacity(requests_per_s=1.0, tokens_per_s=None)
    d = decide(obs(arrival_rate_rps=1.0), fc(7.2), BASE, [], cap)
    assert (d.replicas, d.reason, d.proposals["forecast"]) == (8, "forecast", 8.0)
    off = dataclasses.replace(BASE, forecast="off")
    assert decide(obs(arrival_rate_rps=1.0), fc(7.2), off, [], cap).replicas == 1


def test_tiny_forecast_is_noise() -> None:
    """Less than one request expected over the horizon -> no forecast replica."""
    cap = ReplicaCapacity(requests_per_s=1.0, tokens_per_s=None)
    d = decide(obs(), fc(0.002, horizon=300.0), BASE, [], cap)
    assert (d.replicas, d.reason) == (0, "idle")


def test_clamps_and_reasons() -> None:
    s = dataclasses.replace(BASE, min_replicas=2, max_replicas=5)
    assert decide(obs(), None, s, [], UNKNOWN).reason == "min_replicas"
    d = decide(obs(waiting=300.0), None, s, [], UNKNOWN)
    assert (d.replicas, d.reason, d.proposals["queue"]) == (5, "max_replicas", 100.0)


def test_scale_down_waits_for_the_stabilization_window() -> None:
    s = dataclasses.replace(BASE, scale_down_stabilization_seconds=300.0)
    high = decide(obs(time_s=0.0, waiting=30.0), None, s, [], UNKNOWN)
    history = [high]
    d = decide(obs(time_s=200.0, waiting=3.0), None, s, history, UNKNOWN)
    assert (d.replicas, d.reason, d.proposals["recommendation"]) == (10, "scale_down_hold", 1.0)
    history.append(d)
    later = decide(obs(time_s=301.0, waiting=3.0), None, s, history, UNKNOWN)
    assert (later.replicas, later.reason) == (1, "queue")  # the hold does not chain


def test_stale_data_holds_then_falls_back() -> None:
    s = dataclasses.replace(
        BASE, stale_after_seconds=60, fallback_after_seconds=300, fallback_replicas=3
    )
    last = decide(obs(time_s=0.0, waiting=24.0), None, s, [], UNKNOWN)
    assert last.replicas == 8
    held = decide(obs(time_s=100.0, data_age_s=100.0), None, s, [last], UNKNOWN)
    assert (held.replicas, held.reason, held.data_stale) == (8, "stale_hold", True)
    fb = decide(obs(time_s=400.0, data_age_s=400.0), None, s, [last, held], UNKNOWN)
    assert (fb.replicas, fb.reason, fb.data_stale) == (3, "fallback", True)
    # obs missing entirely: age counted from the last fresh decision
    none_held = decide(None, None, s, [last], UNKNOWN, now=120.0)
    assert (none_held.replicas, none_held.reason) == (8, "stale_hold")
    none_fb = decide(None, None, s, [last], UNKNOWN, now=301.0)
    assert (none_fb.replicas, none_fb.reason, none_fb.data_age_s) == (
        3,
        "fallback",
        301.0,
    )


def test_fallback_default_keeps_holding() -> None:
    last = decide(obs(time_s=0.0, waiting=24.0), None, BASE, [], UNKNOWN)
    d = decide(None, None, BASE, [last], UNKNOWN, now=10_000.0)
    assert (d.replicas, d.reason) == (8, "fallback")


def test_no_data_at_all() -> None:
    d = decide(None, None, BASE, [], UNKNOWN, now=5.0)
    assert (d.replicas, d.reason, d.data_stale, d.time_s) == (0, "no_data", True, 5.0)
    s = dataclasses.replace(BASE, fallback_replicas=2)
    assert decide(None, None, s, [], UNKNOWN).replicas == 2


def test_never_observed_stays_no_data_until_the_fallback() -> None:
    """A fleet never read keeps answering ``no_data`` (UNAVAILABLE to KEDA) at
    every refresh: the earlier ``no_data`` answers are not held as if they were
    observations (that gave minReplicas from the second refresh on)."""
    s = dataclasses.replace(BASE, min_replicas=1, fallback_after_seconds=300)
    history: list[Decision] = []
    for t in range(0, 3000, 5):
        d = decide(None, None, s, history, UNKNOWN, now=float(t))
        assert d.reason == "no_data", t
        history = [*history[-3:], d]  # trimmed like the live history
    # a first real reading ends it
    seen = decide(obs(time_s=3000.0, waiting=9.0), None, s, history, UNKNOWN)
    assert (seen.reason, seen.replicas) == ("queue", 3)
    fb = dataclasses.replace(s, fallback_replicas=4)
    history = []
    reasons = []
    for t in range(0, 400, 5):
        d = decide(None, None, fb, history, UNKNOWN, now=float(t))
        reasons.append((t, d.reason, d.replicas))
        history = [*history[-3:], d]
    assert all(r == "no_data" for t, r, _ in reasons if t < 300)
    assert all((r, n) == ("fallback", 4) for t, r, n in reasons if t == 300)
    assert all(n == 4 for t, _, n in reasons if t >= 300)


def test_missing_signal_may_raise_but_never_lower() -> None:
    last = decide(obs(time_s=0.0, waiting=30.0), None, BASE, [], UNKNOWN)
    far = BASE.scale_down_stabilization_seconds + 1
    d = decide(obs(time_s=far, waiting=0.0, kv_usage=NAN), None, BASE, [last], UNKNOWN)
    assert (d.replicas, d.reason, d.data_stale) == (10, "partial_hold", False)
    up = decide(obs(time_s=far, waiting=60.0, kv_usage=NAN), None, BASE, [last], UNKNOWN)
    assert up.replicas == 20


def test_every_reason_is_declared() -> None:
    cases = [
        decide(obs(waiting=9.0), None, BASE, [], UNKNOWN),
        decide(obs(), None, BASE, [], UNKNOWN),
        decide(None, None, BASE, [], UNKNOWN),
    ]
    assert all(c.reason in REASONS for c in cases)


# ---------------------------------------------------------------------------
# is_active / burst_started
# ---------------------------------------------------------------------------


def test_is_active() -> None:
    assert not is_active(obs(), None, BASE)
    assert is_active(obs(running=1.0), None, BASE)
    assert is_active(obs(arrival_rate_rps=0.1), None, BASE)
    assert is_active(obs(), fc(0.01, horizon=300.0), BASE)  # 3 requests expected in the lead time
    assert not is_active(obs(), fc(0.001, horizon=300.0), BASE)
    assert not is_active(obs(), fc(5.0), dataclasses.replace(BASE, forecast="off"))
    assert is_active(obs(), None, dataclasses.replace(BASE, min_replicas=1))
    # stale or missing data: keep the previous answer, never flip to inactive
    assert is_active(obs(data_age_s=1e6), None, BASE, previous=True)
    assert is_active(None, None, BASE, previous=True)
    assert not is_active(None, None, BASE, previous=False)


def test_burst_started() -> None:
    idle, busy = obs(), obs(running=2.0, arrival_rate_rps=1.0)
    assert burst_started(idle, busy)
    assert burst_started(None, busy)
    assert not burst_started(busy, busy)
    assert burst_started(busy, obs(running=2.0, waiting=4.0))  # a queue forms
    assert not burst_started(busy, idle)
    assert not burst_started(idle, None)


# ---------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------

finite = st.floats(min_value=0, max_value=1e4, allow_nan=False)
maybe = st.one_of(finite, st.just(NAN))


@st.composite
def settings_st(draw: st.DrawFn) -> ScalerSettings:
    lo = draw(st.integers(0, 5))
    hi = draw(st.integers(max(lo, 1), 60))
    stale = draw(st.floats(1, 120))
    return dataclasses.replace(
        BASE,
        min_replicas=lo,
        max_replicas=hi,
        target_waiting_per_replica=draw(st.floats(0.5, 20)),
        target_kv_cache_usage=draw(st.floats(0.1, 1.0)),
        scale_down_stabilization_seconds=draw(st.floats(0, 600)),
        stale_after_seconds=stale,
        fallback_after_seconds=stale + draw(st.floats(0, 600)),
        fallback_replicas=draw(st.one_of(st.none(), st.integers(lo, hi))),
        forecast=draw(st.sampled_from(["auto", "off"])),
    )


@st.composite
def obs_st(draw: st.DrawFn, t: float = 1000.0) -> Observation:
    return obs(
        time_s=t,
        ready_replicas=draw(st.integers(0, 80)),
        waiting=draw(maybe),
        running=draw(maybe),
        kv_usage=draw(st.one_of(st.floats(0, 1), st.just(NAN))),
        arrival_rate_rps=draw(maybe),
        prompt_tokens_per_s=draw(maybe),
        generation_tokens_per_s=draw(maybe),
        data_age_s=draw(st.one_of(st.floats(0, 1000), st.just(NAN))),
    )


capacity_st = st.builds(
    ReplicaCapacity,
    st.one_of(st.none(), st.floats(0.01, 100)),
    st.one_of(st.none(), st.floats(1, 1e5)),
)
forecast_st = st.one_of(
    st.none(),
    st.builds(
        lambda up, h, tok: DemandForecast(h, 0.9, up, up / 2, tok),
        finite,
        st.floats(1, 3600),
        st.one_of(st.none(), st.floats(0, 1e6)),
    ),
)


@st.composite
def history_st(draw: st.DrawFn, t: float = 1000.0) -> list[Decision]:
    n = draw(st.integers(0, 6))
    times = sorted(draw(st.lists(st.floats(0, t), min_size=n, max_size=n)))
    out = []
    for time_s in times:
        replicas = draw(st.integers(0, 80))
        out.append(
            Decision(
                time_s,
                replicas,
                "queue",
                {"recommendation": float(draw(st.integers(0, replicas)))},
                data_stale=draw(st.booleans()),
            )
        )
    return out


PROPS = settings(max_examples=150, deadline=None)


@PROPS
@given(obs_st(), forecast_st, settings_st(), history_st(), capacity_st)
def test_result_within_bounds(
    o: Observation,
    f: DemandForecast | None,
    s: ScalerSettings,
    h: list[Decision],
    c: ReplicaCapacity,
) -> None:
    d = decide(o, f, s, h, c)
    assert s.min_replicas <= d.replicas <= s.max_replicas
    assert d.reason in REASONS
    assert isinstance(d.replicas, int)


@PROPS
@given(obs_st(), forecast_st, settings_st(), history_st(), capacity_st, finite, finite)
def test_monotone_in_waiting(
    o: Observation,
    f: DemandForecast | None,
    s: ScalerSettings,
    h: list[Decision],
    c: ReplicaCapacity,
    w1: float,
    w2: float,
) -> None:
    lo, hi = sorted((w1, w2))
    a = decide(dataclasses.replace(o, waiting=lo), f, s, h, c)
    b = decide(dataclasses.replace(o, waiting=hi), f, s, h, c)
    assert a.replicas <= b.replicas


@PROPS
@given(obs_st(), settings_st(), history_st(), capacity_st, finite, finite, st.floats(1, 3600))
def test_monotone_in_forecast(
    o: Observation,
    s: ScalerSettings,
    h: list[Decision],
    c: ReplicaCapacity,
    u1: float,
    u2: float,
    horizon: float,
) -> None:
    lo, hi = sorted((u1, u2))
    a = decide(o, DemandForecast(horizon, 0.9, lo, lo / 2, lo * 100), s, h, c)
    b = decide(o, DemandForecast(horizon, 0.9, hi, hi / 2, hi * 100), s, h, c)
    assert a.replicas <= b.replicas


@PROPS
@given(obs_st(), forecast_st, settings_st(), history_st(), capacity_st)
def test_forecast_never_removes_live_capacity(
    o: Observation,
    f: DemandForecast | None,
    s: ScalerSettings,
    h: list[Decision],
    c: ReplicaCapacity,
) -> None:
    """With a forecast (however low) the answer is >= the answer without one,
    and >= what the live signals alone require."""
    with_f = decide(o, f, s, h, c)
    without = decide(o, None, s, h, c)
    assert with_f.replicas >= without.replicas
    if not without.data_stale:
        live = int(without.proposals["reactive"])
        assert with_f.replicas >= min(s.max_replicas, max(s.min_replicas, live))


@PROPS
@given(obs_st(), forecast_st, settings_st(), history_st(), capacity_st, st.floats(0, 5000))
def test_stale_or_missing_never_lowers(
    o: Observation,
    f: DemandForecast | None,
    s: ScalerSettings,
    h: list[Decision],
    c: ReplicaCapacity,
    extra_age: float,
) -> None:
    """Stale (beyond staleAfter) or absent data never answers below the last
    decision, until fallbackAfter when a configured fallback applies."""
    if not h:
        return
    last = min(h[-1].replicas, s.max_replicas)
    last = max(last, s.min_replicas)
    stale = dataclasses.replace(o, data_age_s=s.stale_after_seconds + 1 + extra_age)
    for d in (decide(stale, f, s, h, c), decide(None, f, s, h, c, now=o.time_s)):
        assert d.data_stale
        if d.reason == "fallback" and s.fallback_replicas is not None:
            assert d.replicas == s.fallback_replicas
        else:
            assert d.replicas >= last
    # a fresh observation missing a live signal never lowers either (KV usage
    # is only "missing" when some replica is ready: no pod, no KV series)
    partial = dataclasses.replace(
        o,
        data_age_s=0.0,
        kv_usage=NAN,
        ready_replicas=max(1, o.ready_replicas),
        waiting=o.waiting if math.isfinite(o.waiting) else 1.0,
    )
    d = decide(partial, f, s, h, c)
    assert d.replicas >= last


@PROPS
@given(obs_st(), forecast_st, settings_st(), capacity_st, st.integers(0, 80), st.floats(0, 1))
def test_scale_in_respects_the_window(
    o: Observation,
    f: DemandForecast | None,
    s: ScalerSettings,
    c: ReplicaCapacity,
    high: int,
    frac: float,
) -> None:
    """Within the stabilization window, an earlier higher recommendation holds."""
    high = min(max(high, s.min_replicas), s.max_replicas)
    t0 = o.time_s - frac * s.scale_down_stabilization_seconds * 0.999
    earlier = Decision(t0, high, "queue", {"recommendation": float(high)})
    fresh = dataclasses.replace(
        o,
        data_age_s=0.0,
        waiting=0.0 if math.isnan(o.waiting) else o.waiting,
        kv_usage=0.0 if math.isnan(o.kv_usage) else o.kv_usage,
    )
    d = decide(fresh, f, s, [earlier], c)
    if s.scale_down_stabilization_seconds > 0 and t0 < o.time_s:
        assert d.replicas >= high


def test_no_replicas_means_no_kv_signal_to_miss() -> None:
    """At zero ready replicas a NaN KV usage is not missing data: scale-in may proceed."""
    last = Decision(0.0, 2, "queue", {"recommendation": 2.0})
    d = decide(obs(time_s=1000.0, ready_replicas=0, kv_usage=NAN), None, BASE, [last], UNKNOWN)
    assert (d.replicas, d.reason) == (0, "idle")


def test_partial_data_turns_activity_on_but_never_off() -> None:
    """Waiting unknown (a replica could not be read): previous activity is kept."""
    s = parse_settings({"prometheusAddress": "http://p:9090", "minReplicas": "0"})
    quiet = Observation(100.0, 2, NAN, 0.0, 0.2, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert is_active(quiet, None, s, previous=True)
    assert not is_active(quiet, None, s, previous=False)
    busy = dataclasses.replace(quiet, running=3.0)
    assert is_active(busy, None, s, previous=False)
    full = dataclasses.replace(quiet, waiting=0.0)
    assert not is_active(full, None, s, previous=True)


# --------------------------------------------------------- the gateway's rate
ZERO = ScalerSettings(prometheus_address="http://p:9090", gateway_rate_query="sum(rate(g[1m]))")


def at_zero(**kw: float) -> Observation:
    """A fleet at zero as Prometheus shows it: no replica, no vLLM signal."""
    values = dict(ready_replicas=0, waiting=NAN, running=NAN, kv_usage=NAN, arrival_rate_rps=NAN)
    values.update(kw)
    return obs(**values)


def test_gateway_demand_wakes_a_fleet_at_zero() -> None:
    """No vLLM series at zero, but requests at the gateway: the observation is
    fresh, IsActive is true and the answer is at least one replica."""
    seen = at_zero(gateway_rate_rps=0.2)
    d = decide(seen, None, ZERO, [], UNKNOWN)
    assert (d.replicas, d.reason, d.data_stale) == (1, "wake", False)
    assert is_active(seen, None, ZERO)
    assert burst_started(at_zero(gateway_rate_rps=0.0), seen)


def test_gateway_demand_sizes_the_wake_with_capacity() -> None:
    """With capacity known the gateway's rate is the load term's demand."""
    d = decide(at_zero(gateway_rate_rps=5.0), None, ZERO, [], ReplicaCapacity(requests_per_s=2.0))
    assert (d.replicas, d.reason, d.proposals["load"]) == (3, "load", 3.0)


def test_quiet_gateway_lets_a_fleet_at_zero_stay_there() -> None:
    quiet = at_zero(gateway_rate_rps=0.0)
    d = decide(quiet, None, ZERO, [], UNKNOWN)
    assert (d.replicas, d.reason, d.data_stale) == (0, "idle", False)
    assert not is_active(quiet, None, ZERO, previous=True)


def test_unknown_gateway_at_zero_is_no_data_not_zero_demand() -> None:
    """A failed gateway query at zero replicas leaves nothing known: stale,
    the previous IsActive holds."""
    unknown = at_zero(gateway_rate_rps=NAN)
    assert decide(unknown, None, ZERO, [], UNKNOWN).data_stale
    assert is_active(unknown, None, ZERO, previous=True)


def test_unknown_gateway_over_an_empty_fleets_zeros_holds() -> None:
    """The sources read a fleet at zero as zeros (no pod: nothing waiting,
    nothing arriving), so a failed gateway query would leave an observation
    that looks idle: with the key set it is stale instead, IsActive holds
    and the decision never scales in on it."""
    empty = at_zero(waiting=0.0, running=0.0, arrival_rate_rps=0.0, gateway_rate_rps=NAN)
    d = decide(empty, None, ZERO, [], UNKNOWN)
    assert d.data_stale and d.reason != "idle"
    assert is_active(empty, None, ZERO, previous=True)
    assert not is_active(empty, None, ZERO, previous=False)
    # without the key an empty fleet's zeros are all there is: idle
    plain = ScalerSettings(prometheus_address="http://p:9090")
    assert decide(empty, None, plain, [], UNKNOWN).reason == "idle"


def test_gateway_rate_is_the_demand_while_replicas_serve() -> None:
    """Requests held at the gateway count: the gateway's rate, not vLLM's
    arrivals, is sized for."""
    cap = ReplicaCapacity(requests_per_s=1.0)
    d = decide(obs(arrival_rate_rps=1.0, gateway_rate_rps=4.0), None, ZERO, [], cap)
    assert (d.replicas, d.proposals["load"]) == (4, 4.0)


def test_forecast_within_lead_time_wakes_a_fleet_at_zero() -> None:
    """Nothing arrives yet, but the forecast expects requests within the lead
    time: active, and at least one replica even with capacity unknown."""
    quiet = at_zero(gateway_rate_rps=0.0)
    burst = fc(0.05, horizon=300.0)  # 15 requests expected over the horizon
    d = decide(quiet, burst, ZERO, [], UNKNOWN)
    assert (d.replicas, d.reason) == (1, "forecast")
    assert is_active(quiet, burst, ZERO)
    off = dataclasses.replace(ZERO, forecast="off")
    assert decide(quiet, burst, off, [], UNKNOWN).replicas == 0


def test_an_upper_band_alone_does_not_keep_a_fleet_up() -> None:
    """The wake bar is the median: after a session an upper band that never
    quite reaches zero (here 9 requests over the horizon) must not hold a
    replica while the median expects none; the median's one request does."""
    quiet = at_zero(gateway_rate_rps=0.0)
    tail = fc(0.01, median=0.0, horizon=900.0)
    assert (decide(quiet, tail, ZERO, [], UNKNOWN).replicas, is_active(quiet, tail, ZERO)) == (
        0,
        False,
    )
    expected = fc(0.01, median=1.2 / 900.0, horizon=900.0)
    assert decide(quiet, expected, ZERO, [], UNKNOWN).replicas == 1
    assert is_active(quiet, expected, ZERO)


@given(rate=st.floats(0.0, 1e4), capacity=st.floats(0.01, 100.0))
@settings(max_examples=200, deadline=None)
def test_gateway_demand_at_zero_always_wakes(rate: float, capacity: float) -> None:
    """At zero replicas, any demand at the gateway (however small, whatever
    the capacity) is answered with at least one replica and IsActive; none is
    answered with zero and inactive."""
    seen = at_zero(gateway_rate_rps=rate)
    d = decide(seen, None, ZERO, [], ReplicaCapacity(requests_per_s=capacity))
    assert d.replicas >= (1 if rate > 0 else 0)
    assert (d.replicas == 0) == (rate == 0) == (not is_active(seen, None, ZERO, previous=True))
    if rate > 0:
        assert d.replicas >= min(ZERO.max_replicas, math.ceil(rate / capacity - 1e-9))
