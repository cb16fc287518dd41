"""What a simulation is told rather than shown: bounds, opening fleet, capacity belief, lead time.

The inputs production would have to state too (``--max-replicas``,
``--initial-replicas``, ``--capacity-error``, ``--learned-capacity``, the
lead-time flags), parsed and validated once for ``simulate`` and ``tune``.
:func:`window_start` reads the traffic before a window for the tracker's
backfill and the opening fleet; nothing looks inside the window. Without a
capacity or lead-time flag a run is the profile's, bit for bit.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from engine.profile_types import Profile, StartupTimes
from engine.validate import int_at_least
from simulations.backfill import BACKFILL_S, DemandHistory, scraped_history
from simulations.cli_types import count_flag, number_flag
from simulations.lead_time import LEAD_TIME_PRESETS, resolve_startup, with_startup
from simulations.policies import DEFAULT_MAX_REPLICAS, REFRESH_S, opening_fleet
from simulations.sim_types import DEFAULT_INITIAL_REPLICAS, SimConfig
from simulations.traffic import TrafficOptions, Workload, load_workload

__all__ = [
    "SimInputs",
    "WindowStart",
    "add_sim_input_flags",
    "sim_inputs_from_args",
    "start_after",
    "window_start",
]


@dataclass(frozen=True)
class SimInputs:
    """The stated inputs (see the module docstring); defaults change nothing."""

    max_replicas: int = DEFAULT_MAX_REPLICAS
    initial_replicas: int | None = None
    capacity_error: float = 0.0
    learned_capacity: bool = False
    lead_time_preset: str | None = None
    node_ready_s: float | None = None
    image_pull_s: float | None = None
    model_load_s: float | None = None

    def __post_init__(self) -> None:
        bound = self.max_replicas
        if not int_at_least(bound, 1):
            raise ValueError(f"max_replicas must be an integer >= 1, got {bound!r}")
        if self.lead_time_preset is not None and self.lead_time_preset not in LEAD_TIME_PRESETS:
            raise ValueError(
                f"unknown lead-time preset {self.lead_time_preset!r} "
                f"(known: {', '.join(LEAD_TIME_PRESETS)})"
            )
        # the rest is validated where it lands (SimConfig, resolve_startup)
        SimConfig(initial_replicas=self.initial_replicas, capacity_error=self.capacity_error)

    def startup(self, profile: Profile) -> StartupTimes | None:
        """The run's cold start, or None when no lead-time input was given."""
        phases = (self.node_ready_s, self.image_pull_s, self.model_load_s)
        if self.lead_time_preset is None and all(p is None for p in phases):
            return None
        return resolve_startup(
            profile.startup,
            preset=self.lead_time_preset,
            node_ready_s=self.node_ready_s,
            image_pull_s=self.image_pull_s,
            model_load_s=self.model_load_s,
        )

    def apply(self, config: SimConfig, profile: Profile, opening: int | None) -> SimConfig:
        """``config`` with these inputs and the opening fleet (``initial_replicas``
        if stated, else ``opening``; None leaves the hindsight rule of
        :func:`simulations.policies.opening_replicas`) in it."""
        return dataclasses.replace(
            config,
            startup=self.startup(profile),
            initial_replicas=self.initial_replicas
            if self.initial_replicas is not None
            else opening,
            capacity_error=self.capacity_error,
            learned_capacity=self.learned_capacity,
        )


@dataclass(frozen=True)
class WindowStart:
    """What a run starting at a window knows: the tracker's backfill (None
    without history or with backfill off) and the opening fleet
    (:data:`DEFAULT_INITIAL_REPLICAS` with no traffic before the window)."""

    history: DemandHistory | None
    opening: int


