"""Internal state of :mod:`simulations.cluster.pods`: pod and node records, public snapshots.

Split out so the event logic in :mod:`simulations.cluster.pods` stays short; the
mutable ``PodState``/``NodeState`` records belong to one ``Cluster`` and are
never shared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from simulations.cluster.config import CapacityType, NodePoolSpec
from simulations.events import EventHandle

# Pod states.
PENDING = 0  # unassigned: Karpenter must find it a node
NOMINATED = 1  # waiting for an in-flight node Karpenter launched (or counted) for it
STARTING = 2  # bound: pulling the image, loading the model
READY = 3  # serving (balloons: bound)
TERMINATING = 4  # deletionTimestamp set, still holds its slot
GONE = 5

# Node states.
LAUNCHING = 0  # NodeClaim launched, not yet Initialized (GPU not allocatable)
NODE_READY = 1  # Initialized
DELETING = 2  # NodeClaim deleted (spot notice), instance still running
NODE_GONE = 3


class ClusterListener(Protocol):
    """What the rest of the simulator hears about vLLM pods."""

    def pod_ready(self, now: float, pod_id: int) -> None: ...

    def pod_stopping(self, now: float, pod_id: int, deadline_s: float, reason: str) -> None: ...

    def pod_gone(self, now: float, pod_id: int) -> None: ...


@dataclass(frozen=True)
class ClusterCounts:
    """Live nodes by capacity type (launching and draining included: they bill), and balloons."""

    on_demand: int
    spot: int
    launching: int
    balloons: int

    @property
    def total(self) -> int:
        return self.on_demand + self.spot


@dataclass(frozen=True)
class NodeView:
    """A read-only snapshot of one live node, for reports and tests."""

    node_id: int
    pool: str
    capacity_type: CapacityType
    state: Literal["launching", "ready", "deleting"]
    launch_s: float
    ready_s: float | None
    pods: tuple[int, ...]  # vLLM pods nominated to or bound on it (terminating included)
    balloons: tuple[int, ...]


class PodState:
    """One pod (vLLM or balloon): where it is in its lifecycle and on which node."""

    __slots__ = (
        "balloon",
        "bound_s",
        "created_s",
        "handle",
        "node",
        "pod_id",
        "ready_s",
        "state",
        "triggered",
    )

    def __init__(self, pod_id: int, balloon: bool, created_s: float) -> None:
        self.pod_id = pod_id
        self.balloon = balloon
        self.created_s = created_s
        self.state = PENDING
        self.node: NodeState | None = None
        self.handle: EventHandle | None = None
        self.ready_s = 0.0
        self.bound_s = 0.0
        self.triggered = False


class NodeState:
    """One NodeClaim and its node: lifecycle, the pods it holds, its image cache."""

    __slots__ = (
        "gone_handle",
        "image_at",
        "interrupt_handle",
        "last_pod_event_s",
        "launch_s",
        "node_id",
        "pods",
        "pool",
        "ready_at",
        "ready_handle",
        "ready_s",
        "state",
    )

    def __init__(self, node_id: int, pool: NodePoolSpec, launch_s: float, ready_at: float) -> None:
        self.node_id = node_id
        self.pool = pool
        self.launch_s = launch_s
        self.ready_at = ready_at
        self.ready_s: float | None = None
        self.state = LAUNCHING
        self.pods: list[PodState] = []
        self.image_at: float | None = None
        self.last_pod_event_s: float | None = None
        self.ready_handle: EventHandle | None = None
        self.interrupt_handle: EventHandle | None = None
        self.gone_handle: EventHandle | None = None


STATE_NAMES: dict[int, Literal["launching", "ready", "deleting"]] = {
    LAUNCHING: "launching",
    NODE_READY: "ready",
    DELETING: "deleting",
}


def check_replicas(replicas: int) -> int:
    if isinstance(replicas, bool) or not isinstance(replicas, (int, np.integer)) or replicas < 0:
        raise ValueError(f"replicas must be an int >= 0, got {replicas!r}")
    return int(replicas)


def deletion_rank(pod: PodState) -> tuple[int, float, int]:
    """Sort key: the first pods are the ones the ReplicaSet deletes first."""
    if pod.state in (PENDING, NOMINATED):
        return (0, -pod.created_s, -pod.pod_id)
    if pod.state == STARTING:
        return (1, -pod.created_s, -pod.pod_id)
    return (2, -(pod.bound_s if pod.balloon else pod.ready_s), -pod.pod_id)
