"""The live loop's facade: every registered ScaledObject, refreshed in the background.

RPC handlers read ``decision``/``is_active`` from memory, whatever Prometheus
is doing. One background task reads each source once per refresh for all its
objects (on a wall-clock grid, ``query_delay_s`` late) and steps one
``decision.tracker.Tracker`` per object in a compute thread. A new object
backfills its history and replays the stabilization window through the same
steps, so two scaler replicas, or a restarted one, answer alike. A failing
source gives no reading: the policy holds, then falls back, never scales
down on bad data. The parts, a module each: ``scaler.registry``,
``scaler.source_reader``, ``scaler.stepper``, ``scaler.live_outputs``,
``scaler.backfill`` and ``scaler.refresh`` (the loop).
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
from scaler.registry import ObjectRegistry, observation_from
from scaler.source_reader import SourceReader
from scaler.sources import SourceFactory, default_source_factory
from scaler.stepper import Stepper
from scaler.telemetry import ScalerTelemetry

__all__ = ["DEFAULT_LEAD_TIME_S", "ScalerState", "observation_from"]


class ScalerState:
    """Histories, forecasts and decisions of every registered ScaledObject.

    The cadences (seconds) are ``decision.tracker_data.TrackerConfig``'s:
    ``refresh_interval_s`` (the grid step), ``refit_interval_s``,
    ``forecast_step_s``, ``fit_window_s``, ``capacity_window_s``, ``speed``.
    ``query_delay_s``: how far behind the grid time reads happen, so every
    sample has landed (all scaler replicas read the same). ``source_factory``
    builds sources (tests inject fakes); ``balloon_controller`` applies
    balloon counts (created on first use); ``expire_after_s`` drops objects
    no RPC asked about for that long. The parts are attributes: ``objects``,
    ``sources``, ``stepper``, ``outputs``, ``loop``.
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