def window_start(
    trace: str | Path,
    traffic: TrafficOptions,
    start_s: float,
    profile: Profile,
    config: SimConfig,
    *,
    backfill: bool = True,
) -> WindowStart:
    """Read the ``BACKFILL_S`` of traffic before ``start_s`` (trace seconds) with
    ``traffic``'s options, ending exactly at ``start_s``: the scraped history
    (:func:`simulations.backfill.scraped_history`) and the fleet it leaves
    (:func:`simulations.policies.opening_fleet`, at ``config``'s lead time)."""
    span = min(BACKFILL_S, float(start_s))
    if span <= 0:
        return WindowStart(None, DEFAULT_INITIAL_REPLICAS)
    prior = load_workload(
        trace, dataclasses.replace(traffic, start_s=float(start_s) - span, duration_s=span)
    )
    return start_after(prior, profile, config, backfill=backfill)


def start_after(
    prior: Workload, profile: Profile, config: SimConfig, *, backfill: bool = True
) -> WindowStart:
    """What a window opening where ``prior`` (the requests before it, on their
    own clock from 0) ends knows: :func:`window_start` once the requests are
    read; ``prescaler tune``'s held-back part passes the tuning part's tail."""
    from decision.tracker_data import TrackerConfig

    history = None
    if backfill and len(prior):
        history = scraped_history(
            prior,
            scrape_interval_s=config.scrape_interval_s,
            rate_window_s=config.rate_window_s,
            bin_s=TrackerConfig(refresh_interval_s=REFRESH_S).step_s,
        )
    opening = opening_fleet(prior, with_startup(profile, config.startup))
    return WindowStart(history, opening)


# ----------------------------------------------------------------- flags
def add_sim_input_flags(p: argparse.ArgumentParser) -> None:
    """The flags of :class:`SimInputs` (``simulate`` and ``tune`` both take them)."""
    g = p.add_argument_group("stated inputs (what production would not know otherwise)")
    g.add_argument("--max-replicas", type=count_flag("--max-replicas"),
                   default=DEFAULT_MAX_REPLICAS,
                   help="maxReplicaCount of the built-in policies (static's cap and the "
                   "oracle's ceiling too; default %(default)s, the shipped GPU "
                   "ScaledObject's); a --scaledobject keeps its own")  # fmt: skip
    g.add_argument("--initial-replicas", type=count_flag("--initial-replicas"), default=None,
                   help="fleet Ready as the window opens, for every autoscaled policy "
                   "(simulate's default: what the traffic in the 5 min before --start "
                   "needs; 1 at the trace's start)")  # fmt: skip
    g.add_argument("--capacity-error", type=number_flag("--capacity-error", -1.0, strict=True),
                   default=0.0,
                   help="predictive: the scaler believes the profile's per-replica "
                   "capacity x (1 + E), e.g. 0.15 or -0.3; the engine runs the truth "
                   "(default 0)")  # fmt: skip
    g.add_argument("--learned-capacity", action="store_true",
                   help="predictive: size with the capacity the tracker learns at "
                   "saturated moments, not the profile's")  # fmt: skip
    g.add_argument("--lead-time-preset", choices=tuple(LEAD_TIME_PRESETS), default=None,
                   help="a replica's cold start on a new node, from public measurements "
                   "(docs/simulator.md; default: the profile's own)")  # fmt: skip
    for flag, what in (
        ("--node-ready-s", "node launch until the GPU is allocatable"),
        ("--image-pull-s", "image pull and extract"),
        ("--model-load-s", "engine start until the readiness probe passes"),
    ):
        g.add_argument(flag, type=number_flag(flag, 0.0, strict=False), default=None,
                       help=f"{what}, s (replaces the profile's or the preset's)")  # fmt: skip


def sim_inputs_from_args(args: argparse.Namespace) -> SimInputs:
    """The parsed flags of :func:`add_sim_input_flags` as one validated value."""
    return SimInputs(
        max_replicas=args.max_replicas,
        initial_replicas=args.initial_replicas,
        capacity_error=args.capacity_error,
        learned_capacity=args.learned_capacity,
        lead_time_preset=args.lead_time_preset,
        node_ready_s=args.node_ready_s,
        image_pull_s=args.image_pull_s,
        model_load_s=args.model_load_s,
    )
