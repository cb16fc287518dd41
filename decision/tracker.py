"""One ScaledObject's path from a reading to a Decision (pure: no I/O, no clock).

The live scaler and the simulator call the same :meth:`Tracker.step`, so what
is tuned offline is what runs in production. It keeps the demand series in
forecast bins, learned per-replica capacity, the decision history the policy
reads, the forecaster and its latest prediction, and a forecast accuracy ledger.
"""

from __future__ import annotations

import functools
import logging
import math
import zlib
from collections import deque
from typing import Any, NamedTuple, overload

import numpy as np

from decision.answer import Reason
from decision.capacity import capacity_for
from decision.forecast_ledger import ForecastLedger
from decision.history import BinnedSeries, SaturationCapacity, lead_time_from_samples
from decision.policy import (
    Decision,
    DemandForecast,
    Observation,
    ReplicaCapacity,
    burst_started,
    decide,
)
from decision.policy import is_active as policy_is_active
from decision.prediction import (
    ForecasterBackend,
    ForecasterFactory,
    Prediction,
    PredictRequest,
    run_prediction,
)
from decision.queue_hold import STARTING_PATIENCE
from decision.reading import Reading, known_rate
from decision.seasonal import SeasonalReader, reach_bins
from decision.settings import ScalerSettings
from decision.tracker_data import MIN_FIT_BINS, TrackerConfig, TrackerStep

__all__ = [
    "DEFAULT_LEAD_TIME_S",
    "SEASONAL_SIGNAL",
    "SIGNAL",
    "Tracker",
    "observation_from",
    "warming_decision",
]

log = logging.getLogger(__name__)

DEFAULT_LEAD_TIME_S = 150.0
"""Lead time when ``leadTimeSeconds: auto`` has nothing measured and no
profile: the optimised cold start of an 8B model on a new GPU node
(engine.profiles: node 60 s + image 30 s + load 60 s)."""

SIGNAL = "requests_per_s"
"""The forecast signal (and the accuracy ledger's key for it)."""

SEASONAL_SIGNAL = "seasonal_peak_requests_per_s"
"""The recent days' peak over the lead time, exported beside the forecast."""

LEAD_SAMPLES = 256
"""Measured pod starts kept for ``leadTimeSeconds: auto``."""


def _in_process(method: str) -> ForecasterBackend:
    from forecasting import make_forecaster

    return make_forecaster(method)


class _Taken(NamedTuple):
    """A reading taken into the history, waiting for its decision."""

    t: float
    observation: Observation | None
    lead_s: float
    settled: bool  # the accuracy ledger settled forecasts


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def observation_from(reading: Reading, now_s: float) -> Observation:
    """The policy's view of one reading (unknowns become NaN)."""
    return Observation(
        time_s=reading.time_s,
        ready_replicas=reading.ready_replicas,
        waiting=reading.waiting,
        running=reading.running,
        kv_usage=_nan(reading.kv_usage),
        arrival_rate_rps=_nan(reading.arrival_rate_rps),
        prompt_tokens_per_s=_nan(reading.prompt_tokens_per_s),
        generation_tokens_per_s=_nan(reading.generation_tokens_per_s),
        preemptions_per_s=_nan(reading.preemptions_per_s),
        data_age_s=max(0.0, now_s - reading.time_s),
        gateway_rate_rps=_nan(known_rate(reading.gateway_rate_rps)),
    )


def _tokens(reading: Reading) -> float:
    parts = [reading.prompt_tokens_per_s, reading.generation_tokens_per_s]
    known = [p for p in parts if p is not None]
    return sum(known) if known else math.nan


@functools.lru_cache(maxsize=256)
def _profile_lead_time(profile: str) -> float | None:
    """A profile's cold-start time (None when it cannot be resolved); profiles
    are static, so resolve each once, not every refresh."""
    try:
        from engine.profiles import get_profile

        return float(get_profile(profile).startup.total_s)
    except (ImportError, KeyError, ValueError, AttributeError):
        return None


def warming_decision(settings: ScalerSettings, time_s: float) -> Decision:
    """The answer before any data: ``fallbackReplicas`` if set, else at least
    one replica (a restart must not scale a serving fleet to zero)."""
    if settings.fallback_replicas is not None:
        replicas = settings.fallback_replicas
    else:
        replicas = max(settings.min_replicas, 1 if settings.max_replicas >= 1 else 0)
    return Decision(
        time_s=time_s, replicas=replicas, reason=Reason.WARMING_UP, proposals={}, data_stale=True
    )


