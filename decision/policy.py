"""The replica decision: pure, deterministic, shared by the scaler and the simulator.

``decide()`` turns the live observation, a demand forecast, the settings,
earlier decisions and per-replica capacity into a :class:`Decision`: how
many replicas, why (a :class:`Reason`), and what each term proposed. It does
no I/O and reads no clock, so settings tuned on the simulator's virtual time
transfer to production unchanged. The rules (reactive and forecast terms,
the holds, stale data) are set out in docs/architecture.md, "The replica
decision".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from decision.answer import NO_ANSWER_REASONS, REASONS, Decision, Reason, past_fallback
from decision.queue_hold import queue_hold
from decision.settings import ScalerSettings

__all__ = [
    "NO_ANSWER_REASONS",
    "REASONS",
    "Decision",
    "DemandForecast",
    "Observation",
    "Reason",
    "ReplicaCapacity",
    "burst_started",
    "data_age",
    "decide",
    "demand_rate",
    "has_traffic",
    "is_active",
    "is_fresh",
]

NAN = float("nan")
_EPS = 1e-9  # so 5.0000000001 replicas of float noise does not ceil to 6

_TERMS = (Reason.QUEUE, Reason.KV_CACHE, Reason.LOAD, Reason.WAKE, Reason.FORECAST)
"""The terms a fresh decision may be named after, live ones first."""

WAKE_REQUESTS = 1.0
"""Requests a forecast must expect over the horizon to wake a fleet at zero:
below one, an upper band's tail is noise, not demand."""


@dataclass(frozen=True)
class Observation:
    """Live fleet signals at ``time_s``; NaN means unknown.

    ``waiting``/``running`` are sums over replicas, ``kv_usage`` the mean
    fraction (0..1) over ready replicas, rates are per second summed over
    replicas; ``data_age_s`` is how old the underlying samples are.
    ``gateway_rate_rps`` is the request rate in front of vLLM (NaN: not
    configured or unknown).
    """

    time_s: float
    ready_replicas: int
    waiting: float
    running: float
    kv_usage: float
    arrival_rate_rps: float
    prompt_tokens_per_s: float
    generation_tokens_per_s: float
    preemptions_per_s: float
    data_age_s: float
    gateway_rate_rps: float = NAN


@dataclass(frozen=True)
class DemandForecast:
    """Demand expected at ``t + horizon_s``: median and upper ``quantile``,
    and the recent days' own peak rate and request count over the same
    hours (``seasonal_*``, each the ``quantile`` across days; None when off
    or under two days are held)."""

    horizon_s: float
    quantile: float
    upper_requests_per_s: float
    median_requests_per_s: float
    upper_tokens_per_s: float | None = None
    seasonal_requests_per_s: float | None = None
    seasonal_tokens_per_s: float | None = None
    seasonal_requests: float | None = None
    """Requests the recent days saw over the horizon at these hours (widened
    by ``seasonalWanderSeconds`` on each side)."""

    @property
    def planned_requests_per_s(self) -> float:
        """What the forecast term sizes for: the upper quantile, or the
        recent days' peak when higher (NaN when neither is known)."""
        return _largest_finite(self.upper_requests_per_s, self.seasonal_requests_per_s)

    @property
    def planned_tokens_per_s(self) -> float | None:
        known = _largest_finite(self.upper_tokens_per_s, self.seasonal_tokens_per_s)
        return known if _finite(known) else None

    @property
    def expected_requests(self) -> float:
        """The wake bar's count over the horizon: the median's rate over it,
        or the requests the recent days saw over it when more. Counts, not
        the days' peak rate: a stray request on one day is one request, not
        a one-minute rate held for the whole horizon."""
        median = self.median_requests_per_s * max(self.horizon_s, 1.0)
        return _largest_finite(median, self.seasonal_requests)


@dataclass(frozen=True)
class ReplicaCapacity:
    """Sustainable load of one replica (from a profile, settings or learned).

    ``tokens_per_s`` counts prompt + generation tokens, like the
    observation's ``prompt_tokens_per_s + generation_tokens_per_s`` and the
    forecast's ``upper_tokens_per_s``.
    """

    requests_per_s: float | None = None
    tokens_per_s: float | None = None

    @classmethod
    def unknown(cls) -> ReplicaCapacity:
        return cls(None, None)


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _largest_finite(*values: float | None) -> float:
    """The largest finite value, NaN when none: ``max`` with a NaN first
    would answer NaN and hide the others."""
    known = [v for v in values if v is not None and math.isfinite(v)]
    return max(known) if known else NAN


