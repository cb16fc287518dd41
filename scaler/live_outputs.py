"""What a live step sends out: the scaler's own metrics and the balloon
Deployment's size.

A sink the stepper calls with each live step's result: exporting never
changes a decision, and the balloon PATCH runs on its own thread so a slow
API server never delays one.
"""

from __future__ import annotations

import concurrent.futures
import logging
import math
from typing import Any

from decision.prewarm import plan_balloons
from decision.tracker import SEASONAL_SIGNAL, SIGNAL
from decision.tracker_data import TrackerStep
from scaler.registry import Entry
from scaler.telemetry import ScalerTelemetry

__all__ = ["LiveOutputs"]

log = logging.getLogger(__name__)


class LiveOutputs:
    """Exports each live step (``telemetry``) and pre-warms nodes (balloons).

    ``balloon_controller`` is a ``scaler.sources.balloon.BalloonController``-like
    object (``apply(namespace, deployment, replicas)``); the real one is made
    on first use, so objects without ``prewarm`` never reach the API server.
    """

    def __init__(self, telemetry: ScalerTelemetry, balloon_controller: Any = None) -> None:
        self.telemetry = telemetry
        self._balloon_controller = balloon_controller
        self._balloon_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="prescaler-balloon"
        )

    # ------------------------------------------------------- the sink's side
    def settled(self, entry: Entry) -> None:
        """A forecast bin settled: export the object's forecast accuracy."""
        ns, name = entry.key
        ledger = entry.tracker.ledger
        for signal, horizon, quantile in ledger.keys():  # noqa: SIM118 (not a dict)
            ape = ledger.mean_ape(signal, horizon)
            if math.isfinite(ape):
                self.telemetry.record_forecast_error(ns, name, signal, horizon, ape)
            coverage = ledger.coverage(signal, quantile)
            if math.isfinite(coverage):
                self.telemetry.record_coverage(ns, name, signal, quantile, coverage)

    def stepped(self, entry: Entry, step: TrackerStep, t: float) -> None:
        """An object was decided at grid time ``t``: export it, then pre-warm."""
        self._export(entry, step)
        self._prewarm(entry, step, t)

    def close(self) -> None:
        """Stop the balloon thread (a pending PATCH is dropped: the next
        scaler's refresh sends it again)."""
        self._balloon_pool.shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------ telemetry
    def _export(self, entry: Entry, step: TrackerStep) -> None:
        ns, name = entry.key
        obs, forecast, lead_s = step.observation, step.forecast, step.lead_s
        last_fresh = entry.tracker.last_fresh_observation
        ready = (
            obs.ready_replicas
            if obs is not None
            else (last_fresh.ready_replicas if last_fresh is not None else 0)
        )
        demand: list[tuple[str, float]] = []
        if obs is not None:
            for signal, value in (
                ("requests_per_s", obs.arrival_rate_rps),
                ("waiting", obs.waiting),
                ("running", obs.running),
                ("kv_cache_usage", obs.kv_usage),
                ("tokens_per_s", obs.prompt_tokens_per_s + obs.generation_tokens_per_s),
                ("preemptions_per_s", obs.preemptions_per_s),
                # gatewayRateQuery's answer: NaN (no series) without the key
                ("gateway_requests_per_s", obs.gateway_rate_rps),
            ):
                if math.isfinite(value):
                    demand.append((signal, value))
        forecasts: list[tuple[str, float, float, float]] = []
        if forecast is not None:
            forecasts.append((SIGNAL, forecast.quantile, lead_s, forecast.upper_requests_per_s))
            forecasts.append((SIGNAL, 0.5, lead_s, forecast.median_requests_per_s))
            seasonal = forecast.seasonal_requests_per_s
            if seasonal is not None and math.isfinite(seasonal):
                # the recent days' peak over the lead time (seasonalPeakDays)
                forecasts.append((SEASONAL_SIGNAL, forecast.quantile, lead_s, seasonal))
        # One lock acquisition per object, not ten.
        self.telemetry.record_refresh(ns, name, step.decision, ready, lead_s, demand, forecasts)

    # -------------------------------------------------------------- balloons
    def _prewarm(self, entry: Entry, step: TrackerStep, t: float) -> None:
        """Node pre-warming: size the balloon Deployment one node lead time ahead.

        The sizing is ``decision.prewarm.plan_balloons`` (pure); the PATCH goes
        through ``scaler.sources.balloon`` on its own thread, so a slow API
        server never delays decisions.
        """
        settings = entry.settings
        if not settings.prewarm:
            return
        forecast = entry.tracker.demand_forecast(t, settings.node_lead_time_seconds)
        obs = step.observation
        ready = obs.ready_replicas if obs is not None else 0
        plan = plan_balloons(
            settings=settings,
            forecast=forecast,
            capacity=step.capacity,
            ready_replicas=ready,
            desired_replicas=step.decision.replicas,
            current_balloons=entry.balloons,
        )
        if plan.replicas == entry.balloons and entry.balloons_applied:
            return
        entry.balloons = plan.replicas
        entry.balloons_applied = False
        controller = self._balloons()
        namespace, deployment = entry.key[0], settings.prewarm_deployment

        def apply() -> None:
            try:
                controller.apply(namespace, deployment, plan.replicas)
                entry.balloons_applied = True
            except Exception as exc:  # retried at the next refresh
                log.warning("balloon %s/%s: %s", namespace, deployment, exc)

        self._balloon_pool.submit(apply)

    def _balloons(self) -> Any:
        if self._balloon_controller is None:
            from scaler.sources.balloon import BalloonController
            from scaler.sources.kube import default_api_factory

            self._balloon_controller = BalloonController(default_api_factory().api_client)
        return self._balloon_controller
