"""The local control plane: KEDA, the HPA and Karpenter on the wall clock.

Nothing here re-implements a rule: the cluster, KEDA and the HPA are the
simulator's own (:class:`simulations.cluster.pods.Cluster`,
:class:`simulations.autoscaling.keda.Keda`,
:class:`simulations.autoscaling.hpa.Hpa`) advanced to the trace time now.
What is real is the trigger's value (``prescaler serve`` over gRPC, or a
PromQL query to the real Prometheus) and every Ready pod, a ``prescaler
emulate`` process. Those processes start slowly, so a few idle ones are
kept for pods to take, as a node's pre-pulled image would be; the pod's
start-up time stays the cluster model's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import aiohttp
import grpc
import numpy as np

from engine.profiles import Profile
from simulations.autoscaling.hpa import Hpa
from simulations.autoscaling.keda import Keda
from simulations.autoscaling.scaledobject import ScaledObjectSpec
from simulations.cluster.pods import Cluster, ClusterConfig
from simulations.events import PRIORITY_SCRAPE, EventQueue
from simulations.fleet_ledger import FleetLedger, append_row, fleet_row
from stack.keda_client import KedaScalerClient
from stack.loadgen import Clock
from stack.processes import EmulatorProcess, PrometheusProcess

__all__ = ["HPA_SYNC_S", "ControlPlane", "LiveReplica"]

log = logging.getLogger(__name__)

HPA_SYNC_S = 15.0
"""kube-controller-manager --horizontal-pod-autoscaler-sync-period default."""
TICK_WALL_S = 0.01
"""How often (wall seconds) the cluster's event queue is brought to now."""
SPARES = 2
"""Emulator processes kept started and idle, beyond pods still starting."""


@dataclass(eq=False)
class LiveReplica:
    """A Ready vLLM pod backed by an emulator process (what the router sees)."""

    pod_id: int
    process: EmulatorProcess
    url: str
    outstanding: int = 0
    routable: bool = True


@dataclass
class Counters:
    """Control-plane events a run reports."""

    polls: int = 0
    poll_errors: int = 0
    hpa_syncs: int = 0
    hpa_metric_errors: int = 0
    scale_ups: int = 0
    prometheus_errors: int = 0
    replicas_started: int = 0
    replicas_killed: int = 0
    crashes: int = 0
    timeline: dict[str, list[float]] = field(default_factory=dict)


