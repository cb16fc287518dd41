"""What each part of a tune starts with, from before that part only.

A tuned setting is judged as it would run in production, where a
ScaledObject starts from what came before: the fleet already running and
the demand prescaler's tracker backfills. Each part (tuning, held back)
gets its opening fleet and its tracker backfill from the requests before
it, by ``simulate``'s rule (:mod:`simulations.sim_inputs`); nothing after a
part's start is read for it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.profile_types import Profile
from simulations.backfill import BACKFILL_S
from simulations.sim_inputs import SimInputs, WindowStart, start_after
from simulations.sim_types import DEFAULT_INITIAL_REPLICAS, SimConfig
from simulations.traffic import TrafficOptions, Workload, load_workload

__all__ = ["PartStarts", "part_starts", "requests_before", "tail_of"]


@dataclass(frozen=True)
class PartStarts:
    """The tuning part's start and the held-back part's (None without one),
    and each part's run configuration with its opening fleet in it."""

    tuning: WindowStart
    held: WindowStart | None
    tuning_config: SimConfig
    held_config: SimConfig


def requests_before(trace: str | Path, traffic: TrafficOptions) -> Workload | None:
    """The trace's requests in the :data:`BACKFILL_S` before ``traffic``'s
    start, drawn with its options (I/O: reads ``trace``); None at the trace's
    start."""
    span = min(BACKFILL_S, float(traffic.start_s))
    if span <= 0:
        return None
    window = dataclasses.replace(traffic, start_s=float(traffic.start_s) - span, duration_s=span)
    return load_workload(trace, window)


def tail_of(before: Workload | None, part: Workload, span_s: float) -> Workload | None:
    """The requests in the ``span_s`` before ``part`` ends, taken from ``part``
    and, when it is shorter, from ``before`` (the requests before it, on their
    own clock ending where ``part`` starts), on a clock from 0; None when
    there is no time before the end."""
    lead = 0.0 if before is None else before.duration_s
    keep = min(float(span_s), lead + part.duration_s)
    if keep <= 0:
        return None
    pieces = [part] if before is None else [before, part]
    offsets = [0.0] if before is None else [-before.duration_s, 0.0]
    arrival = np.concatenate([w.arrival_s + o for w, o in zip(pieces, offsets, strict=True)])
    lo = part.duration_s - keep
    kept = arrival >= lo
    return Workload(
        arrival[kept] - lo,
        np.concatenate([w.prompt_tokens for w in pieces])[kept],
        np.concatenate([w.output_tokens for w in pieces])[kept],
        f"{part.name} (before the cut)",
        keep,
    )


def part_starts(
    before: Workload | None,
    tune_part: Workload,
    held: Workload | None,
    profile: Profile,
    config: SimConfig,
    inputs: SimInputs,
    *,
    backfill: bool = True,
) -> PartStarts:
    """Both parts' starts (see the module docstring): ``before`` holds the
    requests before the tuning part (:func:`requests_before`); ``config``
    already carries ``inputs``' lead time. A stated ``--initial-replicas``
    opens both parts."""

    def start(prior: Workload | None) -> WindowStart:
        if prior is None or prior.duration_s <= 0:
            return WindowStart(None, DEFAULT_INITIAL_REPLICAS)
        return start_after(prior, profile, config, backfill=backfill)

    tuning = start(before)
    held_start = None
    if held is not None and len(held):
        held_start = start(tail_of(before, tune_part, BACKFILL_S))
    return PartStarts(
        tuning,
        held_start,
        inputs.apply(config, profile, tuning.opening),
        inputs.apply(config, profile, (held_start or tuning).opening),
    )
