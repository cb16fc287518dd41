"""Per-ScaledObject state: history, background refresh, forecaster refits.

The gRPC handlers call ``decision``/``is_active`` and get an answer from
memory, in microseconds, whatever Prometheus is doing. All the work happens
in one background task:

- Every ``refresh_interval_s`` (on a grid of wall-clock multiples, evaluated
  ``query_delay_s`` late so every sample up to the grid point has landed),
  each source is read ONCE for all its ScaledObjects (``scaler.sources``).
- The readings are turned into observations, forecast bins, forecasts and
  decisions in a single compute thread (``scaler.refresh``), off the event loop,
  by one ``decision.tracker.Tracker`` per object: the pure path from a
  reading to a decision, which the simulator runs too. This module keeps the
  I/O around it (sources, telemetry, balloons).
- A forecaster is refitted at per-object boundaries every
  ``refit_interval_s`` (staggered by a hash of the object's name so 1,000
  objects do not refit in the same refresh) on the bins up to that boundary;
  in between, each closed bin conditions it (``update``) and predicts again.
- A newly registered object backfills its history with one range query per
  signal and page of 10,000 points (two pages for the 3-day fit window at
  15 s; for all new objects of a Prometheus together; one more per distinct
  ``gatewayRateQuery``, its demand signal) and replays the last
  stabilization window through the very same code. Everything is a function
  of Prometheus data at grid times, so two scaler replicas, or a restarted
  one, give the same answers: the scaler is stateless.

When a source fails the object gets no observation: ``decide`` holds the last
answer (``stale_hold``) and after ``fallbackAfterSeconds`` answers the
fallback; ``prescaler_source_up`` drops to 0, and while an object has no
answer yet its UNAVAILABLE error says what failed (``source_problem``).
Never a scale-down on bad data.

This module is the facade the decider and the CLI use; the work
is done by parts that own their state, a module each: the tracked objects
(``scaler.registry``), the reader of sources and their health
(``scaler.source_reader``), the stepper that takes one object's reading into
its tracker and computes its forecasts (``scaler.stepper``), the sink of
each live step, telemetry and balloons (``scaler.live_outputs``), backfill
and catch-up (``scaler.backfill``), and the loop that drives them
(``scaler.refresh``). ``prescaler serve`` runs it in a child process, the
decider (``scaler.decider``), and answers KEDA from the table it publishes.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from decision.policy import Decision
from decision.settings import ScalerSettings
from decision.tracker import DEFAULT_LEAD_TIME_S
from decision.tracker_data import DEFAULT_FIT_WINDOW_S, TrackerConfig
from scaler.live_outputs import LiveOutputs
from scaler.refresh import RefreshLoop
from scaler.registry import ObjectKey, ObjectRegistry, observation_from
from scaler.source_reader import SourceReader
from scaler.sources import SourceFactory, default_source_factory
from scaler.stepper import Stepper
from scaler.telemetry import ScalerTelemetry

__all__ = ["DEFAULT_LEAD_TIME_S", "ScalerState", "observation_from"]


class ScalerState:
    """Histories, forecasts and decisions of every registered ScaledObject.

    Parameters (seconds unless said):

    - ``refresh_interval_s``: how often every source is read (grid step).
    - ``refit_interval_s``: how often each forecaster is refitted (default
      10 min: between refits each closed bin conditions it through
      ``update``; a refit's CPU grows with the fit window, 6 - 12x from 2 h
      to 3 days: ``docs/decisions/fit-window.md``).
    - ``forecast_step_s``: forecast bin width, a multiple of the refresh
      (default max(15, refresh)): predicting per bin, not per refresh, keeps
      1,000 forecasters affordable.
    - ``fit_window_s``: history a fit sees (default 3 days,
      ``decision.tracker_data.DEFAULT_FIT_WINDOW_S``: the forecaster's daily
      seasonal terms need two full days; its memory and refit cost per
      object: ``docs/decisions/fit-window.md``); backfill reads this plus one
      refit interval and the stabilization window, paged under Prometheus's
      points-per-query limit.
    - ``query_delay_s``: how far behind the grid time reads happen, so every
      sample up to it has landed in Prometheus (identical answers for all
      replicas of the scaler).
    - ``capacity_window_s``: the span of saturated samples (ending at the
      newest) whose median is the learned per-replica capacity; samples are
      kept for the fit window.
    - ``source_factory``: ``SourceSpec -> MetricSource`` (tests inject fakes;
      default: real Prometheus / scrape / Kubernetes sources).
    - ``balloon_controller``: ``scaler.sources.balloon.BalloonController``-like
      (``apply(namespace, deployment, replicas)``), created on first use.
    - ``expire_after_s``: objects no RPC asked about for this long are dropped.
    - ``speed``: model seconds per second of the readings' clock (1 in
      production; the stack runs its replicas ``speed`` times faster, and the
      trackers count a profile's capacity at it: ``TrackerConfig.speed``).

    The parts are attributes: ``objects`` (``ObjectRegistry``), ``sources``
    (``SourceReader``), ``stepper``, ``outputs`` (``LiveOutputs``), ``loop``
    (``RefreshLoop``).
    """

    def __init__(
        self,
        *,
        telemetry: ScalerTelemetry,
        refresh_interval_s: float = 5.0,
        refit_interval_s: float = 600.0,
        clock: Callable[[], float] = time.time,
        source_factory: SourceFactory | None = None,
        forecast_step_s: float | None = None,
        fit_window_s: float = DEFAULT_FIT_WINDOW_S,
        query_delay_s: float = 1.0,
        capacity_window_s: float = 3600.0,
        balloon_controller: Any = None,
        expire_after_s: float = 3600.0,
        speed: float = 1.0,
    ) -> None:
        self.tracker_config = TrackerConfig(
            speed=float(speed),
            refresh_interval_s=float(refresh_interval_s),
            refit_interval_s=float(refit_interval_s),
            forecast_step_s=forecast_step_s,
            fit_window_s=float(fit_window_s),
            capacity_window_s=float(capacity_window_s),
        )
        self.telemetry = telemetry
        self.refresh_interval_s = float(refresh_interval_s)
        self.refit_interval_s = float(refit_interval_s)
        self.forecast_step_s = self.tracker_config.step_s
        self.fit_bins = self.tracker_config.fit_bins
        self.query_delay_s = float(query_delay_s)
        self.capacity_window_s = float(capacity_window_s)
        self.expire_after_s = float(expire_after_s)
        self.outputs = LiveOutputs(telemetry, balloon_controller)
        self.sources = SourceReader(
            source_factory or default_source_factory(), report_up=telemetry.set_source_up
        )
        self.objects = ObjectRegistry(
            self.tracker_config,
            clock=clock,
            on_forget=self._forgotten,
        )
        self.stepper = Stepper(self.outputs, is_current=self.objects.is_current)
        self.loop = RefreshLoop(
            self.objects,
            self.sources,
            self.stepper,
            refresh_interval_s=self.refresh_interval_s,
            query_delay_s=self.query_delay_s,
            forecast_step_s=self.forecast_step_s,
            expire_after_s=self.expire_after_s,
            clock=clock,
        )

    # ------------------------------------------------------------ the RPC side
    def register(self, namespace: str, name: str, settings: ScalerSettings) -> None:
        """Start tracking a ScaledObject (idempotent; new settings replace old)."""
        if self.objects.register(namespace, name, settings):
            self.loop.wake()

    def decision(self, namespace: str, name: str) -> Decision:
        """The latest decision (from memory; never blocks). ``KeyError`` if unknown."""
        return self.objects[(namespace, name)].decision

    def is_active(self, namespace: str, name: str) -> bool:
        return self.objects[(namespace, name)].active

    def source_problem(self, namespace: str, name: str) -> str | None:
        """Why the object's source gave no reading last time, in words (``None``
        if it gave one, or was not read yet). ``KeyError`` if unknown."""
        return self.sources.problem(self.objects[(namespace, name)])

    def registered(self) -> list[ObjectKey]:
        return self.objects.keys()

    def subscribe_active(self, namespace: str, name: str) -> asyncio.Queue[bool]:
        """A queue that receives ``True`` each time a burst starts."""
        return self.objects.subscribe(namespace, name)

    def unsubscribe_active(self, namespace: str, name: str, queue: asyncio.Queue[bool]) -> None:
        self.objects.unsubscribe(namespace, name, queue)

    def forget(self, namespace: str, name: str) -> None:
        """Stop tracking a ScaledObject (deleted) and drop its metrics."""
        self.objects.forget(namespace, name)

    def _forgotten(self, namespace: str, name: str) -> None:
        self.sources.forget((namespace, name))
        self.telemetry.forget(namespace, name)

    # ------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        await self.loop.start()

    async def stop(self) -> None:
        await self.loop.stop()
        await self.sources.close()
        self.outputs.close()

    async def refresh(self, tick: float) -> None:
        """Read every source once at grid time ``tick`` and re-decide everything."""
        await self.loop.refresh(tick)

    # --------------------------------------------------------------- health
    @property
    def refreshes(self) -> int:
        return self.loop.refreshes

    @property
    def refresh_seconds(self) -> deque[float]:
        return self.loop.refresh_seconds

    def status(self) -> dict[str, float]:
        """Loop health for tests and benchmarks."""
        times = list(self.loop.refresh_seconds)
        entries = list(self.objects)
        return {
            "objects": float(len(entries)),
            "objects_ready": float(sum(1 for e in entries if e.ready)),
            # fitted and predicting: the objects whose decisions use a forecast
            "forecasters_fitted": float(sum(1 for e in entries if e.tracker.fitted)),
            "refreshes": float(self.loop.refreshes),
            "refresh_seconds_max": max(times) if times else math.nan,
            "refresh_seconds_mean": (sum(times) / len(times)) if times else math.nan,
        }
