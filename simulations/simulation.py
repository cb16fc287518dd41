"""One simulated run: a trace through a router, replicas, a cluster and a policy.

Everything lives on one :class:`Simulation` (its own event queue, cluster,
replicas, Prometheus view and records), so two runs in one process share
nothing. Time advances by events: replicas by the engine's own
``next_event_time``/``advance_to`` (a replica's event is rescheduled when its
batch changes and the stale one cancelled), control loops every few seconds,
arrivals straight from the sorted trace (merged with the heap, never pushed
onto it: after infrastructure and replica events at the same instant).

The router sends each request to the Ready replica with the fewest
outstanding requests; with none Ready it waits at the gateway, first come
first served. A client gives up ``timeout_s`` after arrival without a first
token (the request is aborted on its replica). A request the model cannot
hold is rejected with vLLM's own message. A pod that stops (scale-in, spot
notice, consolidation) takes no new requests; when it is gone, requests
still in flight on it are sent again from the gateway once (keeping their
first arrival time for TTFT) and fail the second time.

Conservation: each request ends exactly once as completed, timed out or
rejected (with a reason); :meth:`Simulation.run` raises if any did not.
"""

from __future__ import annotations

import functools
import math
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from engine.profiles import Profile
from engine.replica import Replica, RequestRejected
from engine.requests import Request, RequestRecord
from scaler.capacity import RequestShape, profile_capacity
from scaler.policy import ReplicaCapacity
from simulations.cluster import Cluster, ClusterConfig
from simulations.events import (
    PRIORITY_CLUSTER,
    PRIORITY_REPLICA,
    PRIORITY_REQUEST,
    PRIORITY_SCRAPE,
    EventHandle,
    EventQueue,
)
from simulations.scrape import PrometheusView, ScrapeSample
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

PENDING, COMPLETED, TIMED_OUT, REJECTED = 0, 1, 2, 3
POD_LOST_REASON = "replica terminated while serving (already retried once)"
POD_LOST_NO_RETRY_REASON = "replica terminated while serving (no replica to retry on)"
STUCK_AFTER_S = 86_400.0
"""A run still holding requests this long after the trace's end is a bug."""


def servable(workload: Workload, profile: Profile) -> np.ndarray:
    """Mask of the requests a replica of ``profile`` can hold (the rest are
    rejected at once and load nothing)."""
    lim = Replica(profile).limits
    total = workload.prompt_tokens + workload.output_tokens
    return (total <= lim.max_model_len) & (total <= lim.kv_tokens)


def workload_capacity(workload: Workload, profile: Profile) -> ReplicaCapacity:
    """One replica's sustainable rate (``scaler.capacity``) at the mean shape of
    the requests it can serve."""
    ok = servable(workload, profile)
    if ok.any():
        shape = RequestShape(
            max(1, round(float(np.mean(workload.prompt_tokens[ok])))),
            max(1, round(float(np.mean(workload.output_tokens[ok])))),
        )
    else:
        shape = RequestShape()
    return profile_capacity(profile, mix=shape)


class ConservationError(AssertionError):
    """A request ended twice or never: the simulator itself is wrong."""


class SloBudgetExceeded(RuntimeError):
    """More requests missed the TTFT SLO than the run's ``miss_budget`` allows
    (a search over static fleets stops a hopeless run early)."""