def _trim(decisions: deque[Decision], now_s: float, window_s: float) -> None:
    """Drop decisions older than the window the policy reads (the stabilization
    window or the lead time, the longer), but keep the last
    one made on fresh data: the policy measures staleness from it."""
    last_fresh = next((d for d in reversed(decisions) if not d.data_stale), None)
    while len(decisions) > 1 and now_s - decisions[0].time_s > window_s:
        if decisions[0] is last_fresh:
            if len(decisions) > 2 and now_s - decisions[1].time_s > window_s:
                del decisions[1]
                continue
            break
        decisions.popleft()


# ------------------------------------------------------------------- tracker
class Tracker:
    """Everything kept about one ScaledObject, and the step that decides it.

    ``key`` is (namespace, name): it staggers the refit boundaries (a hash,
    so 1,000 objects do not refit in the same refresh) and names the object
    in warnings. ``forecasters`` makes a forecaster for a method name (default:
    ``forecasting.make_forecaster``, in process). ``initial`` is the answer
    before the first step (default: :func:`warming_decision` at time 0) and
    ``active`` the IsActive before it (default: ``minReplicas > 0``).
    """

    def __init__(
        self,
        key: tuple[str, str],
        settings: ScalerSettings,
        config: TrackerConfig,
        forecasters: ForecasterFactory | None = None,
        *,
        initial: Decision | None = None,
        active: bool | None = None,
    ) -> None:
        self.key = key
        self.config = config
        self._settings = settings
        self._forecasters: ForecasterFactory = forecasters or _in_process
        step, refit = config.step_s, config.refit_interval_s
        self._step_s = step
        self._fit_bins = config.fit_bins
        # the fit window, the scale-in window, and how far before the oldest
        # day the days' peak reads
        wander_bins, size_bins = reach_bins(settings, step)
        history_bins = (
            self._fit_bins
            + math.ceil((refit + settings.scale_down_stabilization_seconds) / step)
            + wander_bins
            + size_bins
            + 2
        )
        self.series = BinnedSeries(step, history_bins)
        self._seasonal_reader = SeasonalReader(self.series, size_bins, f"{key[0]}/{key[1]}")
        self._seasonal_reader.warn_days(settings)
        self.capacity_learner = SaturationCapacity(
            config.capacity_window_s, memory_s=config.fit_window_s
        )
        offset = (zlib.crc32(f"{key[0]}/{key[1]}".encode()) % 10_000) / 10_000
        self.offset_s = math.floor(offset * refit / step) * step
        self.decision: Decision = (
            initial if initial is not None else warming_decision(settings, 0.0)
        )
        self.active: bool = active if active is not None else settings.min_replicas > 0
        self.forecast: DemandForecast | None = None
        self._decisions: deque[Decision] = deque()
        self._last_fresh_obs: Observation | None = None
        self._vanished_since_s: float | None = None
        self._last_time_s: float | None = None
        self._forecaster: ForecasterBackend | None = None
        self._forecaster_method: str | None = None
        self._fit_boundary_s: float | None = None
        self._prediction: Prediction | None = None
        self._predicted_bin: float | None = None
        self._lead_samples: deque[float] = deque(maxlen=LEAD_SAMPLES)
        self._ledger = ForecastLedger(max_pending=512)
        # Caches of things that change only with the settings or new samples.
        self._configured_capacity: tuple[ScalerSettings, ReplicaCapacity] | None = None
        self._measured_lead: tuple[tuple[float, ...], float | None] | None = None

    # ------------------------------------------------------------ read-only
    @property
    def settings(self) -> ScalerSettings:
        return self._settings

    @property
    def decisions(self) -> tuple[Decision, ...]:
        """The decision history the policy sees (oldest first, trimmed)."""
        return tuple(self._decisions)

    @property
    def last_time_s(self) -> float | None:
        """Grid time of the latest step (or the end of loaded history)."""
        return self._last_time_s

    @property
    def last_fresh_observation(self) -> Observation | None:
        return self._last_fresh_obs

    @property
    def prediction(self) -> Prediction | None:
        return self._prediction

    @property
    def fitted(self) -> bool:
        """Fitted and predicting: decisions use a forecast."""
        return self._fit_boundary_s is not None and self._prediction is not None

    @property
    def ledger(self) -> ForecastLedger:
        """Forecast accuracy so far (for telemetry; do not add to it)."""
        return self._ledger

    # -------------------------------------------------------------- changes
    def update_settings(self, settings: ScalerSettings) -> None:
        """New settings for the same data: a new forecast method refits from
        scratch; everything else takes effect at the next step."""
        if settings.forecast != self._settings.forecast:
            self._forecaster = None
            self._fit_boundary_s = None
            self._prediction = None
        self._seasonal_reader.warn_changes(self._settings, settings)
        self._settings = settings

    def load_history(
        self,
        times: np.ndarray,
        requests_per_s: np.ndarray,
        tokens_per_s: np.ndarray,
        ready: np.ndarray,
        waiting: np.ndarray,
        completions_per_s: np.ndarray,
    ) -> None:
        """Fill an empty tracker from history sampled at the bin ends (backfill)."""
        if len(times) == 0:
            return
        self.series.load(times, requests_per_s, tokens_per_s)
        self.capacity_learner.load(
            times,
            ready,
            waiting,
            completions_per_s,
            tokens_per_s,
            self._settings.target_waiting_per_replica,
            until_s=float(times[-1]),
        )
        self._last_time_s = float(times[-1])

    # ---------------------------------------------------------------- a step
    @overload
    def step(self, t: float, reading: Reading | None, now_s: float) -> TrackerStep: ...

    @overload
    def step(
        self, t: float, reading: Reading | None, now_s: float, *, decide: bool
    ) -> TrackerStep | None: ...

    def step(
        self, t: float, reading: Reading | None, now_s: float, *, decide: bool = True
    ) -> TrackerStep | None:
        """The decision at grid time ``t`` from ``reading`` (None: the source
        failed) evaluated at ``now_s``; ``t`` must be later than the last step's.
        ``decide`` False (replayed history too old to matter) only feeds the
        history and returns None."""
        if self._last_time_s is not None and t <= self._last_time_s:
            raise ValueError(f"t={t} is not after the last step at {self._last_time_s}")
        taken = self._take(t, reading, now_s)
        if self._settings.forecast == "off":
            self._prediction = None
        elif decide:
            last_bin = self.series.last_end
            if last_bin is not None and self._predicted_bin != last_bin:
                request = self._predict_request(last_bin, taken.lead_s)
                if request is not None:
                    self._keep_prediction(request, run_prediction(request))
        self.forecast = self.demand_forecast(t, taken.lead_s)
        return self._decide(taken) if decide else None

    def _take(self, t: float, reading: Reading | None, now_s: float) -> _Taken:
        """Take one reading into the history."""
        settings = self._settings
        self._last_time_s = t
        obs = observation_from(reading, now_s) if reading is not None else None
        obs = self._unless_vanished(t, obs)
        lead = self.lead_time()
        settled = False
        if reading is not None:
            if reading.lead_time_samples_s:
                # creation -> Ready of the pods Ready now: the recent starts
                self._lead_samples = deque(reading.lead_time_samples_s, maxlen=LEAD_SAMPLES)
            tokens = _tokens(reading)
            # The gateway's rate when known: it holds the demand a fleet at
            # zero (or one still starting) never sees, so the forecast learns it.
            gateway = known_rate(reading.gateway_rate_rps)
            arrival = _nan(reading.arrival_rate_rps if gateway is None else gateway)
            if (
                gateway is None
                and reading.ready_replicas == 0
                and self._settings.gateway_rate_query
            ):
                # An empty fleet's zero says nothing of the gateway: a gap, not
                # a zero for the forecast to learn.
                arrival = math.nan
            if abs(self.series.bin_end(t) - t) < 1e-6:
                # the same samples a backfill sees (history at the bin step)
                self.capacity_learner.add(
                    t,
                    reading.ready_replicas,
                    reading.waiting,
                    _nan(reading.completion_rate_rps),
                    tokens,
                    settings.target_waiting_per_replica,
                )
            for b in self.series.add(t, arrival, tokens):
                if self._ledger.settle(SIGNAL, b.end_s, b.requests_per_s):
                    settled = True
        return _Taken(t, obs, lead, settled)

    def _keep_prediction(self, request: PredictRequest, result: Any) -> None:
        """Keep a forecast (and book it in the accuracy ledger), or drop the
        prediction and refit next bin if it failed (``result`` an exception)."""
        q, step = request.quantile, self._step_s
        try:
            if isinstance(result, BaseException):
                raise result
            upper = np.asarray(result.quantile(q), dtype=float)
            median = np.asarray(result.quantile(0.5), dtype=float)
        except Exception as exc:
            log.warning("forecast for %s/%s failed: %s", *self.key, exc)
            self._prediction = None
            self._fit_boundary_s = None
            return
        if request.fit_y is not None:
            self._fit_boundary_s = request.boundary
        origin_s, lead_s = request.origin_s, request.lead_s
        self._prediction = Prediction(origin_s, step, q, upper, median)
        # The bin ending at origin + lead (index h-1 covers (origin+(h-1)s, origin+h s]).
        h = max(1, math.ceil(lead_s / step))
        if h <= upper.size:
            self._ledger.add(
                SIGNAL, h * step, q, origin_s, float(median[h - 1]), float(upper[h - 1])
            )
        self._ledger.add(SIGNAL, step, q, origin_s, float(median[0]), float(upper[0]))

    def _decide(self, taken: _Taken) -> TrackerStep:
        """Decide at ``taken.t`` from its observation and the latest forecast."""
        settings, t, obs, lead = self._settings, taken.t, taken.observation, taken.lead_s
        forecast = self.forecast
        capacity = self.capacity(t)
        decision = decide(obs, forecast, settings, self._decisions, capacity, now=t, lead_s=lead)
        self._decisions.append(decision)
        _trim(
            self._decisions,
            t,
            max(settings.scale_down_stabilization_seconds, STARTING_PATIENCE * lead)
            + self.config.refresh_interval_s,
        )
        previous_active = self.active
        self.active = policy_is_active(obs, forecast, settings, previous=previous_active)
        burst = False
        if obs is not None and policy_is_active(obs, forecast, settings):
            burst = burst_started(self._last_fresh_obs, obs) or (
                self.active and not previous_active
            )
        if obs is not None:
            self._last_fresh_obs = obs
        self.decision = decision
        return TrackerStep(
            decision, forecast, self.active, burst, lead, capacity, obs, taken.settled
        )

    # -------------------------------------------------------------- pieces
    def lead_time(self) -> float:
        """``leadTimeSeconds``; for ``auto`` a high quantile of measured pod
        starts, else the profile's cold start, else ``DEFAULT_LEAD_TIME_S``."""
        settings = self._settings
        if settings.lead_time_seconds is not None:
            return float(settings.lead_time_seconds)
        samples = tuple(self._lead_samples)
        cached = self._measured_lead
        if cached is not None and cached[0] == samples:
            measured = cached[1]
        else:
            measured = lead_time_from_samples(samples)
            self._measured_lead = (samples, measured)
        if measured is not None:
            return measured
        if settings.profile:
            profile_lead = _profile_lead_time(settings.profile)
            if profile_lead is not None:
                return profile_lead
        return DEFAULT_LEAD_TIME_S

    def capacity(self, now_s: float) -> ReplicaCapacity:
        """Profile or ``capacityTokensPerSecond`` (decision.capacity), else learned.

        Token capacity alone is turned into requests/s with the observed
        tokens per request, so the request-rate forecast can use it too.
        """
        cached = self._configured_capacity
        if cached is not None and cached[0] is self._settings:
            configured = cached[1]
        else:
            configured = capacity_for(self._settings, self.config.speed)
            self._configured_capacity = (self._settings, configured)
        learned_r, learned_t = self.capacity_learner.estimate(now_s)
        requests = configured.requests_per_s
        tokens = configured.tokens_per_s
        if requests is None and tokens is not None:
            per_request = self.series.tokens_per_request(self._fit_bins)
            requests = tokens / per_request if per_request else None
        if requests is None and tokens is None:
            requests, tokens = learned_r, learned_t
        return ReplicaCapacity(requests_per_s=requests, tokens_per_s=tokens)

    def demand_forecast(self, t: float, horizon_s: float) -> DemandForecast | None:
        """Max of the latest prediction over ``[t, t + horizon_s]`` (None
        without one, or when it does not reach ``t``)."""
        p = self._prediction
        if p is None:
            return None
        first = max(0, math.floor((t - p.origin_s) / p.step_s))
        last = max(first, math.ceil((t + horizon_s - p.origin_s) / p.step_s) - 1)
        if first >= p.upper.size:
            return None
        upper = float(np.max(p.upper[first : last + 1]))
        median = float(np.max(p.median[first : last + 1]))
        per_request = self.series.tokens_per_request(self._fit_bins)
        seasonal, seasonal_requests = self._seasonal_reader.peak(
            self._settings, t, horizon_s, p.quantile
        )
        return DemandForecast(
            horizon_s=horizon_s,
            quantile=p.quantile,
            upper_requests_per_s=upper,
            median_requests_per_s=median,
            upper_tokens_per_s=upper * per_request if per_request else None,
            seasonal_requests_per_s=seasonal,
            seasonal_tokens_per_s=(
                seasonal * per_request if seasonal is not None and per_request else None
            ),
            seasonal_requests=seasonal_requests,
        )

    def _unless_vanished(self, t: float, obs: Observation | None) -> Observation | None:
        """An empty fleet right after a serving one is an outage until proven otherwise.

        Prometheus cannot tell "every pod was scaled away" from "the scrape
        job vanished", "every pod crashed" or "a spot reclaim took the nodes":
        all read as zero replicas and zero demand. KEDA only takes a fleet to
        zero after we answered zero, so while we still ask for replicas an
        empty reading is treated as no reading (the policy holds, then falls
        back) for ``fallbackAfterSeconds``; after that it is believed, so a
        fleet really at zero still gets forecast-driven scale-from-zero.
        """
        empty = (
            obs is not None
            and obs.ready_replicas <= 0
            and not (obs.waiting > 0)
            and not (obs.running > 0)
        )
        last = self._last_fresh_obs
        serving = last is not None and last.ready_replicas > 0 and self.decision.replicas > 0
        if not (empty and serving):
            self._vanished_since_s = None
            return obs
        if self._vanished_since_s is None:
            self._vanished_since_s = t
            log.warning(
                "%s/%s: the fleet's series vanished while %d replicas are wanted; holding",
                *self.key,
                self.decision.replicas,
            )
        if t - self._vanished_since_s < self._settings.fallback_after_seconds:
            return None
        return obs

    # ------------------------------------------------------------- forecast
    def _boundary(self, origin_s: float) -> float:
        """The latest refit boundary at or before ``origin_s`` (staggered by ``offset_s``)."""
        refit = self.config.refit_interval_s
        return math.floor(round((origin_s - self.offset_s) / refit, 9)) * refit + self.offset_s

    def _ensure_forecaster(self) -> ForecasterBackend:
        settings = self._settings
        method = "prescaler" if settings.forecast == "auto" else settings.forecast
        if self._forecaster is None or self._forecaster_method != method:
            self._forecaster = self._forecasters(method)
            self._forecaster_method = method
            self._fit_boundary_s = None
        return self._forecaster

    def _predict_request(self, origin_s: float, lead_s: float) -> PredictRequest | None:
        """What to ask the forecaster at bin ``origin_s``: a refit if a
        boundary passed, then the bins up to ``origin_s`` and the horizon."""
        self._predicted_bin = origin_s  # once per bin, even if it fails
        forecaster = self._ensure_forecaster()
        boundary = self._boundary(origin_s)
        fit_y = None
        if self._fit_boundary_s != boundary:
            fit_y = self.series.requests(until_s=boundary, last=self._fit_bins)
            if fit_y.size < MIN_FIT_BINS:
                self._prediction = None
                return None
        y = self.series.requests(until_s=origin_s, last=self._fit_bins)
        settings = self._settings
        horizon_s = max(lead_s, settings.node_lead_time_seconds if settings.prewarm else 0.0)
        steps = math.ceil((horizon_s + self._step_s) / self._step_s) + 1
        return PredictRequest(
            forecaster,
            origin_s,
            lead_s,
            boundary,
            fit_y,
            y,
            steps,
            self._step_s,
            settings.forecast_quantile,
        )
