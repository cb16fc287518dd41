"""Karpenter v1's side of the cluster: NodeClaims, spot interruption, consolidation, billing.

Why apart from :mod:`simulations.cluster.pods`: Karpenter owns the nodes and
the cluster's pod side (ReplicaSets, kube-scheduler, kubelet) owns the
pods; they meet through :class:`PodSide`, so each half reads on its own.
The rules follow kubernetes-sigs/karpenter (provisioning batcher, NodePool
weights and limits, empty-node consolidation) and aws/karpenter-provider-aws
(spot interruption).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Protocol

import numpy as np

from simulations.cluster.config import ClusterConfig, NodePoolSpec
from simulations.cluster.placement import free_inflight_node, nominate
from simulations.cluster.state import (
    DELETING,
    LAUNCHING,
    NODE_GONE,
    NODE_READY,
    NodeState,
    PodState,
)
from simulations.events import PRIORITY_CLUSTER, PRIORITY_CONTROL, EventHandle, EventQueue

__all__ = ["Karpenter", "PodSide"]


class PodSide(Protocol):
    """What Karpenter asks of the pods' side of the cluster."""

    def pending_pods(self) -> list[PodState]:
        """Unassigned pods in the order a provisioning batch plans for them."""

    def node_initialized(self, now: float, node: NodeState) -> None:
        """Bind the pods nominated to ``node`` and run a scheduler pass."""

    def evict(self, now: float, node: NodeState, deadline_s: float) -> None:
        """``node`` got a spot notice: its pods leave by ``deadline_s`` at the latest."""

    def node_lost(self, now: float, node: NodeState) -> None:
        """``node``'s instance is gone: pods still terminating on it are lost."""


class Karpenter:
    """Launches and deletes the nodes of one cluster and bills them.

    Pending pods reach it through :meth:`trigger`; it draws node start-up
    times and spot interruptions from ``rng`` and schedules its own loops on
    ``queue``.
    """

    def __init__(
        self,
        config: ClusterConfig,
        queue: EventQueue,
        rng: np.random.Generator,
        pods: PodSide,
    ) -> None:
        self._config = config
        self._queue = queue
        self._rng = rng
        self._pods = pods
        self._t0 = queue.now
        self._pools = sorted(config.pools, key=lambda p: (-p.weight, p.name))
        self._pool_nodes: dict[str, int] = {p.name: 0 for p in config.pools}
        self._next_node = 0
        self._nodes: dict[int, NodeState] = {}
        self._closed_cost = 0.0
        self._closed_gpu_s = 0.0
        self._batch_first: float | None = None
        self._batch_last = 0.0
        self._batch_handle: EventHandle | None = None
        self._retry_handle: EventHandle | None = None
        self._disruption_handle: EventHandle | None = None
        self.interruptions = 0

    @property
    def nodes(self) -> dict[int, NodeState]:
        """Every live node (launching, Ready or deleting), in launch order."""
        return self._nodes

    # -- billing ----------------------------------------------------------------------
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

    # -- provisioning -------------------------------------------------------------------
    def trigger(self, now: float) -> None:
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
        for pod in self._pods.pending_pods():
            node = free_inflight_node(self._nodes.values(), self._config.pods_per_node)
            if node is None:
                pool = self._pool_with_room()
                if pool is None:
                    left = True
                    continue
                node = self._launch(now, pool)
            nominate(pod, node)
        if left and self._retry_handle is None:
            self._retry_handle = self._queue.schedule(
                now + self._config.provisioning_retry_s, PRIORITY_CONTROL, self._retry
            )

    def _retry(self, now: float) -> None:
        """Pending pods requeue every 10 s (provisioning/controller.go) and trigger a new batch."""
        self._retry_handle = None
        if self._pods.pending_pods():
            self.trigger(now)

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
                now + after, PRIORITY_CLUSTER, partial(self.interrupt, node)
            )
        self._ensure_disruption_loop(now)
        return node

    def _node_ready(self, node: NodeState, now: float) -> None:
        """Initialized: the pods nominated to it bind (the pod side's job)."""
        node.ready_handle = None
        if node.state != LAUNCHING:
            return
        node.state = NODE_READY
        node.ready_s = now
        self._pods.node_initialized(now, node)

    # -- spot interruption --------------------------------------------------------------
    def interrupt(self, node: NodeState, now: float) -> None:
        """Spot notice: Karpenter deletes the NodeClaim at once; EC2 reclaims at +notice.

        aws/karpenter-provider-aws pkg/controllers/interruption: no budget, no
        pre-spin. Ready pods get min(grace, notice) to finish.
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
        self._pods.evict(now, node, now + min(cfg.termination_grace_s, cfg.spot_notice_s))

    def _node_gone(self, node: NodeState, now: float) -> None:
        """The instance is terminated: billing stops, pods still on it are lost."""
        node.gone_handle = None
        self._close(now, node)
        self._pods.node_lost(now, node)

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

    # -- disruption (empty-node consolidation only) -------------------------------------
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