class ControlPlane:
    """KEDA + HPA + cluster for one ScaledObject, plus the replica processes."""

    def __init__(
        self,
        so: ScaledObjectSpec,
        profile: Profile,
        cluster_config: ClusterConfig,
        *,
        prometheus: PrometheusProcess,
        workdir: Path,
        speed: float,
        seed: int,
        warmup_s: float,
        initial_replicas: int,
        scaler: KedaScalerClient | None = None,
        served_model_name: str | None = None,
        arrived: Callable[[], int] = lambda: 0,
        gateway: Callable[[], int] = lambda: 0,
    ) -> None:
        self.so = so
        self.profile = profile
        self.prometheus = prometheus
        self.workdir = workdir
        self.speed = speed
        self.scaler = scaler
        self.served_model_name = served_model_name
        self.rng = np.random.default_rng(seed)
        self.queue = EventQueue(start_s=-warmup_s)
        self.cluster = Cluster(cluster_config, self.queue, self.rng, self)
        self.keda = Keda(so.keda, created_s=0.0)
        self.hpa = Hpa(so.hpa)
        self.initial_replicas = initial_replicas
        self.warmup_s = warmup_s
        self.counters = Counters()
        self._arrived = arrived
        self._gateway = gateway
        self._spares: list[EmulatorProcess] = []
        self._next_index = 0
        self._replicas: dict[int, LiveReplica] = {}
        self._routable: list[LiveReplica] = []
        self._changed = asyncio.Event()
        self._clock: Clock | None = None
        self._http: aiohttp.ClientSession | None = None
        self._reap: list[EmulatorProcess] = []
        self._not_serving: list[LiveReplica] = []
        self._restarting: list[tuple[float, LiveReplica]] = []
        self.at_start: tuple[float, float] = (0.0, 0.0)
        """(cost, GPU hours) at t=0, after the warm-start pre-roll."""
        self.at_end: tuple[float, float, float] | None = None
        """(Ready replica-seconds, cost, GPU hours) at the trace's end."""
        # what the view and the timeline show
        self.desired: float = math.nan
        self.active: bool | None = None
        self.trigger_value: float = math.nan
        self.forecast_median: float = math.nan
        self.forecast_upper: float = math.nan
        self.demand_rps: float = math.nan
        self.waiting: float = math.nan
        self.running: float = math.nan
        self.fleet = FleetLedger()
        """Ready replica-seconds, peak, scale-ups (trace seconds): as the simulator keeps them."""

    # ------------------------------------------------------------- router
    def routable(self) -> list[LiveReplica]:
        return self._routable

    async def wait_routable(self, timeout_s: float) -> bool:
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout=timeout_s)
        return bool(self._routable)

    def replicas(self) -> list[LiveReplica]:
        return list(self._replicas.values())

    def all_processes(self) -> list[EmulatorProcess]:
        return [r.process for r in self._replicas.values()] + self._spares + self._reap

    # ------------------------------------------------------------ spares
    def _new_process(self) -> EmulatorProcess:
        proc = EmulatorProcess(
            self.workdir,
            self._next_index,
            profile=self.profile.name,
            speed=self.speed,
            served_model_name=self.served_model_name,
        )
        self._next_index += 1
        proc.start()
        self.counters.replicas_started += 1
        return proc

    def fill_spares(self) -> None:
        """Keep SPARES + (pods still starting) processes started and idle."""
        starting = max(0, self.cluster.status_replicas - self.cluster.ready_replicas)
        want = SPARES + starting
        while len(self._spares) < want:
            self._spares.append(self._new_process())

    def _take_spare(self) -> EmulatorProcess:
        """A serving spare if there is one, else the oldest still starting."""
        for k, proc in enumerate(self._spares):
            if proc.serving():
                return self._spares.pop(k)
        if not self._spares:
            self._spares.append(self._new_process())
        return self._spares.pop(0)

    # ----------------------------------------------------- cluster listener
    def _publish_targets(self) -> None:
        self.prometheus.set_targets(
            {r.process.address: {"pod": f"vllm-{r.pod_id}"} for r in self._routable}
        )

    def pod_ready(self, now: float, pod_id: int) -> None:
        proc = self._take_spare()
        replica = LiveReplica(pod_id, proc, proc.url, routable=False)
        self._replicas[pod_id] = replica
        if proc.serving():
            self._make_routable(now, replica)
        else:  # its process is still starting: Ready once it serves (a readiness probe)
            self._not_serving.append(replica)

    def _make_routable(self, now: float, replica: LiveReplica) -> None:
        replica.routable = True
        self._routable.append(replica)
        self.fleet.set_ready(now, +1)
        self._publish_targets()
        self._changed.set()

    def _promote(self, now: float) -> None:
        still: list[LiveReplica] = []
        for replica in self._not_serving:
            if self._replicas.get(replica.pod_id) is not replica:
                continue  # gone meanwhile
            if replica.process.serving():
                self._make_routable(now, replica)
            else:
                still.append(replica)
        self._not_serving = still

    def pod_stopping(self, now: float, pod_id: int, deadline_s: float, reason: str) -> None:
        self.fleet.pod_stopping(reason)
        replica = self._replicas.get(pod_id)
        if replica is not None:
            self._unroute(replica, now)

    def _unroute(self, replica: LiveReplica, now: float) -> None:
        """Stop sending new requests to ``replica`` and stop scraping it."""
        if replica.routable:
            replica.routable = False
            self._routable.remove(replica)
            self.fleet.set_ready(now, -1)
            self._publish_targets()

    def pod_gone(self, now: float, pod_id: int) -> None:
        replica = self._replicas.pop(pod_id, None)
        if replica is None:
            return
        self._unroute(replica, now)
        proc = replica.process
        if proc.child.process is not None and proc.child.alive:
            proc.child.process.kill()  # anything still in flight is lost, as on a deleted pod
        self._reap.append(proc)
        self.counters.replicas_killed += 1

    def _check_crashed(self, now: float) -> None:
        """A Ready pod whose process died is a crashed container: out of the Service
        (not routed, not scraped) at once; the kubelet restarts it, Ready again after
        the model loads (``model_load_s``), on a fresh process."""
        for replica in list(self._routable):
            if replica.process.child.alive:
                continue
            self._unroute(replica, now)
            self.counters.crashes += 1
            self._reap.append(replica.process)
            replica.process = self._take_spare()
            replica.url = replica.process.url
            self._restarting.append((now + self.cluster.config.model_load_s, replica))
        still: list[tuple[float, LiveReplica]] = []
        for due, replica in self._restarting:
            if self._replicas.get(replica.pod_id) is not replica:
                continue
            if now >= due and replica.process.serving():
                self._make_routable(now, replica)
            else:
                still.append((due, replica))
        self._restarting = still

    def mark_end(self, end_s: float) -> None:
        """Snapshot the fleet accounting at the trace's end (as the simulator does):
        pods that become Ready while requests drain afterwards are not billed to it."""

        def snapshot(t: float) -> None:
            self.fleet.set_ready(t, 0)
            self.at_end = (
                self.fleet.ready_area,
                self.cluster.cost_usd(t),
                self.cluster.gpu_hours(t),
            )

        self.queue.schedule(end_s, PRIORITY_SCRAPE, snapshot)

    # ------------------------------------------------------------- start
    def preroll(self) -> None:
        """Run the cluster from -warmup to 0 at once: the warm-start fleet is Ready at t=0."""
        if self.initial_replicas > 0:
            self.scale_deployment(-self.warmup_s, self.initial_replicas)
        for _ in range(self.initial_replicas):
            self._spares.append(self._new_process())
        self.fill_spares()
        for proc in list(self._spares):
            proc.wait_healthy(90.0)
        self.queue.run_until(0.0)
        self.at_start = (self.cluster.cost_usd(0.0), self.cluster.gpu_hours(0.0))

    def scale_deployment(self, now: float, replicas: int) -> None:
        self.fleet.scale(self.cluster, now, replicas)
        self.counters.scale_ups = self.fleet.scale_ups

    def _now(self) -> float:
        assert self._clock is not None
        return max(self._clock.now(), self.queue.now)

    # ------------------------------------------------------------- loops
    async def run(self, clock: Clock, stop: asyncio.Event, end_s: float) -> None:
        """Every loop until ``stop`` (or trace time ``end_s`` for the control loops)."""
        self._clock = clock
        self.mark_end(end_s)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0)) as http:
            self._http = http
            poll = self.so.keda.polling_interval_s
            tasks = [
                asyncio.create_task(self._tick_loop(stop), name="cluster"),
                asyncio.create_task(
                    self._every(float(self.rng.uniform(0.0, poll)), poll, self._poll, stop, end_s),
                    name="keda-poll",
                ),
                asyncio.create_task(
                    self._every(
                        float(self.rng.uniform(0.0, HPA_SYNC_S)),
                        HPA_SYNC_S,
                        self._sync,
                        stop,
                        end_s,
                    ),
                    name="hpa-sync",
                ),
                asyncio.create_task(
                    self._every(0.0, HPA_SYNC_S, self._sample, stop, end_s + 1e-9),
                    name="timeline",
                ),
            ]
            try:
                await stop.wait()
            finally:
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                self._http = None

    async def _tick_loop(self, stop: asyncio.Event) -> None:
        last_spares = 0.0
        while not stop.is_set():
            now = self._now()
            self.queue.run_until(now)
            if self._not_serving:
                self._promote(now)
            wall = time.monotonic()
            if wall - last_spares > 0.2:
                last_spares = wall
                self._check_crashed(now)
                self.fill_spares()
                self._reap = [p for p in self._reap if p.child.alive]
            await asyncio.sleep(TICK_WALL_S)

    async def _every(
        self,
        first_s: float,
        period_s: float,
        action: Callable[[float], Any],
        stop: asyncio.Event,
        end_s: float,
    ) -> None:
        assert self._clock is not None
        t = first_s
        while not stop.is_set() and t <= end_s:
            delay = self._clock.wall_at(t) - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                await action(max(t, self.queue.now))
            except asyncio.CancelledError:
                raise
            except Exception:  # a loop never dies: log and go on
                log.exception("control loop %s failed", getattr(action, "__name__", action))
            t += period_s

    # -- the trigger --------------------------------------------------------
    async def _prom(self, expr: str) -> list[dict[str, Any]]:
        http = self._http
        assert http is not None
        url = f"{self.prometheus.url}/api/v1/query?{urlencode({'query': expr})}"
        async with http.get(url) as resp:
            body = await resp.json()
        if body.get("status") != "success":
            raise ValueError(str(body))
        return list(body["data"]["result"])

    async def _prom_scalar(self, expr: str) -> float | None:
        """The one value of ``expr``; None for an empty result; raises on failure."""
        result = await self._prom(expr)
        if not result:
            return None
        return float(result[0]["value"][1])

    async def _trigger(self) -> tuple[float | None, bool | None]:
        """(value for the HPA, IsActive) now; (None, None) when the trigger failed."""
        trig = self.so.trigger
        if self.scaler is not None:
            try:
                polled = await self.scaler.poll()
            except grpc.aio.AioRpcError as exc:
                log.debug("scaler poll failed: %s", exc.code())
                return None, None
            self.desired = polled.value
            self.active = polled.active
            return polled.value, polled.active
        query = trig.metadata.get("query", "")
        try:
            value = await self._prom_scalar(query)
        except (aiohttp.ClientError, TimeoutError, ValueError, KeyError):
            self.counters.prometheus_errors += 1
            return None, None
        value = 0.0 if value is None else value  # KEDA: ignoreNullValues defaults to true
        self.trigger_value = value
        return value, value > trig.activation_threshold

    async def _poll(self, t: float) -> None:
        """KEDA's polling loop: RequestScale on IsActive (or the error)."""
        self.counters.polls += 1
        value, active = await self._trigger()
        t = self._now()
        spec = self.cluster.spec_replicas
        if value is None:
            self.counters.poll_errors += 1
            new = self.keda.poll(t, spec=spec, active=False, error=True)
        else:
            new = self.keda.poll(t, spec=spec, active=bool(active))
        if new is not None and new != spec:
            self.scale_deployment(t, new)

    async def _sync(self, t: float) -> None:
        """One HPA reconcile over the metric KEDA serves it."""
        self.counters.hpa_syncs += 1
        value: float | None
        if self.scaler is not None:
            try:
                value = await self.scaler.metrics()
                self.desired = value
            except grpc.aio.AioRpcError:
                value = None
        else:
            value, _ = await self._trigger()
        if value is None:
            self.counters.hpa_metric_errors += 1
        t = self._now()
        cluster = self.cluster
        spec = cluster.spec_replicas
        usage = self.keda.metric_for_hpa(
            value,
            spec=spec,
            target=self.so.hpa.target,
            metric_type=self.so.trigger.metric_type,
            ready=cluster.ready_replicas,
        )
        new = self.hpa.sync(
            t, spec=spec, status=cluster.status_replicas, ready=cluster.ready_replicas, usage=usage
        )
        if new != spec:
            self.scale_deployment(t, new)

    # -- the timeline -------------------------------------------------------
    async def _observe(self) -> None:
        """Queue, running, demand and the forecast band, from Prometheus."""
        queries: Mapping[str, str] = {
            "waiting": "sum(vllm:num_requests_waiting)",
            "running": "sum(vllm:num_requests_running)",
        }
        if self.scaler is not None:
            queries = {
                **queries,
                "demand": 'max(prescaler_demand{signal="requests_per_s"})',
                "median": 'max(prescaler_forecast{quantile="0.5"})',
                "upper": 'max(prescaler_forecast{quantile!="0.5"})',
            }
        results = await asyncio.gather(
            *(self._prom_scalar(q) for q in queries.values()), return_exceptions=True
        )
        values: dict[str, float] = {}
        for key, res in zip(queries, results, strict=True):
            if isinstance(res, BaseException):
                self.counters.prometheus_errors += 1
                values[key] = math.nan
            else:
                values[key] = math.nan if res is None else res
        self.waiting = values["waiting"]
        self.running = values["running"]
        if self.scaler is not None:  # the scaler's rates are per wall second: K x the trace's
            self.demand_rps = values["demand"] / self.speed
            self.forecast_median = values["median"] / self.speed
            self.forecast_upper = values["upper"] / self.speed

    async def _sample(self, t: float) -> None:
        await self._observe()
        row = fleet_row(
            t,
            self.cluster,
            arrived=float(self._arrived()),
            gateway=float(self._gateway()),
            waiting=0.0 if math.isnan(self.waiting) else self.waiting,
            running=0.0 if math.isnan(self.running) else self.running,
        )
        if self.scaler is not None:
            row["desired"] = self.desired
            row["forecast_upper_rps"] = self.forecast_upper
            row["forecast_median_rps"] = self.forecast_median
        append_row(self.counters.timeline, row)

    # ------------------------------------------------------------- stop
    def stop_all(self) -> None:
        """Kill every emulator process (replicas, spares) and wait for them."""
        procs = self.all_processes()
        for proc in procs:
            if proc.child.alive and proc.child.process is not None:
                proc.child.process.terminate()
        deadline = time.monotonic() + 5.0
        for proc in procs:
            process = proc.child.process
            if process is None:
                continue
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except Exception:
                process.kill()
                with contextlib.suppress(Exception):
                    process.wait(timeout=5)
        self._spares.clear()
        self._reap.clear()
