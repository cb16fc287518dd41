"""The fleet's accounting a run reports, kept one way by the simulator and the stack.

Both drive the same cluster model (:class:`simulations.cluster.pods.Cluster`)
and report a :class:`simulations.sim_types.SimResult`, so what they count
from the cluster's events must be counted alike for their results to
compare: Ready replica-seconds and the most Ready replicas from t=0 (the
warm-up before it is not billed), scale-ups written from t=0, spot notices,
and the fleet columns of the timeline sampled at every scrape.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulations.cluster.pods import Cluster

__all__ = ["FleetLedger", "append_row", "fleet_row", "timeline_arrays"]


class FleetLedger:
    """Ready replicas over trace time and the scaling events of one run.

    ``ready``: pods Ready (routed and scraped) now; ``ready_area``: Ready
    replica-seconds from t=0 up to ``ready_since``, when ``ready`` last
    changed; ``ready_max``: the most Ready at once from t=0 on;
    ``scale_ups``: writes of spec.replicas that raised it from t=0 on;
    ``spot_notices``: pods told to stop by a spot interruption notice.
    """

    __slots__ = ("ready", "ready_area", "ready_max", "ready_since", "scale_ups", "spot_notices")

    def __init__(self) -> None:
        self.ready = self.ready_max = self.scale_ups = self.spot_notices = 0
        self.ready_area = self.ready_since = 0.0

    def set_ready(self, now: float, delta: int) -> None:
        """``delta`` pods turned Ready (or stopped being Ready) at ``now``."""
        t0 = max(0.0, self.ready_since)
        if now > t0:
            self.ready_area += self.ready * (now - t0)
        self.ready_since = now
        self.ready += delta
        if now >= 0.0:
            self.ready_max = max(self.ready_max, self.ready)

    def scale(self, cluster: Cluster, now: float, replicas: int) -> None:
        """Write the Deployment's spec.replicas, counting a scale-up from t=0."""
        if replicas > cluster.spec_replicas and now >= 0.0:
            self.scale_ups += 1
        cluster.scale_deployment(now, replicas)

    def result_fields(self, cluster: Cluster, area: float, duration_s: float) -> dict[str, Any]:
        """The fleet's fields of a :class:`simulations.sim_types.SimResult` over a
        window of ``duration_s`` with ``area`` Ready replica-seconds: the mean and
        the most Ready replicas, the scale-ups, and the spot interruptions (the nodes
        the cluster interrupted; the pods told to stop when it counts none)."""
        return {
            "mean_replicas": area / duration_s,
            "max_replicas": self.ready_max,
            "scale_ups": self.scale_ups,
            "spot_interruptions": int(getattr(cluster, "interruptions", self.spot_notices)),
        }

    def pod_stopping(self, reason: str) -> None:
        """A pod was told to stop; a spot interruption notice is counted."""
        if reason == "spot_interruption":
            self.spot_notices += 1


def fleet_row(
    t: float, cluster: Cluster, *, arrived: float, gateway: float, waiting: float, running: float
) -> dict[str, float]:
    """The timeline's fleet columns at ``t`` (a policy adds its own after them)."""
    nodes = cluster.nodes
    return {
        "t": t,
        "arrived": arrived,
        "spec": float(cluster.spec_replicas),
        "status": float(cluster.status_replicas),
        "ready": float(cluster.ready_replicas),
        "nodes_on_demand": float(nodes.on_demand),
        "nodes_spot": float(nodes.spot),
        "nodes_launching": float(nodes.launching),
        "balloons": float(nodes.balloons),
        "gateway": gateway,
        "waiting": waiting,
        "running": running,
        "cost_usd": cluster.cost_usd(t),
    }


def append_row(timeline: dict[str, list[float]], row: dict[str, float]) -> None:
    """Append one sample to each column of ``timeline`` (a column appears when first seen)."""
    for key, value in row.items():
        timeline.setdefault(key, []).append(value)


def timeline_arrays(timeline: dict[str, list[float]]) -> dict[str, np.ndarray]:
    """The sampled columns as the result carries them (float64 arrays)."""
    return {key: np.asarray(values, dtype=np.float64) for key, values in timeline.items()}
