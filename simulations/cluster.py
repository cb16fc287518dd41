"""Karpenter v1, the vLLM Deployment, balloon pods, spot and cost, on the EventQueue.

Why a model of its own: a replica's lead time (batch window, node launch,
image pull, model load) and what a node costs are what make predictive
scaling worth it, and they come from the cluster, not the replica. The
rules follow kubernetes-sigs/karpenter (provisioning batcher, NodePool
weights and limits, empty-node consolidation), aws/karpenter-provider-aws
(spot interruption), kube-scheduler (preemption, image locality) and the
ReplicaSet controller (which pod a scale-in deletes).

Simplifications (see docs/control-plane.md, "Karpenter"): one instance type
per run; only empty-node consolidation (the shipped NodePools use
``WhenEmpty``); no insufficient-capacity errors, drift or expiry; a deleted
pod that is not Ready disappears at once; an empty node is terminated the
moment Karpenter deletes it.

Listener callbacks (vLLM pods only; balloons are never reported):
``pod_ready`` when a pod passes its readiness probe; ``pod_stopping`` when a
Ready pod gets its deletionTimestamp (scale-in or spot notice), with the
instant it will be gone; ``pod_gone`` at that instant (or when its node is
reclaimed first). A pod deleted before it was Ready gets no callback.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import partial

import numpy as np

from simulations.cluster_config import (
    DEFAULT_SPOT_BAND,
    SPOT_INTERRUPTION_BANDS,
    CapacityType,
    ClusterConfig,
    NodePoolSpec,
    interruptions_per_hour,
)
from simulations.cluster_state import (
    DELETING,
    GONE,
    LAUNCHING,
    NODE_GONE,
    NODE_READY,
    NOMINATED,
    PENDING,
    READY,
    STARTING,
    STATE_NAMES,
    TERMINATING,
    ClusterCounts,
    ClusterListener,
    NodeState,
    NodeView,
    PodState,
    check_replicas,
    deletion_rank,
)
from simulations.events import PRIORITY_CLUSTER, PRIORITY_CONTROL, EventHandle, EventQueue

__all__ = [
    "DEFAULT_SPOT_BAND",
    "SPOT_INTERRUPTION_BANDS",
    "CapacityType",
    "Cluster",
    "ClusterConfig",
    "ClusterCounts",
    "ClusterListener",
    "NodePoolSpec",
    "NodeView",
    "interruptions_per_hour",
]


class Cluster:
    """The node and pod lifecycle of one vLLM Deployment under Karpenter.

    Drive it with :meth:`scale_deployment` and :meth:`scale_balloons`; it
    schedules its own events (node launches, pod starts, consolidation,
    spot interruptions) on ``queue`` and draws random times from ``rng``.
    """

    def __init__(
        self,
        config: ClusterConfig,
        queue: EventQueue,
        rng: np.random.Generator,
        listener: ClusterListener,
    ) -> None:
        self._config = config
        self._queue = queue
        self._rng = rng
        self._listener = listener
        self._t0 = queue.now
        self._pools = sorted(config.pools, key=lambda p: (-p.weight, p.name))
        self._pool_nodes: dict[str, int] = {p.name: 0 for p in config.pools}
        self._next_pod = 0
        self._next_node = 0
        self._spec = 0
        self._balloon_spec = 0
        self._vllm: dict[int, PodState] = {}  # non-terminating vLLM pods, creation order
        self._balloons: dict[int, PodState] = {}  # live balloon pods, creation order
        self._nodes: dict[int, NodeState] = {}
        self._ready = 0
        self._closed_cost = 0.0
        self._closed_gpu_s = 0.0
        self._batch_first: float | None = None
        self._batch_last = 0.0
        self._batch_handle: EventHandle | None = None
        self._retry_handle: EventHandle | None = None
        self._disruption_handle: EventHandle | None = None
        self.interruptions = 0
        self.pod_start_samples_s: list[float] = []

    # -- public view --------------------------------------------------------------
    @property
    def config(self) -> ClusterConfig:
        return self._config

    @property
    def spec_replicas(self) -> int:
        return self._spec

    @property
    def status_replicas(self) -> int:
        """Non-terminating vLLM pods, Pending included (the Deployment's status.replicas)."""
        return len(self._vllm)

    @property
    def ready_replicas(self) -> int:
        return self._ready

    @property
    def balloon_replicas(self) -> int:
        return self._balloon_spec

    @property
    def nodes(self) -> ClusterCounts:
        on_demand = spot = launching = 0
        for node in self._nodes.values():
            if node.pool.capacity_type == "spot":
                spot += 1
            else:
                on_demand += 1
            if node.state == LAUNCHING:
                launching += 1
        return ClusterCounts(on_demand, spot, launching, len(self._balloons))

    def node_views(self) -> tuple[NodeView, ...]:
        """Every live node (launch order) with the pods it holds."""
        return tuple(
            NodeView(
                node_id=n.node_id,
                pool=n.pool.name,
                capacity_type=n.pool.capacity_type,
                state=STATE_NAMES[n.state],
                launch_s=n.launch_s,
                ready_s=n.ready_s,
                pods=tuple(p.pod_id for p in n.pods if not p.balloon),
                balloons=tuple(p.pod_id for p in n.pods if p.balloon),
            )
            for n in self._nodes.values()
        )

    def cost_usd(self, now: float) -> float:
        """Each node billed from launch to termination (or ``now``) at its capacity type's price."""
        cost = self._closed_cost
        for node in self._nodes.values():
            cost += (now - node.launch_s) * self._config.price_per_s(node.pool.capacity_type)
        return cost

    def gpu_hours(self, now: float) -> float:
        seconds = self._closed_gpu_s
        for node in self._nodes.values():
            seconds += (now - node.launch_s) * self._config.gpus_per_node
        return seconds / 3600.0

    # -- commands ---------------------------------------------------------------
    def scale_deployment(self, now: float, replicas: int) -> None:
        """Set the Deployment's spec.replicas, as the HPA or KEDA writes it.

        Up: the ReplicaSet creates the Pending pods at once. Down: it deletes
        pods in the ReplicaSet's order (kubernetes/kubernetes
        pkg/controller/controller_utils.go ``ActivePodsWithRanks``): unassigned
        pods (Pending or only nominated) first, then bound pods that are not
        Ready, then Ready pods, most recently Ready first; ties newest first.
        A deleted Ready pod gets ``pod_stopping`` now and ``pod_gone`` after
        ``termination_grace_s``.
        """
        self._spec = check_replicas(replicas)
        excess = len(self._vllm) - replicas
        if excess > 0:
            for pod in sorted(self._vllm.values(), key=deletion_rank)[:excess]:
                self._delete_vllm(now, pod)
        self._schedule(now)

    def scale_balloons(self, now: float, replicas: int) -> None:
        """Set the balloon Deployment's replicas; unbound balloons go first on scale-in."""
        self._balloon_spec = check_replicas(replicas)
        excess = len(self._balloons) - replicas
        if excess > 0:
            for pod in sorted(self._balloons.values(), key=deletion_rank)[:excess]:
                self._remove_balloon(now, pod)
        self._schedule(now)

    def interrupt_node_at(self, time_s: float, node_id: int) -> None:
        """Inject a spot interruption notice for ``node_id`` at ``time_s`` (no-op if gone by then).

        Any capacity type is accepted: on an on-demand node it stands for a
        forced termination with the same two-minute warning.
        """
        if node_id < 0:
            raise ValueError(f"node_id must be >= 0, got {node_id}")

        def fire(t: float) -> None:
            node = self._nodes.get(node_id)
            if node is not None:
                self._interrupt(node, t)

        self._queue.schedule(time_s, PRIORITY_CLUSTER, fire)

    # -- kube-scheduler ---------------------------------------------------------
    def _schedule(self, now: float) -> None:
        """ReplicaSets fill up to spec, then one kube-scheduler pass, then Karpenter's trigger.

        vLLM pods go first (higher priority): a Ready node with a free slot
        (image already there preferred: the ImageLocality score), else
        preempt a balloon on a Ready node (kube-scheduler preemption; the
        victim that started last, as ``pickOneNodeForPreemption`` prefers),
        else a free slot on an in-flight node, else the slot of a balloon
        nominated to an in-flight node (the node binds the higher-priority
        pod first when it turns Ready). Balloons take free slots only.
        """
        self._sync_replicas(now)
        for pod in [p for p in self._vllm.values() if p.state in (PENDING, NOMINATED)]:
            node = self._free_ready_node(now)
            if node is not None:
                self._unassign(pod)
                self._bind(now, pod, node)
                continue
            victim = self._balloon_victim()
            if victim is not None:
                node = victim.node
                assert node is not None
                self._unassign(pod)
                self._remove_balloon(now, victim)
                self._bind(now, pod, node)
                continue
            if pod.state == NOMINATED:
                continue
            node = self._free_inflight_node(self._nodes.values())
            if node is None:
                displaced = self._nominated_balloon()
                if displaced is not None:
                    node = displaced.node
                    assert node is not None
                    self._unassign(displaced)
            if node is not None:
                self._nominate(pod, node)
        # Replacements for preempted balloons join here.
        self._sync_replicas(now)
        for pod in [p for p in self._balloons.values() if p.state == PENDING]:
            node = self._free_ready_node(now)
            if node is not None:
                self._bind(now, pod, node)
                continue
            node = self._free_inflight_node(self._nodes.values())
            if node is not None:
                self._nominate(pod, node)
        untriggered = False
        for pod in self._pending():
            if not pod.triggered:
                pod.triggered = True
                untriggered = True
        if untriggered:
            self._trigger(now)

    def _sync_replicas(self, now: float) -> None:
        while len(self._vllm) < self._spec:
            pod = self._new_pod(now, balloon=False)
            self._vllm[pod.pod_id] = pod
        while len(self._balloons) < self._balloon_spec:
            pod = self._new_pod(now, balloon=True)
            self._balloons[pod.pod_id] = pod

    def _new_pod(self, now: float, *, balloon: bool) -> PodState:
        pod = PodState(self._next_pod, balloon, now)
        self._next_pod += 1
        return pod

    def _pending(self) -> list[PodState]:
        """Unassigned pods, vLLM before balloons (kube-scheduler hands a new node to the
        higher priority first, so the batch plans for them first), then by creation."""
        pods = [p for p in self._vllm.values() if p.state == PENDING]
        pods += [p for p in self._balloons.values() if p.state == PENDING]
        return pods

    def _slots_free(self, node: NodeState) -> bool:
        return len(node.pods) < self._config.pods_per_node

    def _free_ready_node(self, now: float) -> NodeState | None:
        best: NodeState | None = None
        best_key: tuple[int, int] = (3, 0)
        for node in self._nodes.values():
            if node.state != NODE_READY or not self._slots_free(node):
                continue
            rank = 2 if node.image_at is None else 0 if node.image_at <= now else 1
            key = (rank, node.node_id)
            if key < best_key:
                best, best_key = node, key
        return best

    def _free_inflight_node(self, nodes: Iterable[NodeState]) -> NodeState | None:
        best: NodeState | None = None
        for node in nodes:
            if (
                node.state == LAUNCHING
                and self._slots_free(node)
                and (best is None or (node.ready_at, node.node_id) < (best.ready_at, best.node_id))
            ):
                best = node
        return best

    def _balloon_victim(self) -> PodState | None:
        best: PodState | None = None
        for pod in self._balloons.values():
            node = pod.node
            if (
                pod.state == READY
                and node is not None
                and node.state == NODE_READY
                and (best is None or (pod.bound_s, pod.pod_id) > (best.bound_s, best.pod_id))
            ):
                best = pod
        return best

    def _nominated_balloon(self) -> PodState | None:
        """The balloon nominated to the in-flight node due first (newest balloon on ties)."""
        best: PodState | None = None
        best_key = (math.inf, 0, 0)
        for pod in self._balloons.values():
            node = pod.node
            if pod.state == NOMINATED and node is not None:
                key = (node.ready_at, node.node_id, -pod.pod_id)
                if key < best_key:
                    best, best_key = pod, key
        return best

    def _nominate(self, pod: PodState, node: NodeState) -> None:
        pod.state = NOMINATED
        pod.node = node
        node.pods.append(pod)

    def _unassign(self, pod: PodState) -> None:
        """Drop a nomination; the pod is Pending again and must re-trigger Karpenter."""
        if pod.state == NOMINATED and pod.node is not None:
            pod.node.pods.remove(pod)
            pod.node = None
            pod.state = PENDING
            pod.triggered = False

    def _bind(self, now: float, pod: PodState, node: NodeState) -> None:
        """Bind to an Initialized node; a vLLM pod then pulls (unless cached) and loads."""
        cfg = self._config
        if pod.node is not node:
            node.pods.append(pod)
            pod.node = node
        pod.bound_s = now
        node.last_pod_event_s = now
        if pod.balloon:
            pod.state = READY
            if cfg.balloon_pulls_image and node.image_at is None:
                node.image_at = now + cfg.image_pull_s
            return
        pod.state = STARTING
        if node.image_at is None:
            node.image_at = now + cfg.image_pull_s
        ready_at = max(now, node.image_at) + cfg.model_load_s
        pod.handle = self._queue.schedule(ready_at, PRIORITY_CLUSTER, partial(self._pod_ready, pod))

    def _pod_ready(self, pod: PodState, now: float) -> None:
        pod.handle = None
        pod.state = READY
        pod.ready_s = now
        self._ready += 1
        self.pod_start_samples_s.append(now - pod.created_s)
        self._listener.pod_ready(now, pod.pod_id)

    # -- deletion -----------------------------------------------------------------
    def _delete_vllm(self, now: float, pod: PodState) -> None:
        """The ReplicaSet deletes one vLLM pod (scale-in)."""
        del self._vllm[pod.pod_id]
        if pod.state == READY:
            deadline = now + self._config.termination_grace_s
            self._start_terminating(now, pod, deadline)
            self._listener.pod_stopping(now, pod.pod_id, deadline, "scale_in")
            return
        self._drop(now, pod)

    def _drop(self, now: float, pod: PodState) -> None:
        """Remove a pod that is not Ready at once (no in-flight work, no callback)."""
        if pod.handle is not None:
            pod.handle.cancel()
            pod.handle = None
        node = pod.node
        if node is not None:
            node.pods.remove(pod)
            if pod.state != NOMINATED:
                node.last_pod_event_s = now
        pod.node = None
        pod.state = GONE

    def _remove_balloon(self, now: float, pod: PodState) -> None:
        """Balloons have terminationGracePeriodSeconds 0: gone at once."""
        del self._balloons[pod.pod_id]
        self._drop(now, pod)

    def _start_terminating(self, now: float, pod: PodState, deadline: float) -> None:
        pod.state = TERMINATING
        self._ready -= 1
        if pod.node is not None:
            pod.node.last_pod_event_s = now
        pod.handle = self._queue.schedule(deadline, PRIORITY_CLUSTER, partial(self._pod_gone, pod))

    def _pod_gone(self, pod: PodState, now: float) -> None:
        pod.handle = None
        node = pod.node
        if node is not None:
            node.pods.remove(pod)
            node.last_pod_event_s = now
        pod.node = None
        pod.state = GONE
        self._listener.pod_gone(now, pod.pod_id)
        if node is not None and node.state == NODE_READY:
            self._schedule(now)  # the slot is free again

    # -- Karpenter provisioning ----------------------------------------------------
    def _trigger(self, now: float) -> None:
        """A provisionable pod: open or extend the batch window (batcher.go ``Wait``)."""
        cfg = self._config
        if self._batch_first is None:
            self._batch_first = now
        self._batch_last = now
        due = min(self._batch_last + cfg.batch_idle_s, self._batch_first + cfg.batch_max_s)
        if self._batch_handle is not None:
            if self._batch_handle.time_s == due:
                return
            self._batch_handle.cancel()
        self._batch_handle = self._queue.schedule(due, PRIORITY_CONTROL, self._provision)

    def _provision(self, now: float) -> None:
        """Close the batch: nominate pending pods to in-flight nodes or launch NodeClaims.

        Pools are tried in descending weight (then name); a pool whose
        ``limit_nodes`` is reached is skipped (provisioner.go, scheduler.go).
        """
        self._batch_first = None
        self._batch_handle = None
        left = False
        for pod in self._pending():
            node = self._free_inflight_node(self._nodes.values())
            if node is None:
                pool = self._pool_with_room()
                if pool is None:
                    left = True
                    continue
                node = self._launch(now, pool)
            self._nominate(pod, node)
        if left and self._retry_handle is None:
            self._retry_handle = self._queue.schedule(
                now + self._config.provisioning_retry_s, PRIORITY_CONTROL, self._retry
            )

    def _retry(self, now: float) -> None:
        """Pending pods requeue every 10 s (provisioning/controller.go) and trigger a new batch."""
        self._retry_handle = None
        if self._pending():
            self._trigger(now)

    def _pool_with_room(self) -> NodePoolSpec | None:
        for pool in self._pools:
            if pool.limit_nodes is None or self._pool_nodes[pool.name] < pool.limit_nodes:
                return pool
        return None

    def _launch(self, now: float, pool: NodePoolSpec) -> NodeState:
        cfg = self._config
        lo, mode, hi = cfg.node_ready_s
        delay = lo if hi <= lo else float(self._rng.triangular(lo, mode, hi))
        node = NodeState(self._next_node, pool, now, now + delay)
        self._next_node += 1
        self._nodes[node.node_id] = node
        self._pool_nodes[pool.name] += 1
        node.ready_handle = self._queue.schedule(
            node.ready_at, PRIORITY_CLUSTER, partial(self._node_ready, node)
        )
        if pool.capacity_type == "spot" and cfg.spot_interruptions_per_hour > 0:
            after = float(self._rng.exponential(3600.0 / cfg.spot_interruptions_per_hour))
            node.interrupt_handle = self._queue.schedule(
                now + after, PRIORITY_CLUSTER, partial(self._interrupt, node)
            )
        self._ensure_disruption_loop(now)
        return node

    def _node_ready(self, node: NodeState, now: float) -> None:
        """Initialized: bind the pods nominated to it (vLLM first), then a scheduler pass."""
        node.ready_handle = None
        if node.state != LAUNCHING:
            return
        node.state = NODE_READY
        node.ready_s = now
        for pod in sorted(node.pods, key=lambda p: (p.balloon, p.pod_id)):
            self._bind(now, pod, node)
        self._schedule(now)

    # -- spot interruption ---------------------------------------------------------
    def _interrupt(self, node: NodeState, now: float) -> None:
        """Spot notice: Karpenter deletes the NodeClaim at once; EC2 reclaims at +notice.

        aws/karpenter-provider-aws pkg/controllers/interruption: no budget, no
        pre-spin. Ready pods get min(grace, notice) to finish; the ReplicaSet
        replaces every evicted pod at once; nominations go back to Pending.
        """
        if node.state in (DELETING, NODE_GONE):
            return
        cfg = self._config
        self.interruptions += 1
        if node.ready_handle is not None:
            node.ready_handle.cancel()
            node.ready_handle = None
        if node.interrupt_handle is not None:
            node.interrupt_handle.cancel()
            node.interrupt_handle = None
        node.state = DELETING
        end = now + cfg.spot_notice_s
        node.gone_handle = self._queue.schedule(
            end, PRIORITY_CLUSTER, partial(self._node_gone, node)
        )
        deadline = now + min(cfg.termination_grace_s, cfg.spot_notice_s)
        stopping: list[int] = []
        for pod in list(node.pods):
            if pod.state == TERMINATING:
                continue  # keeps its deadline; the node's end cuts it short if sooner
            if pod.balloon:
                self._remove_balloon(now, pod)
            elif pod.state == NOMINATED:
                self._unassign(pod)
            elif pod.state == READY:
                del self._vllm[pod.pod_id]
                self._start_terminating(now, pod, deadline)
                stopping.append(pod.pod_id)
            else:
                del self._vllm[pod.pod_id]
                self._drop(now, pod)
        for pod_id in stopping:
            self._listener.pod_stopping(now, pod_id, deadline, "spot_interruption")
        self._schedule(now)

    def _node_gone(self, node: NodeState, now: float) -> None:
        """The instance is terminated: pods still on it are lost, billing stops."""
        node.gone_handle = None
        lost = [p for p in node.pods if p.state == TERMINATING]
        for pod in lost:
            if pod.handle is not None:
                pod.handle.cancel()
                pod.handle = None
            pod.state = GONE
            pod.node = None
        node.pods.clear()
        self._close(now, node)
        for pod in lost:
            self._listener.pod_gone(now, pod.pod_id)

    def _close(self, now: float, node: NodeState) -> None:
        node.state = NODE_GONE
        for handle in (node.ready_handle, node.interrupt_handle, node.gone_handle):
            if handle is not None:
                handle.cancel()
        node.ready_handle = node.interrupt_handle = node.gone_handle = None
        lifetime = now - node.launch_s
        self._closed_cost += lifetime * self._config.price_per_s(node.pool.capacity_type)
        self._closed_gpu_s += lifetime * self._config.gpus_per_node
        del self._nodes[node.node_id]
        self._pool_nodes[node.pool.name] -= 1

    # -- Karpenter disruption (empty-node consolidation only) ----------------------
    def _ensure_disruption_loop(self, now: float) -> None:
        if self._disruption_handle is not None:
            return
        poll = self._config.disruption_poll_s
        tick = self._t0 + math.ceil((now - self._t0) / poll - 1e-9) * poll
        self._disruption_handle = self._queue.schedule(
            max(tick, now), PRIORITY_CONTROL, self._disruption_pass
        )

    def _consolidatable(self, now: float, node: NodeState) -> bool:
        """Initialized, not deleting, no pods at all (balloons count), idle for consolidateAfter."""
        if node.state != NODE_READY or node.pods:
            return False
        after = node.pool.consolidate_after_s
        if math.isinf(after):
            return False
        since = node.last_pod_event_s if node.last_pod_event_s is not None else node.ready_s
        assert since is not None
        return now - since >= after - 1e-9

    def _disruption_pass(self, now: float) -> None:
        """One pass of the 10 s disruption loop: pick empty nodes within each pool's budget.

        kubernetes-sigs/karpenter pkg/controllers/disruption/emptiness.go waits
        ``consolidationTTL`` (15 s) and validates again before deleting.
        """
        self._disruption_handle = None
        if not self._nodes:
            return  # restarted by the next launch
        budgets: dict[str, int] = {}
        for pool in self._config.pools:
            initialized = [
                n
                for n in self._nodes.values()
                if n.pool.name == pool.name and n.ready_s is not None
            ]
            deleting = sum(1 for n in initialized if n.state == DELETING)
            budgets[pool.name] = max(0, pool.allowed_disruptions(len(initialized)) - deleting)
        chosen: list[NodeState] = []
        for node in self._nodes.values():
            if self._consolidatable(now, node) and budgets[node.pool.name] > 0:
                budgets[node.pool.name] -= 1
                chosen.append(node)
        poll = self._config.disruption_poll_s
        if not chosen:
            self._disruption_handle = self._queue.schedule(
                now + poll, PRIORITY_CONTROL, self._disruption_pass
            )
            return
        self._disruption_handle = self._queue.schedule(
            now + self._config.consolidation_validation_s,
            PRIORITY_CONTROL,
            partial(self._consolidate_at, tuple(chosen)),
        )

    def _consolidate_at(self, chosen: tuple[NodeState, ...], now: float) -> None:
        """Delete the candidates still empty after the validation wait; the next pass follows."""
        self._disruption_handle = None
        valid = [n for n in chosen if n.node_id in self._nodes and self._consolidatable(now, n)]
        for node in valid:
            self._close(now, node)
        delay = 0.0 if valid else self._config.disruption_poll_s
        if self._nodes:
            self._disruption_handle = self._queue.schedule(
                now + delay, PRIORITY_CONTROL, self._disruption_pass
            )
