"""One simulated run: a trace through a router, replicas, a cluster and a policy.

Everything lives on one :class:`Simulation`, so two runs in one process
share nothing. Time advances by events: the engine's own for replicas, a few
seconds for control loops, and arrivals merged from the sorted trace after
same-instant infrastructure events. The request path is
:mod:`simulations.router`; the data types are :mod:`simulations.sim_types`,
re-exported here.
"""

from __future__ import annotations

import time
from typing import Protocol

import numpy as np

from engine.metrics import Histogram
from engine.profiles import Profile
from engine.replica import Replica
from simulations.cluster.pods import Cluster, ClusterConfig
from simulations.events import PRIORITY_CLUSTER, PRIORITY_SCRAPE, EventQueue
from simulations.fleet_ledger import FleetLedger, append_row, fleet_row, timeline_arrays
from simulations.lead_time import with_startup
from simulations.router import Router
from simulations.scrape import PrometheusView, ScrapeSample
from simulations.servable import servable, workload_capacity
from simulations.sim_types import (
    COMPLETED,
    PENDING,
    REJECTED,
    TIMED_OUT,
    ConservationError,
    SimConfig,
    SimResult,
    SloBudgetExceeded,
)
from simulations.traffic import Workload

__all__ = [
    "COMPLETED",
    "PENDING",
    "REJECTED",
    "TIMED_OUT",
    "ConservationError",
    "Controller",
    "SimConfig",
    "SimResult",
    "Simulation",
    "SloBudgetExceeded",
    "servable",
    "workload_capacity",
]


class Controller(Protocol):
    """A scaling policy as the simulation drives it."""

    name: str

    def initial_replicas(self, sim: Simulation) -> int:
        """Replicas Ready at t=0 with a warm start."""

    def start(self, sim: Simulation) -> None:
        """Schedule the policy's own loops on ``sim.queue`` (called at t=0)."""

    def timeline_extra(self) -> dict[str, float]:
        """Extra timeline columns sampled at each scrape (e.g. a forecast band)."""


_DEFAULT_CONFIG = SimConfig()
"""The default knobs (frozen, so one instance serves every run)."""

DRAIN_CHECK_S = 1.0
"""How often a terminating pod is checked for in-flight requests: vLLM exits
once it has none, and the pod (with its node slot) is gone then, not at the
end of its grace period."""


def _counters(rep: Replica) -> tuple[float, float, float, float]:
    """A replica's vLLM counters the Prometheus view sums: requests, prompt and
    generation tokens, preemptions."""
    success = rep.success_total
    return (
        float(success["stop"] + success["length"]),
        float(rep.prompt_tokens_total),
        float(rep.generation_tokens_total),
        float(rep.preemptions_total),
    )


def _cumulative(hist: Histogram) -> tuple[float, ...]:
    """A histogram's cumulative counts at its bounds, then +Inf (the scrape's form)."""
    snap = hist.snapshot()
    return (*(float(c) for c in snap.cumulative), float(snap.count))


