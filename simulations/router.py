"""The request path of one run: gateway, router, replica events, client time-outs.

Fewest-outstanding routing to Ready replicas, first come first served at
the gateway with none Ready, client time-outs, vLLM's rejections, and one
retry from the gateway for requests on a pod that is gone. A class of its
own because it is the simulator's hot path (a few calls per request), so
its state is plain attributes on one object. :meth:`Router.replay` raises
unless each request ended exactly once.
"""

from __future__ import annotations

import functools
import math
from collections import Counter, deque
from collections.abc import Callable

import numpy as np

from engine.metrics import TTFT_BUCKETS_V1, Histogram
from engine.profiles import Profile
from engine.replica import Replica
from engine.requests import Request, RequestRecord
from simulations.events import PRIORITY_REPLICA, PRIORITY_REQUEST, EventHandle, EventQueue
from simulations.servable import rejections
from simulations.sim_types import (
    COMPLETED,
    PENDING,
    REJECTED,
    TIMED_OUT,
    ConservationError,
    SimConfig,
    SloBudgetExceeded,
)
from simulations.traffic import Workload

__all__ = ["POD_LOST_NO_RETRY_REASON", "POD_LOST_REASON", "STUCK_AFTER_S", "ReplicaPod", "Router"]

POD_LOST_REASON = "replica terminated while serving (already retried once)"
POD_LOST_NO_RETRY_REASON = "replica terminated while serving (no replica to retry on)"
STUCK_AFTER_S = 86_400.0
"""A run still holding requests this long after the trace's end is a bug."""


class ReplicaPod:
    """One Ready vLLM pod as the router sees it: its replica, its requests, its busy time."""

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