def _ceil(x: float) -> int:
    return max(0, math.ceil(x - _EPS))


def _positive(x: float | None) -> bool:
    return x is not None and math.isfinite(x) and x > 0


def is_fresh(obs: Observation | None, settings: ScalerSettings) -> bool:
    """Whether ``obs`` is usable: present, of known age within
    ``stale_after_seconds``, and carrying waiting or KV usage (or, at zero
    replicas, the gateway's rate: the only signal a fleet at zero has).

    With ``gatewayRateQuery`` set, a fleet at zero whose gateway rate is
    unknown is not fresh: an empty fleet's zero queue says nothing about
    requests waiting at the gateway, so a failing gateway query must hold
    (then fall back), never read as "idle"."""
    if obs is None or obs.ready_replicas < 0:
        return False
    if not _finite(obs.data_age_s) or obs.data_age_s > settings.stale_after_seconds:
        return False
    at_zero_with_gateway = obs.ready_replicas == 0 and _finite(obs.gateway_rate_rps)
    if settings.gateway_rate_query is not None and obs.ready_replicas == 0:
        return at_zero_with_gateway
    return _finite(obs.waiting) or _finite(obs.kv_usage) or at_zero_with_gateway


def data_age(obs: Observation | None, history: Sequence[Decision], now: float) -> float:
    """How long the scaler has been without fresh data.

    The observation's own age when known; otherwise the time since the last
    decision made on fresh data (or since the first decision, if none was);
    infinity when there is no history at all.
    """
    if obs is not None and _finite(obs.data_age_s) and obs.data_age_s >= 0:
        return obs.data_age_s
    for d in reversed(history):
        if not d.data_stale:
            return max(0.0, now - d.time_s)
    if history:
        return max(0.0, now - history[0].time_s)
    return math.inf


def has_traffic(obs: Observation | None) -> bool:
    """Requests queued, running or arriving (at vLLM or at the gateway)."""
    if obs is None:
        return False
    return (
        _positive(obs.waiting)
        or _positive(obs.running)
        or _positive(obs.arrival_rate_rps)
        or _positive(obs.gateway_rate_rps)
    )


def _forecast_expects_requests(forecast: DemandForecast | None, settings: ScalerSettings) -> bool:
    if forecast is None or settings.forecast == "off":
        return False
    if not _finite(forecast.horizon_s):
        return False
    expected = forecast.expected_requests
    # At least one request expected over the horizon at the median (or seen
    # over it on recent days at these hours): below that, an upper band's
    # tail is noise, not demand (the median is the peak over the horizon,
    # so this is already generous to a short session).
    return _finite(expected) and expected >= WAKE_REQUESTS


def is_active(
    obs: Observation | None,
    forecast: DemandForecast | None,
    settings: ScalerSettings,
    *,
    previous: bool = False,
) -> bool:
    """KEDA's IsActive: traffic present, or forecast within the lead time.

    ``minReplicas > 0`` keeps it active (KEDA would otherwise scale to zero).
    Stale or missing data returns ``previous``: losing data must never be
    the reason KEDA scales a fleet to zero.
    """
    if settings.min_replicas > 0:
        return True
    if not is_fresh(obs, settings):
        return previous
    assert obs is not None
    seen = has_traffic(obs) or _forecast_expects_requests(forecast, settings)
    gateway_at_zero = obs.ready_replicas == 0 and _finite(obs.gateway_rate_rps)
    if not _finite(obs.waiting) and not gateway_at_zero:
        # Part of the fleet could not be read: what is seen may turn it on,
        # what is missing never turns it off (at zero there is no fleet to
        # read, and the gateway's rate says all there is).
        return previous or seen
    return seen


def burst_started(prev_obs: Observation | None, obs: Observation | None) -> bool:
    """A burst begins: traffic appears after none, or a queue forms.

    StreamIsActive pushes ``true`` on this edge so KEDA scales from zero at
    once instead of at its next poll.
    """
    if obs is None or not has_traffic(obs):
        return False
    if prev_obs is None or not has_traffic(prev_obs):
        return True
    return _positive(obs.waiting) and not _positive(prev_obs.waiting)