@dataclass(frozen=True)
class SimConfig:
    """Knobs of one run that are not the policy's (seconds unless named)."""

    slo_ttft_s: float = 1.0
    timeout_s: float = 60.0
    scrape_interval_s: float = 15.0
    rate_window_s: float = 120.0
    spot: bool = False
    seed: int = 0
    warm_start: bool = True
    """Start the fleet Ready at t=0 (sized by the policy) rather than from nothing."""
    cluster_overrides: tuple[tuple[str, Any], ...] = ()
    """``ClusterConfig.for_profile`` overrides, e.g. (("spot_interruptions_per_hour", 2.0),)."""
    interruptions: tuple[tuple[float, int], ...] = ()
    """Injected interruption notices: (time_s, node_id); a node gone by then is skipped."""

    def __post_init__(self) -> None:
        for name in ("slo_ttft_s", "timeout_s", "scrape_interval_s", "rate_window_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if self.rate_window_s < 2 * self.scrape_interval_s:
            raise ValueError("rate_window_s must span at least two scrape intervals")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")
        for at_s, node_id in self.interruptions:
            if not math.isfinite(at_s) or not isinstance(node_id, int) or node_id < 0:
                raise ValueError(
                    f"interruptions are (finite time_s, node_id >= 0), got {(at_s, node_id)!r}"
                )


class Controller(Protocol):
    """A scaling policy as the simulation drives it."""

    name: str

    def initial_replicas(self, sim: Simulation) -> int:
        """Replicas Ready at t=0 with a warm start."""

    def start(self, sim: Simulation) -> None:
        """Schedule the policy's own loops on ``sim.queue`` (called at t=0)."""

    def timeline_extra(self) -> dict[str, float]:
        """Extra timeline columns sampled at each scrape (e.g. a forecast band)."""


@dataclass(frozen=True)
class SimResult:
    """Everything one run produced; :mod:`simulations.report` summarizes it."""

    policy: str
    trace: str
    profile: str
    duration_s: float
    slo_ttft_s: float
    status: np.ndarray  # int8 per request: COMPLETED / TIMED_OUT / REJECTED
    ttft_s: np.ndarray  # NaN without a first token
    tpot_s: np.ndarray
    e2e_s: np.ndarray
    rejected_reasons: dict[str, int]
    retried: int
    gpu_hours: float
    cost_usd: float
    mean_replicas: float
    max_replicas: int
    busy_replica_s: float
    served_tokens: float
    """Prompt + output tokens of completed requests."""
    capacity_tokens_per_s: float
    """One replica's sustainable tokens/s at the workload's mean shape."""
    scale_ups: int
    spot_interruptions: int
    timeline: dict[str, np.ndarray]
    wall_s: float
    events: int
    extra: dict[str, Any] = field(default_factory=dict)


class _Pod:
    """One vLLM pod the cluster told us about (internal)."""

    __slots__ = (
        "action",
        "busy_s",
        "busy_since",
        "handle",
        "inflight",
        "pod_id",
        "replica",
        "routable",
    )

    def __init__(self, pod_id: int, replica: Replica, action: Callable[[float], None]) -> None:
        self.pod_id = pod_id
        self.replica = replica
        self.action = action
        self.handle: EventHandle | None = None
        self.inflight: set[int] = set()
        self.routable = True
        self.busy_since: float | None = None
        self.busy_s = 0.0


def _noop(t: float) -> None:
    return None


class Simulation:
    """One policy over one workload (see the module docstring)."""

    def __init__(
        self,
        workload: Workload,
        profile: Profile,
        controller: Controller,
        config: SimConfig = SimConfig(),
        *,
        miss_budget: int | None = None,
    ) -> None:
        self.workload = workload
        self.miss_budget = miss_budget
        self._misses = 0
        self._served = 0
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
        n = len(workload)
        self.n = n
        self._arrival: list[float] = workload.arrival_s.tolist()
        self._prompt: list[int] = workload.prompt_tokens.tolist()
        self._output: list[int] = workload.output_tokens.tolist()
        self._status = bytearray(n)
        # per-request times as lists (item assignment on a list is several times
        # cheaper than on an array); arrays once, in the result
        self._ttft: list[float] = [math.nan] * n
        self._tpot: list[float] = [math.nan] * n
        self._e2e: list[float] = [math.nan] * n
        self._loc: list[int] = [-1] * n
        self._retries = bytearray(n)
        self._reject = self._rejections()
        self._reasons: Counter[str] = Counter()
        self._done = 0
        self._arrived = 0
        self._retried = 0
        self._pods: dict[int, _Pod] = {}
        self._routable: list[_Pod] = []
        # each routable pod's in-flight set, in the same order: the router's
        # least-loaded pick is then ``map(len, ...)``, C-level, once per request
        self._routable_inflight: list[set[int]] = []
        self._gateway: deque[int] = deque()
        self._gateway_n = 0
        self._tptr = 0
        self._timeout_armed = False
        self._dirty: list[_Pod] = []
        # fleet accounting
        self._retired = [0.0, 0.0, 0.0, 0.0]
        self._busy_retired = 0.0
        self._ready = 0
        self._ready_area = 0.0
        self._ready_since = 0.0
        self._ready_max = 0
        self._scale_ups = 0
        self._spot_notices = 0
        self._at_end: tuple[float, float] | None = None
        self._at_start: tuple[float, float] = (0.0, 0.0)
        self._ready_area_end: float | None = None
        self._timeline: dict[str, list[float]] = {}

    # --------------------------------------------------------------- setup
    def _rejections(self) -> dict[int, str]:
        """vLLM's answer to each request it cannot hold (same for every replica)."""
        probe = Replica(self.profile)
        lim = probe.limits
        total = self.workload.prompt_tokens + self.workload.output_tokens
        suspicious = np.flatnonzero(
            (total > lim.max_model_len)
            | (total > lim.kv_tokens)
            | (total > lim.max_num_batched_tokens)
        )
        out: dict[int, str] = {}
        for i in suspicious.tolist():
            try:
                probe.check_request(self._prompt[i], self._output[i])
            except RequestRejected as exc:
                out[i] = str(exc)
        return out

    @property
    def backlog(self) -> int:
        """Requests waiting right now: at the gateway plus in vLLM's waiting queues."""
        return self._gateway_n + sum(p.replica.num_waiting for p in self._pods.values())

    @property
    def misses(self) -> int:
        """Requests that already missed the TTFT SLO (late first token, timed
        out or rejected): a tuner reads it mid-run to stop a hopeless trial."""
        return self._misses

    def scale_deployment(self, now: float, replicas: int) -> None:
        """What every policy calls to write the Deployment's spec.replicas."""
        if replicas > self.cluster.spec_replicas and now >= 0.0:
            self._scale_ups += 1
        self.cluster.scale_deployment(now, replicas)

    # ------------------------------------------------------------ listener
    def pod_ready(self, now: float, pod_id: int) -> None:
        # nothing here reads the replica's latency histograms (the results
        # carry per-request times): skipping them saves a large share of the run
        replica = Replica(self.profile, start_s=now, latency_histograms=False)
        pod = _Pod(pod_id, replica, _noop)
        pod.action = functools.partial(self._on_replica, pod)
        self._pods[pod_id] = pod
        self._routable.append(pod)
        self._routable_inflight.append(pod.inflight)
        self._set_ready(now, +1)
        gateway = self._gateway
        status = self._status
        while gateway:
            i = gateway.popleft()
            if status[i] == PENDING:
                self._gateway_n -= 1
                self._route(i, now)
        self._flush()

    def pod_stopping(self, now: float, pod_id: int, deadline_s: float, reason: str) -> None:
        pod = self._pods.get(pod_id)
        if reason == "spot_interruption":
            self._spot_notices += 1
        if pod is not None:
            self._unroute(pod, now)

    def _unroute(self, pod: _Pod, now: float) -> None:
        """Stop sending new requests to ``pod`` (it is draining or gone)."""
        if pod.routable:
            pod.routable = False
            k = self._routable.index(pod)
            del self._routable[k]
            del self._routable_inflight[k]
            self._set_ready(now, -1)

    def pod_gone(self, now: float, pod_id: int) -> None:
        pod = self._pods.pop(pod_id, None)
        if pod is None:
            return
        self._unroute(pod, now)
        self._sync(pod, now)
        if pod.handle is not None:
            pod.handle.cancel()
            pod.handle = None
        rep = pod.replica
        if pod.busy_since is not None:
            pod.busy_s += now - pod.busy_since
            pod.busy_since = None
        self._busy_retired += pod.busy_s
        for k, v in enumerate(self._counters(rep)):
            self._retired[k] += v
        lost = sorted(pod.inflight)
        pod.inflight.clear()
        deadline_passed = now - self.config.timeout_s
        for i in lost:
            if self._retries[i]:
                self._end(i, REJECTED)
                self._reasons[POD_LOST_REASON] += 1
            elif not self._routable and self._arrival[i] <= deadline_passed:
                # nowhere to retry, and the client's time-out is already behind
                # it: the gateway answers an error rather than queue it
                self._end(i, REJECTED)
                self._reasons[POD_LOST_NO_RETRY_REASON] += 1
            else:
                self._retries[i] = 1
                self._retried += 1
                self._route(i, now)
        self._flush()

    def _set_ready(self, now: float, delta: int) -> None:
        t0 = max(0.0, self._ready_since)
        if now > t0:
            self._ready_area += self._ready * (now - t0)
        self._ready_since = now
        self._ready += delta
        if now >= 0.0:
            self._ready_max = max(self._ready_max, self._ready)

    # ------------------------------------------------------------ requests
    def _route(self, i: int, now: float) -> None:
        pods = self._routable
        if not pods:
            self._gateway.append(i)
            self._gateway_n += 1
            self._loc[i] = -1
            return
        reason = self._reject.get(i)
        if reason is not None:
            self._end(i, REJECTED)
            self._reasons[reason] += 1
            return
        if len(pods) == 1:
            pod = pods[0]
        else:  # the first pod with the fewest outstanding requests
            loads = list(map(len, self._routable_inflight))
            pod = pods[loads.index(min(loads))]
        rep = pod.replica
        if rep.now < now:
            done = rep.advance_to(now)
            if done:
                self._harvest(pod, done)
        rep.submit(Request(str(i), now, self._prompt[i], self._output[i]))
        pod.inflight.add(i)
        self._loc[i] = pod.pod_id
        self._dirty.append(pod)

    def _flush(self) -> None:
        dirty = self._dirty
        if dirty:
            for pod in dirty:
                if pod.pod_id in self._pods:
                    self._reschedule(pod)
            dirty.clear()

    def _reschedule(self, pod: _Pod) -> None:
        rep = pod.replica
        nxt = rep.next_event_time()
        handle = pod.handle
        if handle is not None:
            # the handle is the heap entry [time_s, priority, seq, action]
            if nxt is not None and handle[0] == nxt and handle[3] is not None:
                return
            handle[3] = None  # cancel
        if nxt is None:
            pod.handle = None
            if pod.busy_since is not None:
                pod.busy_s += rep.now - pod.busy_since
                pod.busy_since = None
        else:
            pod.handle = self.queue.schedule(nxt, PRIORITY_REPLICA, pod.action)
            if pod.busy_since is None:
                pod.busy_since = rep.now

    def _on_replica(self, pod: _Pod, t: float) -> None:
        pod.handle = None
        done = pod.replica.advance_to(t)
        if done:
            self._harvest(pod, done)
        self._reschedule(pod)

    def _sync(self, pod: _Pod, now: float) -> None:
        """Bring a replica to ``now`` (for a scrape, a time-out or removal)."""
        rep = pod.replica
        if rep.now < now:
            done = rep.advance_to(now)
            if done:
                self._harvest(pod, done)

    def _harvest(self, pod: _Pod, records: list[RequestRecord]) -> None:
        status = self._status
        arrival = self._arrival
        inflight = pod.inflight
        slo = self.config.slo_ttft_s
        ttft_s = self._ttft
        tpot_s = self._tpot
        e2e_s = self._e2e
        done = misses = served = 0
        for rec in records:
            if rec.finished_reason == "abort":
                continue
            i = int(rec.request_id)
            inflight.discard(i)
            if status[i] != PENDING:
                raise ConservationError(f"request {i} finished after it had ended")
            status[i] = COMPLETED
            done += 1
            a = arrival[i]
            first = rec.first_token_s
            finish = rec.finish_s
            output = rec.output_tokens
            if first is not None:
                ttft = first - a
                ttft_s[i] = ttft
                if ttft > slo:
                    misses += 1
                if output >= 2:
                    tpot_s[i] = (finish - first) / (output - 1)
            e2e_s[i] = finish - a
            served += rec.prompt_tokens + output
        self._done += done
        self._misses += misses
        self._served += served

    def _end(self, i: int, outcome: int) -> None:
        if self._status[i] != PENDING:
            raise ConservationError(f"request {i} ended twice")
        self._status[i] = outcome
        self._done += 1
        self._misses += 1

    # ------------------------------------------------------------ time-outs
    def _arm_timeout(self) -> None:
        status = self._status
        j = self._tptr
        arrived = self._arrived
        while j < arrived and status[j] != PENDING:
            j += 1
        self._tptr = j
        if j < arrived:
            self._timeout_armed = True
            self.queue.schedule(
                self._arrival[j] + self.config.timeout_s, PRIORITY_REQUEST, self._on_timeout
            )
        else:
            self._timeout_armed = False

    def _on_timeout(self, t: float) -> None:
        status = self._status
        arrival = self._arrival
        limit = t - self.config.timeout_s + 1e-9
        j = self._tptr
        while j < self._arrived and arrival[j] <= limit:
            if status[j] == PENDING:
                self._expire(j, t)
            j += 1
        self._tptr = j
        self._flush()
        self._arm_timeout()

    def _expire(self, i: int, t: float) -> None:
        loc = self._loc[i]
        if loc < 0:
            self._gateway_n -= 1
            self._end(i, TIMED_OUT)
            return
        pod = self._pods[loc]
        self._sync(pod, t)
        if self._status[i] != PENDING:
            return
        rid = str(i)
        rep = pod.replica
        if rep.tokens_generated(rid) > 0:
            return
        rep.abort(rid)
        pod.inflight.discard(i)
        self._end(i, TIMED_OUT)
        self._dirty.append(pod)

    # -------------------------------------------------------------- scrape
    @staticmethod
    def _counters(rep: Replica) -> tuple[float, float, float, float]:
        success = rep.success_total
        return (
            float(success["stop"] + success["length"]),
            float(rep.prompt_tokens_total),
            float(rep.generation_tokens_total),
            float(rep.preemptions_total),
        )

    def _scrape(self, t: float) -> None:
        sums = [0.0, 0.0, 0.0]
        maxes = [0.0, 0.0, 0.0]
        counters = list(self._retired)
        targets = 0
        for pod in list(self._pods.values()):
            self._sync(pod, t)
            rep = pod.replica
            for k, v in enumerate(self._counters(rep)):
                counters[k] += v
            if not pod.routable:
                continue  # terminating: Prometheus drops the target once the pod is deleted
            targets += 1
            g = (float(rep.num_waiting), float(rep.num_running), rep.kv_usage)
            for k in range(3):
                sums[k] += g[k]
                if g[k] > maxes[k]:
                    maxes[k] = g[k]
        self._flush()
        self.prometheus.record(
            ScrapeSample(
                t,
                targets,
                (sums[0], sums[1], sums[2]),
                (maxes[0], maxes[1], maxes[2]),
                (counters[0], counters[1], counters[2], counters[3]),
            )
        )
        if t >= 0.0:
            self._sample_timeline(t, sums)
        self.queue.schedule(t + self.config.scrape_interval_s, PRIORITY_SCRAPE, self._scrape)

    def _sample_timeline(self, t: float, sums: list[float]) -> None:
        cluster = self.cluster
        nodes = cluster.nodes
        arrived = self._arrived
        row: dict[str, float] = {
            "t": t,
            "arrived": float(arrived),
            "spec": float(cluster.spec_replicas),
            "status": float(cluster.status_replicas),
            "ready": float(cluster.ready_replicas),
            "nodes_on_demand": float(nodes.on_demand),
            "nodes_spot": float(nodes.spot),
            "nodes_launching": float(nodes.launching),
            "balloons": float(nodes.balloons),
            "gateway": float(self._gateway_n),
            "waiting": sums[0],
            "running": sums[1],
            "cost_usd": cluster.cost_usd(t),
        }
        row.update(self.controller.timeline_extra())
        tl = self._timeline
        for k, v in row.items():
            tl.setdefault(k, []).append(v)

    def _mark_start(self, t: float) -> None:
        self._at_start = (self.cluster.cost_usd(t), self.cluster.gpu_hours(t))
        self.controller.start(self)

    def _mark_end(self, t: float) -> None:
        self._at_end = (self.cluster.cost_usd(t), self.cluster.gpu_hours(t))
        self._set_ready(t, 0)
        self._ready_area_end = self._ready_area

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
        phase = float(self.rng.uniform(0.0, self.config.scrape_interval_s))
        q.schedule(-self.warmup_s + phase, PRIORITY_SCRAPE, self._scrape)
        q.schedule(0.0, PRIORITY_CLUSTER, self._mark_start)
        duration = self.workload.duration_s
        q.schedule(duration, PRIORITY_SCRAPE, self._mark_end)
        arrival = self._arrival
        run_until = q.run_until
        route = self._route
        flush = self._flush
        n = self.n
        budget = self.miss_budget
        for i in range(n):
            a = arrival[i]
            run_until(a)
            self._arrived = i + 1
            route(i, a)
            if i + 1 == n or arrival[i + 1] != a:
                flush()
            if not self._timeout_armed:
                self._arm_timeout()
            if budget is not None and not i & 255 and self._misses > budget:
                raise SloBudgetExceeded(f"{self._misses} misses after {i + 1} arrivals")
        run_until(duration)
        step = q.step
        give_up = duration + self.config.timeout_s + STUCK_AFTER_S
        while self._done < n:
            if not step() or q.now > give_up:
                break
        self._check()
        return self._result(time.perf_counter() - wall0)

    def _check(self) -> None:
        status = np.frombuffer(bytes(self._status), dtype=np.int8)
        if self._done != self.n or np.any(status == PENDING):
            missing = np.flatnonzero(status == PENDING)
            raise ConservationError(
                f"{missing.size} request(s) never ended (first: {missing[:5].tolist()})"
            )
        rejected = int(np.count_nonzero(status == REJECTED))
        if sum(self._reasons.values()) != rejected:
            raise ConservationError("every rejected request needs exactly one reason")

    def _result(self, wall_s: float) -> SimResult:
        duration = self.workload.duration_s
        end = self._at_end or (self.cluster.cost_usd(duration), self.cluster.gpu_hours(duration))
        area = self._ready_area if self._ready_area_end is None else self._ready_area_end
        busy = self._busy_retired
        for pod in self._pods.values():
            busy += pod.busy_s
            if pod.busy_since is not None:
                busy += max(0.0, pod.replica.now - pod.busy_since)
        timeline = {k: np.asarray(v, dtype=np.float64) for k, v in self._timeline.items()}
        return SimResult(
            policy=self.controller.name,
            trace=self.workload.name,
            profile=self.profile.name,
            duration_s=duration,
            slo_ttft_s=self.config.slo_ttft_s,
            status=np.frombuffer(bytes(self._status), dtype=np.int8).copy(),
            ttft_s=np.array(self._ttft, dtype=np.float64),
            tpot_s=np.array(self._tpot, dtype=np.float64),
            e2e_s=np.array(self._e2e, dtype=np.float64),
            rejected_reasons=dict(self._reasons),
            retried=self._retried,
            gpu_hours=end[1] - self._at_start[1],
            cost_usd=end[0] - self._at_start[0],
            mean_replicas=area / duration,
            max_replicas=self._ready_max,
            busy_replica_s=busy,
            served_tokens=float(self._served),
            capacity_tokens_per_s=float(
                workload_capacity(self.workload, self.profile).tokens_per_s or 0.0
            ),
            scale_ups=self._scale_ups,
            # nodes interrupted (the cluster's count); pods told to stop if it has none
            spot_interruptions=int(getattr(self.cluster, "interruptions", self._spot_notices)),
            timeline=timeline,
            wall_s=wall_s,
            events=self.queue.processed,
            extra={"lead_time_samples_s": list(getattr(self.cluster, "pod_start_samples_s", []))},
        )