class Router:
    """Every request of one workload from arrival to its end (see the module docstring)."""

    def __init__(
        self, workload: Workload, profile: Profile, config: SimConfig, queue: EventQueue
    ) -> None:
        self.profile = profile
        self.config = config
        self.queue = queue
        n = len(workload)
        self.n = n
        self._arrival: list[float] = workload.arrival_s.tolist()
        self._prompt: list[int] = workload.prompt_tokens.tolist()
        self._output: list[int] = workload.output_tokens.tolist()
        self._status = bytearray(n)
        # per-request times as lists (item assignment on a list is several times
        # cheaper than on an array); arrays once, in the result
        self._ttft: list[float] = [math.nan] * n
        self.ttft_histogram = Histogram(TTFT_BUCKETS_V1)
        """vLLM's TTFT histogram over the fleet, observed when the router
        learns a request's first-token time (at its completion)."""
        self._tpot: list[float] = [math.nan] * n
        self._e2e: list[float] = [math.nan] * n
        self._loc: list[int] = [-1] * n
        self._retries = bytearray(n)
        self._reject = rejections(workload, profile)
        self._reasons: Counter[str] = Counter()
        self._done = 0
        self._arrived = 0
        self._retried = 0
        self._misses = 0
        self._served = 0
        self._pods: dict[int, ReplicaPod] = {}
        self._routable: list[ReplicaPod] = []
        # each routable pod's in-flight set, in the same order: the router's
        # least-loaded pick is then ``map(len, ...)``, C-level, once per request
        self._routable_inflight: list[set[int]] = []
        self._gateway: deque[int] = deque()
        self._gateway_n = 0
        self._tptr = 0
        self._timeout_armed = False
        self._dirty: list[ReplicaPod] = []

    # ---------------------------------------------------------------- views
    @property
    def pods(self) -> dict[int, ReplicaPod]:
        """Ready pods by id, stopping ones included until they are gone (read, don't edit)."""
        return self._pods

    @property
    def arrived(self) -> int:
        """Requests that arrived so far."""
        return self._arrived

    @property
    def gateway(self) -> int:
        """Requests waiting at the gateway for a Ready replica."""
        return self._gateway_n

    @property
    def backlog(self) -> int:
        """Requests waiting right now: at the gateway plus in vLLM's waiting queues."""
        return self._gateway_n + sum(p.replica.num_waiting for p in self._pods.values())

    @property
    def misses(self) -> int:
        """Requests that already missed the TTFT SLO (late first token, timed out or rejected)."""
        return self._misses

    @property
    def retried(self) -> int:
        """Requests sent again after their pod was gone."""
        return self._retried

    @property
    def served_tokens(self) -> int:
        """Prompt + output tokens of completed requests."""
        return self._served

    def rejected_reasons(self) -> dict[str, int]:
        """Rejected requests by reason."""
        return dict(self._reasons)

    def records(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per request: outcome (int8), TTFT, TPOT and end-to-end seconds (NaN if none)."""
        return (
            np.frombuffer(bytes(self._status), dtype=np.int8).copy(),
            np.array(self._ttft, dtype=np.float64),
            np.array(self._tpot, dtype=np.float64),
            np.array(self._e2e, dtype=np.float64),
        )

    # ----------------------------------------------------------------- pods
    def add_pod(self, now: float, pod_id: int) -> None:
        """A pod turned Ready: route to it, starting with the gateway's queue."""
        # nothing here reads the replica's latency histograms (the results
        # carry per-request times): skipping them saves a large share of the run
        # the pod's id seeds its stalls (if the profile has any): replicas stall
        # apart, and the same run stalls the same way again
        replica = Replica(self.profile, start_s=now, latency_histograms=False, stall_seed=pod_id)
        pod = ReplicaPod(pod_id, replica, _noop)
        pod.action = functools.partial(self._on_replica, pod)
        self._pods[pod_id] = pod
        self._routable.append(pod)
        self._routable_inflight.append(pod.inflight)
        gateway = self._gateway
        status = self._status
        while gateway:
            i = gateway.popleft()
            if status[i] == PENDING:
                self._gateway_n -= 1
                self._route(i, now)
        self.flush()

    def unroute(self, pod_id: int) -> bool:
        """Stop sending new requests to a pod (draining or gone); True if it was routable."""
        pod = self._pods.get(pod_id)
        if pod is None or not pod.routable:
            return False
        pod.routable = False
        k = self._routable.index(pod)
        del self._routable[k]
        del self._routable_inflight[k]
        return True

    def remove_pod(self, now: float, pod_id: int) -> ReplicaPod | None:
        """A pod is gone: its requests in flight go back to the gateway once.

        Returns the pod, its replica brought to ``now`` and its busy time
        closed, for the run's accounting; None if it was unknown.
        """
        pod = self._pods.pop(pod_id, None)
        if pod is None:
            return None
        self.sync(pod, now)
        if pod.handle is not None:
            pod.handle.cancel()
            pod.handle = None
        if pod.busy_since is not None:
            pod.busy_s += now - pod.busy_since
            pod.busy_since = None
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
        self.flush()
        return pod

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

    def flush(self) -> None:
        """Reschedule the events of replicas whose batch changed since the last flush."""
        dirty = self._dirty
        if dirty:
            for pod in dirty:
                if pod.pod_id in self._pods:
                    self._reschedule(pod)
            dirty.clear()

    def _reschedule(self, pod: ReplicaPod) -> None:
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

    def _on_replica(self, pod: ReplicaPod, t: float) -> None:
        pod.handle = None
        done = pod.replica.advance_to(t)
        if done:
            self._harvest(pod, done)
        self._reschedule(pod)

    def sync(self, pod: ReplicaPod, now: float) -> None:
        """Bring a replica to ``now`` (for a scrape, a time-out or removal)."""
        rep = pod.replica
        if rep.now < now:
            done = rep.advance_to(now)
            if done:
                self._harvest(pod, done)

    def _harvest(self, pod: ReplicaPod, records: list[RequestRecord]) -> None:
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
                self.ttft_histogram.observe(ttft)
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
        self.flush()
        self._arm_timeout()

    def _expire(self, i: int, t: float) -> None:
        loc = self._loc[i]
        if loc < 0:
            self._gateway_n -= 1
            self._end(i, TIMED_OUT)
            return
        pod = self._pods[loc]
        self.sync(pod, t)
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

    # ----------------------------------------------------------------- run
    def replay(self, duration_s: float, miss_budget: int | None) -> None:
        """Feed every arrival in trace order, merged with the queue's events, then run
        the queue until each request has ended; raises :class:`ConservationError` if
        one did not, :class:`SloBudgetExceeded` past ``miss_budget`` misses."""
        q = self.queue
        arrival = self._arrival
        route = self._route
        flush = self.flush
        n = self.n
        budget = miss_budget
        for i in range(n):
            a = arrival[i]
            q.run_until(a)
            self._arrived = i + 1
            route(i, a)
            if i + 1 == n or arrival[i + 1] != a:
                flush()
            if not self._timeout_armed:
                self._arm_timeout()
            if budget is not None and not i & 255 and self._misses > budget:
                raise SloBudgetExceeded(f"{self._misses} misses after {i + 1} arrivals")
        q.run_until(duration_s)
        step = q.step
        give_up = duration_s + self.config.timeout_s + STUCK_AFTER_S
        while self._done < n:
            if not step() or q.now > give_up:
                break
        self._check()

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
