"""How many placeholder ("balloon") pods to keep, so GPU nodes start early (pure).

A GPU node takes longer to arrive than the pod on it takes to start; pending
low-priority pause pods shaped like a vLLM pod make Karpenter provision
nodes that real vLLM pods then take at once. The count covers the forecast
one *node* lead time ahead beyond the replicas already asked for, bounded by
``maxReplicas``; it follows the forecast down at once and holds without a
usable forecast.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from decision.policy import DemandForecast, ReplicaCapacity
from decision.settings import ScalerSettings

__all__ = ["BalloonPlan", "plan_balloons"]


@dataclass(frozen=True)
class BalloonPlan:
    """Balloon replicas to set, why, and the replicas the forecast needs."""

    replicas: int
    reason: str  # "off", "forecast", "covered", "no_forecast", "no_capacity"
    needed_replicas: int | None = None


def _needed(forecast: DemandForecast, capacity: ReplicaCapacity) -> float | None:
    terms: list[float] = []
    cap_tokens, cap_requests = capacity.tokens_per_s, capacity.requests_per_s
    # what the forecast term sizes for: the upper quantile or the recent days' peak
    upper_tokens = forecast.planned_tokens_per_s
    planned = forecast.planned_requests_per_s
    if cap_tokens and cap_tokens > 0 and upper_tokens is not None and math.isfinite(upper_tokens):
        terms.append(max(0.0, upper_tokens) / cap_tokens)
    if cap_requests and cap_requests > 0 and math.isfinite(planned):
        terms.append(max(0.0, planned) / cap_requests)
    return max(terms) if terms else None


def plan_balloons(
    *,
    settings: ScalerSettings,
    forecast: DemandForecast | None,
    capacity: ReplicaCapacity,
    ready_replicas: int,
    desired_replicas: int,
    current_balloons: int,
) -> BalloonPlan:
    """Balloon count for one ScaledObject.

    ``forecast`` must be for ``now + settings.node_lead_time_seconds``;
    ``desired_replicas`` is the policy's current answer.
    """
    if not settings.prewarm or settings.forecast == "off":
        return BalloonPlan(0, "off")
    current = max(0, current_balloons)
    if forecast is None or not math.isfinite(forecast.upper_requests_per_s):
        return BalloonPlan(current, "no_forecast")
    # below one request expected over the node lead time there is nothing
    # to pre-warm for (the policy's wake bar): a band's tail or one stray
    # request on a past day would otherwise round up to a node
    expected = forecast.expected_requests
    needed = _needed(forecast, capacity) if expected >= 1.0 else 0.0
    if needed is None:
        return BalloonPlan(current, "no_capacity")
    needed_replicas = min(settings.max_replicas, max(0, math.ceil(needed - 1e-9)))
    base = max(0, ready_replicas, desired_replicas)
    room = max(0, settings.max_replicas - base)
    excess = max(0, needed_replicas - base)
    balloons = min(excess, room)
    return BalloonPlan(balloons, "forecast" if balloons else "covered", needed_replicas)