class Simulation:
    """One policy over one workload (see the module docstring)."""

    def __init__(
        self,
        workload: Workload,
        profile: Profile,
        controller: Controller,
        config: SimConfig = _DEFAULT_CONFIG,
        *,
        miss_budget: int | None = None,
    ) -> None:
        self.workload = workload
        self.miss_budget = miss_budget
        profile = with_startup(profile, config.startup)
        self.profile = profile
        self.controller = controller
        self.config = config
        self.rng = np.random.default_rng(config.seed)
        self.warmup_s = (2.0 * profile.startup.total_s + 120.0) if config.warm_start else 0.0
        self.queue = EventQueue(start_s=-self.warmup_s)
        cluster_config = ClusterConfig.for_profile(
            profile, spot=config.spot, **dict(config.cluster_overrides)
        )
        self.cluster = Cluster(cluster_config, self.queue, self.rng, self)
        self.prometheus = PrometheusView(config.scrape_interval_s, config.rate_window_s)
        self.n = len(workload)
        self._router = Router(workload, profile, config, self.queue)
        # fleet accounting
        self._retired = [0.0, 0.0, 0.0, 0.0]
        self._busy_retired = 0.0
        self._fleet = FleetLedger()
        self._at_end: tuple[float, float] | None = None
        self._at_start: tuple[float, float] = (0.0, 0.0)
        self._ready_area_end: float | None = None
        self._timeline: dict[str, list[float]] = {}

    @property
    def backlog(self) -> int:
        """Requests waiting right now: at the gateway plus in vLLM's waiting queues."""
        return self._router.backlog

    @property
    def misses(self) -> int:
        """Requests that already missed the TTFT SLO (late first token, timed
        out or rejected): a tuner reads it mid-run to stop a hopeless trial."""
        return self._router.misses

    def scale_deployment(self, now: float, replicas: int) -> None:
        """What every policy calls to write the Deployment's spec.replicas."""
        self._fleet.scale(self.cluster, now, replicas)

    # ------------------------------------------------------------ listener
    def pod_ready(self, now: float, pod_id: int) -> None:
        self._fleet.set_ready(now, +1)
        self._router.add_pod(now, pod_id)

    def pod_stopping(self, now: float, pod_id: int, deadline_s: float, reason: str) -> None:
        self._fleet.pod_stopping(reason)
        if self._router.unroute(pod_id):
            self._fleet.set_ready(now, -1)
        # looked at from the queue, not inside the cluster's own call
        self.queue.schedule(now, PRIORITY_CLUSTER, lambda t: self._check_drained(t, pod_id))

    def _check_drained(self, now: float, pod_id: int) -> None:
        """A stopping pod with nothing in flight exits: the cluster frees its
        slot (and, once the node is empty, Karpenter's consolidation clock
        starts) now; otherwise look again in :data:`DRAIN_CHECK_S`."""
        router = self._router
        pod = router.pods.get(pod_id)
        if pod is None:
            return  # already gone (its deadline or its node came first)
        router.sync(pod, now)
        router.flush()
        if not pod.inflight:
            self.cluster.pod_drained(now, pod_id)
        else:
            self.queue.schedule(
                now + DRAIN_CHECK_S, PRIORITY_CLUSTER, lambda t: self._check_drained(t, pod_id)
            )

    def pod_gone(self, now: float, pod_id: int) -> None:
        if self._router.unroute(pod_id):
            self._fleet.set_ready(now, -1)
        pod = self._router.remove_pod(now, pod_id)
        if pod is None:
            return
        self._busy_retired += pod.busy_s
        for k, v in enumerate(_counters(pod.replica)):
            self._retired[k] += v

    # -------------------------------------------------------------- scrape
    def _scrape(self, t: float) -> None:
        router = self._router
        sums = [0.0, 0.0, 0.0]
        maxes = [0.0, 0.0, 0.0]
        counters = list(self._retired)
        targets = 0
        for pod in list(router.pods.values()):
            router.sync(pod, t)
            rep = pod.replica
            for k, v in enumerate(_counters(rep)):
                counters[k] += v
            if not pod.routable:
                continue  # terminating: Prometheus drops the target once the pod is deleted
            targets += 1
            g = (float(rep.num_waiting), float(rep.num_running), rep.kv_usage)
            for k in range(3):
                sums[k] += g[k]
                if g[k] > maxes[k]:
                    maxes[k] = g[k]
        router.flush()
        self.prometheus.record(
            ScrapeSample(
                t,
                targets,
                (sums[0], sums[1], sums[2]),
                (maxes[0], maxes[1], maxes[2]),
                (counters[0], counters[1], counters[2], counters[3]),
                float(router.arrived),
                _cumulative(router.ttft_histogram),
            )
        )
        if t >= 0.0:
            self._sample_timeline(t, sums)
        self.queue.schedule(t + self.config.scrape_interval_s, PRIORITY_SCRAPE, self._scrape)

    def _sample_timeline(self, t: float, sums: list[float]) -> None:
        router = self._router
        row = fleet_row(
            t,
            self.cluster,
            arrived=float(router.arrived),
            gateway=float(router.gateway),
            waiting=sums[0],
            running=sums[1],
        )
        row.update(self.controller.timeline_extra())
        append_row(self._timeline, row)

    def _mark_start(self, t: float) -> None:
        self._at_start = (self.cluster.cost_usd(t), self.cluster.gpu_hours(t))
        self.controller.start(self)

    def _mark_end(self, t: float) -> None:
        self._at_end = (self.cluster.cost_usd(t), self.cluster.gpu_hours(t))
        self._fleet.set_ready(t, 0)
        self._ready_area_end = self._fleet.ready_area

    # ----------------------------------------------------------------- run
    def run(self) -> SimResult:
        """Replay the whole workload; raises :class:`ConservationError` if a request is lost."""
        wall0 = time.perf_counter()
        q = self.queue
        if self.warmup_s > 0:
            initial = int(self.controller.initial_replicas(self))
            if initial > 0:
                self.scale_deployment(-self.warmup_s, initial)
        for at_s, node_id in self.config.interruptions:
            self.cluster.interrupt_node_at(max(at_s, q.now), node_id)
        outage = self.config.prometheus_outage
        if outage is not None:
            view = self.prometheus
            q.schedule(outage[0], PRIORITY_CLUSTER, lambda _t: view.set_up(False))
            q.schedule(outage[1], PRIORITY_CLUSTER, lambda _t: view.set_up(True))
        phase = float(self.rng.uniform(0.0, self.config.scrape_interval_s))
        q.schedule(-self.warmup_s + phase, PRIORITY_SCRAPE, self._scrape)
        q.schedule(0.0, PRIORITY_CLUSTER, self._mark_start)
        duration = self.workload.duration_s
        q.schedule(duration, PRIORITY_SCRAPE, self._mark_end)
        self._router.replay(duration, self.miss_budget)
        return self._result(time.perf_counter() - wall0)

    def _result(self, wall_s: float) -> SimResult:
        router = self._router
        duration = self.workload.duration_s
        end = self._at_end or (self.cluster.cost_usd(duration), self.cluster.gpu_hours(duration))
        fleet = self._fleet
        area = fleet.ready_area if self._ready_area_end is None else self._ready_area_end
        busy = self._busy_retired
        for pod in router.pods.values():
            busy += pod.busy_s
            if pod.busy_since is not None:
                busy += max(0.0, pod.replica.now - pod.busy_since)
        status, ttft_s, tpot_s, e2e_s = router.records()
        return SimResult(
            policy=self.controller.name,
            trace=self.workload.name,
            profile=self.profile.name,
            duration_s=duration,
            slo_ttft_s=self.config.slo_ttft_s,
            status=status,
            ttft_s=ttft_s,
            tpot_s=tpot_s,
            e2e_s=e2e_s,
            rejected_reasons=router.rejected_reasons(),
            retried=router.retried,
            gpu_hours=end[1] - self._at_start[1],
            cost_usd=end[0] - self._at_start[0],
            **fleet.result_fields(self.cluster, area, duration),
            busy_replica_s=busy,
            served_tokens=float(router.served_tokens),
            capacity_tokens_per_s=float(
                workload_capacity(self.workload, self.profile).tokens_per_s or 0.0
            ),
            timeline=timeline_arrays(self._timeline),
            wall_s=wall_s,
            events=self.queue.processed,
            extra={"lead_time_samples_s": list(getattr(self.cluster, "pod_start_samples_s", []))},
        )
