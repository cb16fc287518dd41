"""The vLLM Deployment on a Karpenter v1 cluster: pods, balloons, kube-scheduler, spot, cost.

Its own model because a replica's lead time and a node's cost, what make
predictive scaling pay, come from the cluster. This is the pods' side (the
ReplicaSet's scale-in choice, kube-scheduler, pod start-up); the nodes' side
is :mod:`simulations.cluster.karpenter`; the simplifications are in
docs/control-plane.md, "Karpenter". Listeners hear ``pod_ready``,
``pod_stopping`` (with its grace period's end) and ``pod_gone`` (drained,
grace over or node reclaimed) for vLLM pods that became Ready.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from simulations.cluster.config import (
    DEFAULT_SPOT_BAND,
    SPOT_INTERRUPTION_BANDS,
    CapacityType,
    ClusterConfig,
    NodePoolSpec,
    interruptions_per_hour,
)
from simulations.cluster.karpenter import Karpenter
from simulations.cluster.placement import (
    balloon_victim,
    free_inflight_node,
    free_ready_node,
    nominate,
    nominated_balloon,
    unassign,
)
from simulations.cluster.state import (
    GONE,
    LAUNCHING,
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
from simulations.events import PRIORITY_CLUSTER, EventQueue

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
        self._listener = listener
        self._karpenter = Karpenter(config, queue, rng, self)
        self._next_pod = 0
        self._spec = 0
        self._balloon_spec = 0
        self._vllm: dict[int, PodState] = {}  # non-terminating vLLM pods, creation order
        self._balloons: dict[int, PodState] = {}  # live balloon pods, creation order
        self._terminating: dict[int, PodState] = {}  # vLLM pods with a deletionTimestamp
        self._ready = 0
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
    def interruptions(self) -> int:
        """Nodes that got a spot interruption notice (injected ones included)."""
        return self._karpenter.interruptions

    @property
    def nodes(self) -> ClusterCounts:
        on_demand = spot = launching = 0
        for node in self._karpenter.nodes.values():
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
            for n in self._karpenter.nodes.values()
        )

    def cost_usd(self, now: float) -> float:
        """Each node billed from launch to termination (or ``now``) at its capacity type's price."""
        return self._karpenter.cost_usd(now)

    def gpu_hours(self, now: float) -> float:
        return self._karpenter.gpu_hours(now)

    # -- commands ---------------------------------------------------------------
    def scale_deployment(self, now: float, replicas: int) -> None:
        """Set the Deployment's spec.replicas, as the HPA or KEDA writes it.

        Up: the ReplicaSet creates the Pending pods at once. Down: it deletes
        pods in the ReplicaSet's order (kubernetes/kubernetes
        pkg/controller/controller_utils.go ``ActivePodsWithRanks``): unassigned
        pods (Pending or only nominated) first, then bound pods that are not
        Ready, then Ready pods, most recently Ready first; ties newest first.
        A deleted Ready pod gets ``pod_stopping`` now and ``pod_gone`` once
        drained (:meth:`pod_drained`) or after ``termination_grace_s``.
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

    def pod_drained(self, now: float, pod_id: int) -> None:
        """A terminating vLLM pod finished its last request and exited: it is
        gone now rather than at its deadline (no-op for a pod not terminating)."""
        pod = self._terminating.get(pod_id)
        if pod is None:
            return
        if pod.handle is not None:
            pod.handle.cancel()
            pod.handle = None
        self._pod_gone(pod, now)

    def interrupt_node_at(self, time_s: float, node_id: int) -> None:
        """Inject a spot interruption notice for ``node_id`` at ``time_s`` (no-op if gone by then).

        Any capacity type is accepted: on an on-demand node it stands for a
        forced termination with the same two-minute warning.
        """
        if node_id < 0:
            raise ValueError(f"node_id must be >= 0, got {node_id}")

        def fire(t: float) -> None:
            node = self._karpenter.nodes.get(node_id)
            if node is not None:
                self._karpenter.interrupt(node, t)

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
        nodes = self._karpenter.nodes
        per_node = self._config.pods_per_node
        self._sync_replicas(now)
        for pod in [p for p in self._vllm.values() if p.state in (PENDING, NOMINATED)]:
            node = free_ready_node(nodes.values(), per_node, now)
            if node is not None:
                unassign(pod)
                self._bind(now, pod, node)
                continue
            victim = balloon_victim(self._balloons.values())
            if victim is not None:
                node = victim.node
                assert node is not None
                unassign(pod)
                self._remove_balloon(now, victim)
                self._bind(now, pod, node)
                continue
            if pod.state == NOMINATED:
                continue
            node = free_inflight_node(nodes.values(), per_node)
            if node is None:
                displaced = nominated_balloon(self._balloons.values())
                if displaced is not None:
                    node = displaced.node
                    assert node is not None
                    unassign(displaced)
            if node is not None:
                nominate(pod, node)
        # Replacements for preempted balloons join here.
        self._sync_replicas(now)
        for pod in [p for p in self._balloons.values() if p.state == PENDING]:
            node = free_ready_node(nodes.values(), per_node, now)
            if node is not None:
                self._bind(now, pod, node)
                continue
            node = free_inflight_node(nodes.values(), per_node)
            if node is not None:
                nominate(pod, node)
        untriggered = False
        for pod in self.pending_pods():
            if not pod.triggered:
                pod.triggered = True
                untriggered = True
        if untriggered:
            self._karpenter.trigger(now)

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
        self._terminating[pod.pod_id] = pod
        self._ready -= 1
        if pod.node is not None:
            pod.node.last_pod_event_s = now
        pod.handle = self._queue.schedule(deadline, PRIORITY_CLUSTER, partial(self._pod_gone, pod))

    def _pod_gone(self, pod: PodState, now: float) -> None:
        pod.handle = None
        self._terminating.pop(pod.pod_id, None)
        node = pod.node
        if node is not None:
            node.pods.remove(pod)
            node.last_pod_event_s = now
        pod.node = None
        pod.state = GONE
        self._listener.pod_gone(now, pod.pod_id)
        if node is not None and node.state == NODE_READY:
            self._schedule(now)  # the slot is free again

    # -- what Karpenter asks of the pods (simulations.cluster.karpenter.PodSide) ------------
    def pending_pods(self) -> list[PodState]:
        """Unassigned pods, vLLM before balloons (kube-scheduler hands a new node to the
        higher priority first, so the batch plans for them first), then by creation."""
        pods = [p for p in self._vllm.values() if p.state == PENDING]
        pods += [p for p in self._balloons.values() if p.state == PENDING]
        return pods

    def node_initialized(self, now: float, node: NodeState) -> None:
        """Bind the pods nominated to ``node`` (vLLM first), then a scheduler pass."""
        for pod in sorted(node.pods, key=lambda p: (p.balloon, p.pod_id)):
            self._bind(now, pod, node)
        self._schedule(now)

    def evict(self, now: float, node: NodeState, deadline_s: float) -> None:
        """A spot notice on ``node``: the ReplicaSet replaces every evicted pod at once.

        Ready pods get ``pod_stopping`` with ``deadline_s``; balloons and pods
        not yet Ready go at once; nominations go back to Pending.
        """
        stopping: list[int] = []
        for pod in list(node.pods):
            if pod.state == TERMINATING:
                continue  # keeps its deadline; the node's end cuts it short if sooner
            if pod.balloon:
                self._remove_balloon(now, pod)
            elif pod.state == NOMINATED:
                unassign(pod)
            elif pod.state == READY:
                del self._vllm[pod.pod_id]
                self._start_terminating(now, pod, deadline_s)
                stopping.append(pod.pod_id)
            else:
                del self._vllm[pod.pod_id]
                self._drop(now, pod)
        for pod_id in stopping:
            self._listener.pod_stopping(now, pod_id, deadline_s, "spot_interruption")
        self._schedule(now)

    def node_lost(self, now: float, node: NodeState) -> None:
        """``node``'s instance is terminated: pods still terminating on it are gone now."""
        lost = [p for p in node.pods if p.state == TERMINATING]
        for pod in lost:
            if pod.handle is not None:
                pod.handle.cancel()
                pod.handle = None
            pod.state = GONE
            pod.node = None
            self._terminating.pop(pod.pod_id, None)
        node.pods.clear()
        for pod in lost:
            self._listener.pod_gone(now, pod.pod_id)