def _over_capacity(
    tokens_per_s: float | None, requests_per_s: float, capacity: ReplicaCapacity
) -> list[float]:
    """Demand over one replica's capacity: by tokens and by requests, each
    where both the rate and the capacity are known."""
    terms: list[float] = []
    cap_tokens, cap_requests = capacity.tokens_per_s, capacity.requests_per_s
    if cap_tokens is not None and _positive(cap_tokens) and _finite(tokens_per_s):
        assert tokens_per_s is not None
        terms.append(max(0.0, tokens_per_s) / cap_tokens)
    if cap_requests is not None and _positive(cap_requests) and _finite(requests_per_s):
        terms.append(max(0.0, requests_per_s) / cap_requests)
    return terms


def _load_term(obs: Observation, capacity: ReplicaCapacity) -> float | None:
    tokens = [v for v in (obs.prompt_tokens_per_s, obs.generation_tokens_per_s) if _finite(v)]
    terms = _over_capacity(sum(tokens) if tokens else None, demand_rate(obs), capacity)
    return max(terms) if terms else None


def demand_rate(obs: Observation) -> float:
    """Requests per second asking for replicas: the gateway's rate when known
    (it includes requests waiting there for a ready replica), else vLLM's
    arrivals; NaN when neither is known."""
    if _finite(obs.gateway_rate_rps):
        return obs.gateway_rate_rps
    return obs.arrival_rate_rps


def _forecast_term(
    forecast: DemandForecast | None, settings: ScalerSettings, capacity: ReplicaCapacity
) -> float | None:
    if forecast is None or settings.forecast == "off":
        return None
    if not _forecast_expects_requests(forecast, settings):
        return 0.0 if _finite(forecast.upper_requests_per_s) else None
    terms = _over_capacity(forecast.planned_tokens_per_s, forecast.planned_requests_per_s, capacity)
    # Requests are expected within the lead time: at least one replica must
    # be there for them, capacity known or not (this is what wakes a fleet at zero).
    return max([1.0, *terms])


def _clamp(x: int, settings: ScalerSettings) -> int:
    return min(settings.max_replicas, max(settings.min_replicas, x))


def _without_fresh_data(
    now: float,
    replicas: int,
    reason: Reason,
    *,
    data_age_s: float | None = None,
    no_data_since_s: float | None = None,
) -> Decision:
    """A decision made without fresh data: it recommends what it answers."""
    return Decision(
        now,
        replicas,
        reason,
        {"recommendation": float(replicas)},
        data_stale=True,
        data_age_s=data_age_s,
        no_data_since_s=no_data_since_s,
    )


def _never_observed(settings: ScalerSettings, history: Sequence[Decision], now: float) -> Decision:
    """Nothing was ever read for this object: ``no_data`` (the service answers
    UNAVAILABLE, so KEDA keeps the current count) until ``fallbackAfterSeconds``
    have passed since the first such answer, then the user's
    ``fallbackReplicas`` if set."""
    prior = history[-1] if history else None
    if prior is None:
        since = now
    else:
        since = prior.time_s if prior.no_data_since_s is None else prior.no_data_since_s
    fallback = settings.fallback_replicas
    if fallback is not None and past_fallback(now - since, settings):
        replicas, reason = _clamp(fallback, settings), Reason.FALLBACK
    else:
        replicas, reason = _clamp(fallback if fallback is not None else 0, settings), Reason.NO_DATA
    return _without_fresh_data(now, replicas, reason, no_data_since_s=since)


def _stale_decision(
    obs: Observation | None,
    settings: ScalerSettings,
    history: Sequence[Decision],
    now: float,
) -> Decision:
    age = data_age(obs, history, now)
    # A history of nothing but ``no_data`` answers holds nothing: those
    # replicas were never an observation (holding them would turn "never
    # read" into minReplicas at the second refresh).
    last = history[-1] if history and history[-1].reason != Reason.NO_DATA else None
    if last is not None:
        held = last.replicas
    elif obs is not None and obs.ready_replicas >= 0:
        held = obs.ready_replicas
    else:
        held = -1  # nothing known at all
    if held < 0:
        return _never_observed(settings, history, now)
    if past_fallback(age, settings):
        fallback = settings.fallback_replicas
        replicas = _clamp(held if fallback is None else fallback, settings)
        reason = Reason.FALLBACK
    else:
        replicas, reason = _clamp(held, settings), Reason.STALE_HOLD
    return _without_fresh_data(
        now, replicas, reason, data_age_s=age if math.isfinite(age) else None
    )


