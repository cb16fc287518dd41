"""What one simulated run takes and gives: its knobs, its result, request outcomes, its errors.

Apart from :mod:`simulations.simulation` (which re-exports all of it) so the
data that describes a run reads without the event loop around it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from decision.tracker_data import TrackerConfig
from engine.profile_types import StartupTimes
from engine.validate import int_at_least

__all__ = [
    "COMPLETED",
    "DEFAULT_INITIAL_REPLICAS",
    "PENDING",
    "REJECTED",
    "REPLAY_FLAGS",
    "TIMED_OUT",
    "ConservationError",
    "SimConfig",
    "SimResult",
    "SloBudgetExceeded",
    "check_outage",
    "replay_config",
]

DEFAULT_INITIAL_REPLICAS = 1
"""``simulate``'s opening fleet without history or a stated count: a window
at the trace's start is a fresh deployment, which holds its minimum."""

PENDING, COMPLETED, TIMED_OUT, REJECTED = 0, 1, 2, 3
"""How a request ended (``SimResult.status``); PENDING only while a run lasts."""


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
    startup: StartupTimes | None = None
    """Cold-start phases replacing the profile's own (None: the profile's); the
    cluster, the warm-up and the oracle's look-ahead all use them."""
    initial_replicas: int | None = None
    """The fleet Ready at t=0 for every autoscaled policy (clamped into each
    ScaledObject's bounds). ``simulate`` sizes it from the traffic before the
    window (:data:`DEFAULT_INITIAL_REPLICAS` at the trace's start); None keeps
    the older hindsight rule for callers that state none: what the window's
    opening demand needs."""
    capacity_error: float = 0.0
    """How wrong the predictive scaler's per-replica capacity is: it believes
    the profile's capacity x (1 + capacity_error); the engine runs the truth."""
    learned_capacity: bool = False
    """The predictive tracker sizes with the capacity it learns at saturated
    moments (what it does live without ``profile``), not the profile's."""
    prometheus_outage: tuple[float, float] | None = None
    """(start_s, end_s): Prometheus is down over ``[start_s, end_s)`` of the
    run (seconds from the window's start): it scrapes nothing and every query
    fails (:mod:`simulations.scrape`), so KEDA's ``prometheus`` triggers
    error and prescaler's tracker gets no reading. None: always up."""
    refit_interval_s: float = field(default=TrackerConfig.refit_interval_s, repr=False)
    """How often a prescaler trigger's tracker refits its forecaster: the
    scaler's ``--refit-seconds`` (``decision.tracker_data.TrackerConfig``'s
    default). ``prescaler tune`` screens trials at a longer one and confirms
    the chosen setting at this (:mod:`simulations.tune.screening`). Out of the
    repr, which studies' fingerprints hash: a side without a tracker does not
    depend on it, and one with a tracker adds it where it is not the default."""

    def __post_init__(self) -> None:
        for name in (
            "slo_ttft_s", "timeout_s", "scrape_interval_s", "rate_window_s", "refit_interval_s",
        ):  # fmt: skip
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if self.rate_window_s < 2 * self.scrape_interval_s:
            raise ValueError("rate_window_s must span at least two scrape intervals")
        if not int_at_least(self.seed, 0):
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")
        if self.initial_replicas is not None and not int_at_least(self.initial_replicas, 1):
            raise ValueError(
                f"initial_replicas must be an integer >= 1, got {self.initial_replicas!r}"
            )
        e = self.capacity_error
        if not (isinstance(e, int | float) and math.isfinite(e) and e > -1.0):
            raise ValueError(f"capacity_error must be a finite number > -1, got {e!r}")
        if self.prometheus_outage is not None:
            check_outage(self.prometheus_outage)
        for at_s, node_id in self.interruptions:
            if not math.isfinite(at_s) or not isinstance(node_id, int) or node_id < 0:
                raise ValueError(
                    f"interruptions are (finite time_s, node_id >= 0), got {(at_s, node_id)!r}"
                )


def check_outage(window: tuple[float, float]) -> None:
    """A Prometheus outage window: two finite seconds, 0 <= start < end."""
    if not (isinstance(window, tuple) and len(window) == 2):
        raise ValueError(f"prometheus_outage must be (start_s, end_s), got {window!r}")
    start, end = window
    for value in window:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"prometheus_outage must be two numbers, got {window!r}")
    if not (math.isfinite(start) and math.isfinite(end) and 0.0 <= start < end):
        raise ValueError(
            f"prometheus_outage must satisfy 0 <= start < end (finite seconds), got {window!r}"
        )


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


REPLAY_FLAGS = (
    "slo_ttft_s", "timeout_s", "spot", "seed", "scrape_interval_s", "rate_window_s",
    "refit_interval_s",
)  # fmt: skip
"""The :class:`SimConfig` fields every replay command (``simulate``, ``tune``)
takes from its flags, under the same names."""


def replay_config(knobs: object, **more: Any) -> SimConfig:
    """A command's :class:`SimConfig` from its options' :data:`REPLAY_FLAGS`,
    stated once so ``simulate`` and ``tune`` cannot read the same flags two
    ways; ``more`` adds what one command alone states (e.g. an outage window)."""
    return SimConfig(**{name: getattr(knobs, name) for name in REPLAY_FLAGS}, **more)
