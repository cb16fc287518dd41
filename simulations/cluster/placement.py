"""kube-scheduler's choice of node for one pod, over the cluster's pod and node records.

Split out because both the scheduler pass (:mod:`simulations.cluster.pods`) and
Karpenter's provisioner (:mod:`simulations.cluster.karpenter`) place pods on nodes,
and these ranking rules read best on their own. Plain functions: they only
look at the records they are given (and ``nominate``/``unassign`` edit them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from simulations.cluster.state import (
    LAUNCHING,
    NODE_READY,
    NOMINATED,
    PENDING,
    READY,
    NodeState,
    PodState,
)

__all__ = [
    "balloon_victim",
    "free_inflight_node",
    "free_ready_node",
    "nominate",
    "nominated_balloon",
    "unassign",
]


def free_ready_node(nodes: Iterable[NodeState], pods_per_node: int, now: float) -> NodeState | None:
    """An Initialized node with a free slot: image already there, then pulling,
    then not pulled (kube-scheduler's ImageLocality score); lowest id on ties."""
    best: NodeState | None = None
    best_key: tuple[int, int] = (3, 0)
    for node in nodes:
        if node.state != NODE_READY or len(node.pods) >= pods_per_node:
            continue
        rank = 2 if node.image_at is None else 0 if node.image_at <= now else 1
        key = (rank, node.node_id)
        if key < best_key:
            best, best_key = node, key
    return best


def free_inflight_node(nodes: Iterable[NodeState], pods_per_node: int) -> NodeState | None:
    """A launching node with a free slot, the one due Ready first (lowest id on ties)."""
    best: NodeState | None = None
    for node in nodes:
        if (
            node.state == LAUNCHING
            and len(node.pods) < pods_per_node
            and (best is None or (node.ready_at, node.node_id) < (best.ready_at, best.node_id))
        ):
            best = node
    return best


def balloon_victim(balloons: Iterable[PodState]) -> PodState | None:
    """The bound balloon on a Ready node that started last: kube-scheduler
    preemption's ``pickOneNodeForPreemption`` prefers the latest start time."""
    best: PodState | None = None
    for pod in balloons:
        node = pod.node
        if (
            pod.state == READY
            and node is not None
            and node.state == NODE_READY
            and (best is None or (pod.bound_s, pod.pod_id) > (best.bound_s, best.pod_id))
        ):
            best = pod
    return best


def nominated_balloon(balloons: Iterable[PodState]) -> PodState | None:
    """The balloon nominated to the in-flight node due first (newest balloon on ties)."""
    best: PodState | None = None
    best_key = (math.inf, 0, 0)
    for pod in balloons:
        node = pod.node
        if pod.state == NOMINATED and node is not None:
            key = (node.ready_at, node.node_id, -pod.pod_id)
            if key < best_key:
                best, best_key = pod, key
    return best


def nominate(pod: PodState, node: NodeState) -> None:
    """Reserve a slot on an in-flight node; the pod binds when the node is Initialized."""
    pod.state = NOMINATED
    pod.node = node
    node.pods.append(pod)


def unassign(pod: PodState) -> None:
    """Drop a nomination; the pod is Pending again and must re-trigger Karpenter."""
    if pod.state == NOMINATED and pod.node is not None:
        pod.node.pods.remove(pod)
        pod.node = None
        pod.state = PENDING
        pod.triggered = False
