"""One reading of a ScaledObject's fleet: the only shape a measurement takes
on its way to the decision.

Sources (Prometheus, a direct scrape, the simulator's emulated Prometheus)
produce it; the tracker turns it into the policy's ``Observation``. Defined
here, below both the live scaler and the simulator, so neither converts it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["Reading", "known_rate", "usable"]


@dataclass(frozen=True)
class Reading:
    """What the fleet of one ScaledObject looked like at ``time_s``.

    Rates are per second over the source's rate window (Prometheus) or since
    the previous scrape (direct); ``None`` means "not measurable" (first
    scrape, a restart, a counter absent on that vLLM version, a replica that
    could not be read). Missing data is never reported as zero, which the
    policy would read as an idle fleet.
    """

    time_s: float
    ready_replicas: int
    waiting: float
    """Requests waiting for capacity (where vLLM splits its queue by reason,
    those deferred by LoRA budget or KV transfer are left out: they do not
    ask for replicas); NaN when a replica could not be read or the gauge is
    absent."""
    running: float
    """NaN when the gauge is absent; the readable replicas' sum (a lower
    bound) when some replica could not be read."""
    kv_usage: float | None = None
    arrival_rate_rps: float | None = None
    """Finished requests per second + growth of the requests in the system
    (queue + running) per second: an exact balance over the window that,
    unlike completions alone, rises the moment a burst queues. Requests
    turned away at admission (where vLLM counts them) are included."""
    completion_rate_rps: float | None = None
    """Finished requests per second, less those finished with
    ``finished_reason="error"`` (answered 500; still balanced in arrivals)."""
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    preemptions_per_s: float | None = None
    lead_time_samples_s: tuple[float, ...] = field(default=(), compare=False)
    rejections_per_s: float | None = None
    """Requests turned away at admission (newer vLLM; already inside
    ``arrival_rate_rps``: it is demand)."""
    computed_prompt_tokens_per_s: float | None = None
    """Prompt tokens actually prefilled, not served from a cache (newer vLLM)."""
    kv_cache_tokens: float | None = None
    """One replica's KV cache size in tokens (the mean over replicas that state it)."""
    gateway_rate_rps: float | None = None
    """Requests per second arriving in front of vLLM (``gatewayRateQuery``),
    ``None`` when not configured or the query failed. Unlike every vLLM
    series it exists at zero replicas and counts requests still waiting at
    the gateway for a replica to be ready."""


def known_rate(value: float | None) -> float | None:
    """``value`` if it is a finite rate >= 0, else ``None``: a failed, NaN or
    negative gateway answer is unknown, never zero demand."""
    if value is None or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def usable(reading: Reading) -> bool:
    """Whether the policy can act on ``reading``: it knows the queue or KV
    usage, or the fleet is at zero and the gateway's rate is known (a fleet
    at zero has no vLLM series; the gateway's count is its demand).

    Sources drop readings that know none, so the state sees "no reading"
    and the data's age keeps growing (stale hold, then ``fallbackReplicas``);
    a NaN-only reading would look fresh yet never reach the fallback.
    """
    return (
        math.isfinite(reading.waiting)
        or (reading.kv_usage is not None and math.isfinite(reading.kv_usage))
        or (reading.ready_replicas == 0 and known_rate(reading.gateway_rate_rps) is not None)
    )