def decide(
    obs: Observation | None,
    forecast: DemandForecast | None,
    settings: ScalerSettings,
    history: Sequence[Decision],
    capacity: ReplicaCapacity,
    *,
    now: float | None = None,
    lead_s: float | None = None,
) -> Decision:
    """The replica count for ``obs.time_s`` (or ``now`` when ``obs`` is None).

    ``history`` is earlier decisions for the same ScaledObject, oldest
    first; only the last ``scale_down_stabilization_seconds`` and the last
    ``lead_s`` of it matter, plus the last fresh one (for staleness), so
    callers may trim it. ``lead_s`` is how long a replica takes to be ready
    (None: replicas starting are not counted).
    """
    if obs is not None:
        t = obs.time_s if now is None else now
    elif now is not None:
        t = now
    else:
        t = history[-1].time_s if history else 0.0
    if not is_fresh(obs, settings):
        return _stale_decision(obs, settings, history, t)
    assert obs is not None

    proposals: dict[str, float] = {}
    missing = False
    ready = max(0, obs.ready_replicas)
    held_queue: Reason | None = None
    if _finite(obs.waiting):
        queue = _ceil(max(0.0, obs.waiting) / settings.target_waiting_per_replica)
        hold = (  # an empty queue has nothing to hold: no pass over the history
            queue_hold(history, ready, obs.waiting, t, lead_s)
            if queue > 0 and lead_s is not None and settings.count_starting_replicas
            else None
        )
        if hold is not None and queue > hold[0]:
            queue, held_queue = hold
        proposals["queue"] = float(queue)
    else:
        missing = True
    if _finite(obs.kv_usage):
        kv = min(max(0.0, obs.kv_usage), 1.0)
        proposals["kv_cache"] = float(_ceil(ready * kv / settings.target_kv_cache_usage))
    elif ready > 0:
        missing = True  # with no replica there is no KV cache to miss
    load = _load_term(obs, capacity)
    if load is not None:
        proposals["load"] = float(_ceil(load))
    elif _positive(capacity.tokens_per_s) or _positive(capacity.requests_per_s):
        missing = True  # capacity known but the rate it needs is not
    if ready == 0 and _positive(obs.gateway_rate_rps):
        proposals["wake"] = 1.0
    predictive = _forecast_term(forecast, settings, capacity)
    if predictive is not None:
        proposals["forecast"] = float(_ceil(predictive))

    live = [proposals[k] for k in ("queue", "kv_cache", "load", "wake") if k in proposals]
    reactive = max(live, default=0.0)
    proposals["reactive"] = reactive
    raw = int(max(reactive, proposals.get("forecast", 0.0)))
    # Live terms first on ties: the forecast is named only when it adds.
    reason = Reason.IDLE if raw == 0 else next(r for r in _TERMS if proposals.get(r) == raw)
    if held_queue is not None and reason is Reason.QUEUE:
        reason = held_queue
    clamped = _clamp(raw, settings)
    if clamped > raw:
        reason = Reason.MIN_REPLICAS
    elif clamped < raw:
        reason = Reason.MAX_REPLICAS
    proposals["recommendation"] = float(clamped)

    window = settings.scale_down_stabilization_seconds
    replicas = clamped
    for d in reversed(history):
        if t - d.time_s >= window:
            break
        if d.time_s > t:
            continue
        prior = int(d.proposals.get("recommendation", d.replicas))
        if prior > replicas:
            replicas = prior
    replicas = min(replicas, settings.max_replicas)
    if replicas > clamped:
        reason = Reason.SCALE_DOWN_HOLD
    if missing and history and history[-1].replicas > replicas:
        replicas, reason = history[-1].replicas, Reason.PARTIAL_HOLD
    return Decision(
        t,
        _clamp(replicas, settings),
        reason,
        proposals,
        data_stale=False,
        ready_replicas=ready,
        waiting=obs.waiting if _finite(obs.waiting) else NAN,  # one NaN: decisions compare equal
    )
