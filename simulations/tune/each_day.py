"""Judging a tuning part day by day: a setting must meet the target on each.

A setting chosen on the sum of its days can fit one day's bursts and miss
the next day's; asking for each day's target (that day's idle ceiling times
the target) rejects it before the held-back part sees it. The whole part's
target is still asked too, so the early stops stay as safe as without it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from engine.profile_types import Profile
from simulations.runner import met_slo
from simulations.simulation import SimResult
from simulations.traffic import Workload
from simulations.tune.search import slice_workload, slo_ceiling

__all__ = ["DAY_S", "day_starts", "day_targets", "judged_days", "part_attainments"]

DAY_S = 86_400.0


def day_starts(duration_s: float, day_s: float = DAY_S) -> tuple[float, ...]:
    """Where each day of a part spanning ``duration_s`` starts (0 first); a
    last piece shorter than half a day joins the day before, so no day is
    judged on a few hours' requests."""
    if not duration_s > 0 or not day_s > 0:
        raise ValueError(f"need a positive span and day, got {duration_s!r}, {day_s!r}")
    starts = [0.0]
    while starts[-1] + day_s < duration_s:
        starts.append(starts[-1] + day_s)
    if len(starts) > 1 and duration_s - starts[-1] < day_s / 2:
        starts.pop()
    return tuple(starts)


def day_targets(
    workload: Workload,
    starts: Sequence[float],
    target: float,
    profile: Profile | str,
    slo_ttft_s: float,
    margin: float = 0.0,
) -> tuple[tuple[float, float], ...]:
    """(start, attainment to meet) per day: ``target`` times the day's own idle
    ceiling, plus ``margin`` points, at most 1."""
    ends = [*starts[1:], workload.duration_s]
    out: list[tuple[float, float]] = []
    for lo, hi in zip(starts, ends, strict=True):
        day = slice_workload(workload, lo, hi)
        ceiling = slo_ceiling(day, profile, slo_ttft_s)
        out.append((float(lo), min(1.0, target * ceiling + margin / 100.0)))
    return tuple(out)


def judged_days(
    workload: Workload,
    target: float,
    profile: Profile | str,
    slo_ttft_s: float,
    margin: float = 0.0,
) -> tuple[tuple[tuple[float, float], ...], str | None]:
    """(each day's (start, bar), None), or ((), why) when ``workload`` holds
    fewer than two days to judge apart (:func:`day_starts`): it is then
    judged whole, and the caller says so."""
    starts = day_starts(workload.duration_s)
    if len(starts) < 2:
        return (), (
            f"the tuning part spans {workload.duration_s / 3600:.1f} h, less than a day and a "
            "half, so it is judged whole, not day by day"
        )
    return day_targets(workload, starts, target, profile, slo_ttft_s, margin), None


def part_attainments(
    result: SimResult, arrival_s: np.ndarray, starts: Sequence[float]
) -> tuple[float, ...]:
    """Attainment of the requests arriving in each stretch from ``starts[k]``
    to the next start (the last to the end); a stretch with no request
    attains 1, as a run with none does."""
    bounds = np.searchsorted(arrival_s, np.asarray(starts, dtype=float), side="left")
    ok = met_slo(result)
    edges = [*bounds.tolist(), len(arrival_s)]
    out: list[float] = []
    for lo, hi in itertools.pairwise(edges):
        n = hi - lo
        out.append(1.0 if n == 0 else float(np.count_nonzero(ok[lo:hi])) / n)
    return tuple(out)
