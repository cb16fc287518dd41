"""The scaler's own Prometheus metrics (names and labels: docs/contracts.md).

Every per-object series carries ``namespace`` and ``scaledobject``;
``prescaler_source_up`` and the gRPC latency histogram do not. A custom
collector (not prometheus_client's Gauge/Counter objects) keeps the
exposition exact (no ``_created`` series), makes :meth:`forget` trivial when
a ScaledObject disappears, and never touches the global registry unless
asked. ``decision.forecast_ledger.ForecastLedger`` is re-exported here.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import math
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from decision.forecast_ledger import ForecastLedger, SettledForecast
from decision.policy import Decision

__all__ = [
    "CONTENT_TYPE",
    "RPC_BUCKETS",
    "ForecastLedger",
    "MetricsServer",
    "ScalerTelemetry",
    "SettledForecast",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PARTS = ("all", "loop", "rpc")
"""What a :class:`ScalerTelemetry` exposes: everything, the live loop's
series (the decider process), or the gRPC latency only (the serving process,
which appends the decider's part through :meth:`ScalerTelemetry.add_exposition`)."""
Exposition = Callable[[], Awaitable[bytes]]
# RPCs answer from memory: most land well under a millisecond.
RPC_BUCKETS: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    1.0,
)


@functools.lru_cache(maxsize=1024)
def _fmt(x: float) -> str:
    """Label text for a number: ``0.9``, ``300`` (no trailing ``.0``).

    Cached: the same few quantiles and horizons are formatted for every
    object at every refresh.
    """
    return repr(int(x)) if float(x).is_integer() else repr(float(x))


class _Histogram:
    __slots__ = ("counts", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(RPC_BUCKETS) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(RPC_BUCKETS, value)] += 1
        self.sum += value


@dataclass(frozen=True)
class _Snapshot:
    """Point-in-time copies of :class:`ScalerTelemetry`'s stores."""

    desired: dict[tuple[str, str], float]
    ready: dict[tuple[str, str], float]
    demand: dict[tuple[str, str, str], float]
    forecast: dict[tuple[str, str, str, str, str], float]
    ape: dict[tuple[str, str, str, str], float]
    coverage: dict[tuple[str, str, str, str], float]
    lead: dict[tuple[str, str], float]
    decisions: dict[tuple[str, str, str], int]
    source_up: dict[str, float]
    rpc: dict[str, tuple[list[int], float]]


class ScalerTelemetry(Collector):
    """Holds the scaler's metric values; thread-safe; renders exposition text.

    ``part`` (:data:`PARTS`) says which series it exposes, so that the two
    processes of ``prescaler serve`` each render their own and one endpoint
    serves both without a family twice.
    """

    def __init__(self, registry: CollectorRegistry | None = None, *, part: str = "all") -> None:
        if part not in PARTS:
            raise ValueError(f"part must be one of {PARTS}, got {part!r}")
        self.part = part
        self.expositions: list[Exposition] = []
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=False)
        self._lock = threading.Lock()
        self._desired: dict[tuple[str, str], float] = {}
        self._ready: dict[tuple[str, str], float] = {}
        self._demand: dict[tuple[str, str, str], float] = {}
        self._forecast: dict[tuple[str, str, str, str, str], float] = {}
        self._ape: dict[tuple[str, str, str, str], float] = {}
        self._coverage: dict[tuple[str, str, str, str], float] = {}
        self._lead: dict[tuple[str, str], float] = {}
        self._decisions: dict[tuple[str, str, str], int] = {}
        self._source_up: dict[str, float] = {}
        self._rpc: dict[str, _Histogram] = {}
        cls = type(self)
        self._overridden = any(
            getattr(cls, m) is not getattr(ScalerTelemetry, m)
            for m in ("record_decision", "record_lead_time", "record_demand", "record_forecast")
        )
        self.registry.register(self)

    # -- recording -----------------------------------------------------------
    def record_decision(
        self, namespace: str, name: str, decision: Decision, ready_replicas: int
    ) -> None:
        with self._lock:
            self._desired[(namespace, name)] = float(decision.replicas)
            self._ready[(namespace, name)] = float(ready_replicas)
            key = (namespace, name, decision.reason)
            self._decisions[key] = self._decisions.get(key, 0) + 1

    def record_refresh(
        self,
        namespace: str,
        name: str,
        decision: Decision,
        ready_replicas: int,
        lead_time_s: float,
        demand: Iterable[tuple[str, float]] = (),
        forecasts: Iterable[tuple[str, float, float, float]] = (),
    ) -> None:
        """One object's refresh in one go: the same as ``record_decision``,
        ``record_lead_time``, ``record_demand`` for each ``(signal, value)``
        and ``record_forecast`` for each ``(signal, quantile, horizon_s,
        value)``, under ONE lock acquisition (1,000 objects a refresh). A
        subclass overriding any of those (to watch them) gets them called one
        by one."""
        if self._overridden:
            self.record_decision(namespace, name, decision, ready_replicas)
            self.record_lead_time(namespace, name, lead_time_s)
            for signal, value in demand:
                self.record_demand(namespace, name, signal, value)
            for signal, q, h, v in forecasts:
                self.record_forecast(namespace, name, signal, q, h, v)
            return
        obj = (namespace, name)
        fc = [
            ((namespace, name, signal, _fmt(q), _fmt(h)), float(v)) for signal, q, h, v in forecasts
        ]
        with self._lock:
            self._desired[obj] = float(decision.replicas)
            self._ready[obj] = float(ready_replicas)
            key = (namespace, name, decision.reason)
            self._decisions[key] = self._decisions.get(key, 0) + 1
            self._lead[obj] = float(lead_time_s)
            for signal, value in demand:
                self._demand[(namespace, name, signal)] = float(value)
            for fkey, fvalue in fc:
                self._forecast[fkey] = fvalue

    def record_demand(self, namespace: str, name: str, signal: str, value: float) -> None:
        with self._lock:
            self._demand[(namespace, name, signal)] = float(value)

    def record_forecast(
        self,
        namespace: str,
        name: str,
        signal: str,
        quantile: float,
        horizon_s: float,
        value: float,
    ) -> None:
        with self._lock:
            self._forecast[(namespace, name, signal, _fmt(quantile), _fmt(horizon_s))] = float(
                value
            )

    def record_forecast_error(
        self, namespace: str, name: str, signal: str, horizon_s: float, abs_pct_error: float
    ) -> None:
        with self._lock:
            self._ape[(namespace, name, signal, _fmt(horizon_s))] = float(abs_pct_error)

    def record_coverage(
        self, namespace: str, name: str, signal: str, quantile: float, covered_fraction: float
    ) -> None:
        with self._lock:
            self._coverage[(namespace, name, signal, _fmt(quantile))] = float(covered_fraction)

    def record_lead_time(self, namespace: str, name: str, seconds: float) -> None:
        with self._lock:
            self._lead[(namespace, name)] = float(seconds)

    def set_source_up(self, source: str, up: bool) -> None:
        with self._lock:
            self._source_up[source] = 1.0 if up else 0.0

    def observe_rpc(self, method: str, seconds: float) -> None:
        with self._lock:
            hist = self._rpc.get(method)
            if hist is None:
                hist = self._rpc[method] = _Histogram()
            hist.observe(seconds)

    def forget(self, namespace: str, name: str) -> None:
        """Drop every series of one ScaledObject (it was deleted)."""
        obj = (namespace, name)
        with self._lock:
            for store in (self._desired, self._ready, self._lead):
                store.pop(obj, None)
            multis: tuple[dict[Any, Any], ...] = (
                self._demand,
                self._forecast,
                self._ape,
                self._coverage,
                self._decisions,
            )
            for multi in multis:
                for key in [k for k in multi if k[:2] == obj]:
                    del multi[key]

    # -- exposition ----------------------------------------------------------
    def describe(self) -> Iterable[Metric]:
        return []

    def _snapshot(self) -> _Snapshot:
        """Copies of every store, taken under the lock.

        Rendering 1,000 objects takes ~0.1 s; doing it on copies keeps the
        lock (which the gRPC handlers take in :meth:`observe_rpc`) held only
        for the copy, so a scrape rendering in a worker thread never stalls
        the event loop.
        """
        with self._lock:
            return _Snapshot(
                desired=dict(self._desired),
                ready=dict(self._ready),
                demand=dict(self._demand),
                forecast=dict(self._forecast),
                ape=dict(self._ape),
                coverage=dict(self._coverage),
                lead=dict(self._lead),
                decisions=dict(self._decisions),
                source_up=dict(self._source_up),
                rpc={m: (list(h.counts), h.sum) for m, h in self._rpc.items()},
            )

    def add_exposition(self, source: Exposition) -> None:
        """Text that ``/metrics`` serves before this registry's own (another
        process's series: the decider's, ``scaler.decider_process``)."""
        self.expositions.append(source)

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        if self.part != "rpc":
            yield from self._loop_families(snap)
        if self.part != "loop":
            yield self._rpc_family(snap)

    def _loop_families(self, snap: _Snapshot) -> Iterator[Metric]:
        obj = ["namespace", "scaledobject"]
        yield _gauge(
            "prescaler_desired_replicas",
            "Replica count the scaler answers (GetMetrics value).",
            obj,
            snap.desired,
        )
        yield _gauge("prescaler_ready_replicas", "Ready vLLM replicas observed.", obj, snap.ready)
        yield _gauge("prescaler_demand", "Live demand by signal.", [*obj, "signal"], snap.demand)
        yield _gauge(
            "prescaler_forecast",
            "Forecast demand in use, by quantile and horizon.",
            [*obj, "signal", "quantile", "horizon_seconds"],
            snap.forecast,
        )
        yield _gauge(
            "prescaler_forecast_abs_percentage_error",
            "Rolling mean absolute percentage error of matured forecasts (fraction).",
            [*obj, "signal", "horizon_seconds"],
            snap.ape,
        )
        yield _gauge(
            "prescaler_forecast_coverage",
            "Fraction of matured actuals at or below the forecast quantile.",
            [*obj, "signal", "quantile"],
            snap.coverage,
        )
        yield _gauge(
            "prescaler_lead_time_seconds",
            "Lead time the forecast looks ahead (node + pod start + model load).",
            obj,
            snap.lead,
        )
        counter = CounterMetricFamily(
            "prescaler_decisions", "Decisions made, by reason.", labels=[*obj, "reason"]
        )
        for key, count in sorted(snap.decisions.items()):
            counter.add_metric(list(key), count)
        yield counter
        yield _gauge(
            "prescaler_source_up",
            "1 when the last read of a data source succeeded.",
            ["source"],
            {(k,): v for k, v in snap.source_up.items()},
        )

    def _rpc_family(self, snap: _Snapshot) -> Metric:
        hist = HistogramMetricFamily(
            "prescaler_grpc_request_duration_seconds",
            "Latency of the scaler's gRPC handlers.",
            labels=["method"],
        )
        for method, (counts, total) in sorted(snap.rpc.items()):
            cumulative, buckets = 0, []
            for bound, count in zip((*RPC_BUCKETS, math.inf), counts, strict=True):
                cumulative += count
                buckets.append((floatToGoString(bound), cumulative))
            hist.add_metric([method], buckets, total)
        return hist

    def render(self) -> bytes:
        """Prometheus text exposition (format 0.0.4) of this registry.

        Safe to call from any thread (the HTTP endpoint calls it in a worker
        thread); the stores are locked only while they are copied.
        """
        return generate_latest(self.registry)

    async def serve(self, host: str, port: int) -> MetricsServer:
        """Start an HTTP ``/metrics`` endpoint on the running loop."""
        server = MetricsServer(self, host, port)
        await server.start()
        return server


def _gauge(name: str, doc: str, labels: list[str], values: dict) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for key, value in sorted(values.items()):
        family.add_metric(list(key), value)
    return family


class MetricsServer:
    """aiohttp ``GET /metrics`` (and ``/healthz``) for ``--metrics-port``."""

    def __init__(self, telemetry: ScalerTelemetry, host: str, port: int) -> None:
        self._telemetry = telemetry
        self._host = host
        self._port = port
        self._runner: object | None = None
        self.port: int = port

    async def start(self) -> None:
        from aiohttp import web

        async def metrics(_request: web.Request) -> web.Response:
            # Off the event loop: a large exposition takes ~0.1 s to render,
            # which would otherwise stall every gRPC handler sharing the loop.
            parts = [await source() for source in self._telemetry.expositions]
            body = b"".join(parts) + await asyncio.to_thread(self._telemetry.render)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})

        async def healthz(_request: web.Request) -> web.Response:
            return web.Response(text="ok")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/healthz", healthz)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port)
        await site.start()
        self._runner = runner
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        runner = self._runner
        self._runner = None
        if runner is not None:
            await runner.cleanup()  # type: ignore[attr-defined]
