"""The hindsight schedule: the cheapest replica schedule perfect foresight could run.

The yardstick every set-up is measured against. It knows the whole future
but still orders each replica one start-up ahead and pays for its node from
launch to the billed tail after release, so a gap in need is held when
shorter than ``lead_s + tail_s``; over all capacity levels that is one
grey-scale closing of the need, O(steps). :func:`calibrate` bisects the
capacity factor until the replayed attainment meets the target. Pure: the
replay is handed in, so this module runs no simulation and reads no file.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy.ndimage import maximum_filter1d, minimum_filter1d

__all__ = [
    "Calibrated",
    "Schedule",
    "Trial",
    "calibrate",
    "from_need",
    "hold_short_gaps",
    "need_from_load",
    "plan",
]

IntArray = NDArray[np.int64]

FACTOR_RANGE = (0.25, 2.0)
"""Capacity factors :func:`calibrate` searches: from a fleet four times the
fluid need (enough to meet any target the idle fleet can) to one loaded at
twice its sustainable rate (past which every step queues)."""
FACTOR_TOL = 0.005
"""Bisection stops once the bracket on the factor is this narrow: the fleet
it implies changes by under one replica in 200."""


def need_from_load(load: NDArray[np.float64], factor: float) -> IntArray:
    """Replicas Ready each step needs: ``load`` (replicas' worth of demand at
    the sustainable rate) over ``factor``, rounded up; a step without demand
    needs none."""
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"factor must be a finite number > 0, got {factor!r}")
    arr = np.asarray(load, dtype=np.float64)
    if arr.ndim != 1 or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError("load must be a 1-D array of finite numbers >= 0")
    return np.ceil(arr / factor - 1e-9).clip(min=0).astype(np.int64)


def _steps(seconds: float, step_s: float) -> int:
    """Whole steps spanning at least ``seconds`` (0 for 0)."""
    return max(0, math.ceil(seconds / step_s - 1e-9))


def _running(x: IntArray, steps: int, *, ahead: bool, low: bool = False) -> IntArray:
    """The running max (``low``: min) of ``x`` over ``[i, i + steps]`` when
    ``ahead``, else over ``[i - steps, i]``; zeros beyond both ends."""
    if steps <= 0 or x.size == 0:
        return x.copy()
    size = steps + 1
    origin = -(size // 2) if ahead else (size - 1) // 2
    pad = np.zeros(size, dtype=np.int64)
    padded = np.concatenate([pad, x, pad])
    run = minimum_filter1d if low else maximum_filter1d
    out = run(padded, size=size, mode="constant", cval=0, origin=origin)
    return np.asarray(out[size : size + x.size], dtype=np.int64)


def hold_short_gaps(need: IntArray, gap_steps: int) -> IntArray:
    """``need`` with every level held through its gaps of fewer than
    ``gap_steps`` steps: the grey-scale closing of ``need`` by a flat window
    of ``gap_steps`` (a running max behind, then a running min ahead); a
    level's gap at either end of the series, before its first need or after
    its last, is never filled."""
    x = np.asarray(need, dtype=np.int64)
    if gap_steps <= 1 or x.size == 0:
        return x.copy()
    w = gap_steps - 1
    pad = np.zeros(w + 1, dtype=np.int64)
    padded = np.concatenate([x, pad])  # the running min ahead sees the trailing zeros
    dilated = _running(padded, w, ahead=False)
    closed = _running(dilated, w, ahead=True, low=True)[: x.size]
    return np.maximum(closed, x)


def _ahead_max(x: IntArray, steps: int) -> IntArray:
    """``max(x[i .. i + steps])`` for each ``i`` (the series ends with zeros)."""
    return _running(x, steps, ahead=True)


def _behind_max(x: IntArray, steps: int) -> IntArray:
    """``max(x[i - steps .. i])`` for each ``i`` (zeros before the series)."""
    return _running(x, steps, ahead=False)


@dataclass(frozen=True)
class Schedule:
    """One replica schedule on a grid of ``step_s``: step ``i`` covers
    ``[i * step_s, (i + 1) * step_s)`` of the window."""

    step_s: float
    factor: float
    lead_s: float
    tail_s: float
    need: IntArray
    """Replicas Ready each step needs at ``factor``."""
    ready: IntArray
    """Replicas the schedule holds Ready (``need`` held through short gaps)."""
    orders: IntArray
    """The Deployment's replicas each step: ``ready`` ordered ``lead_s`` ahead."""
    billed: IntArray
    """Nodes billed each step: ``orders`` kept ``tail_s`` after a release."""
    gpus_per_replica: float = 1.0

    @property
    def replica_hours(self) -> float:
        """Billed replica-hours over the window (the model's, before replay)."""
        return float(self.billed.sum()) * self.step_s / 3600.0

    @property
    def gpu_hours(self) -> float:
        return self.replica_hours * self.gpus_per_replica

    @property
    def starts(self) -> int:
        """Replicas ordered from t=0 on (each rise of ``orders``)."""
        if self.orders.size < 2:
            return 0
        return int(np.clip(np.diff(self.orders), 0, None).sum())


def plan(
    load: NDArray[np.float64],
    *,
    step_s: float,
    lead_s: float,
    tail_s: float,
    factor: float = 1.0,
    max_replicas: int | None = None,
    gpus_per_replica: float = 1.0,
) -> Schedule:
    """The cheapest schedule that holds ``ceil(load / factor)`` Ready each
    step, ordering each replica ``lead_s`` ahead and billed ``tail_s`` after
    it leaves (see the module docstring); ``max_replicas`` caps every step."""
    for name, value in (("step_s", step_s), ("lead_s", lead_s), ("tail_s", tail_s)):
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if step_s <= 0:
        raise ValueError(f"step_s must be > 0, got {step_s!r}")
    need = need_from_load(load, factor)
    if max_replicas is not None:
        need = np.minimum(need, max_replicas)
    return from_need(
        need, step_s=step_s, lead_s=lead_s, tail_s=tail_s, factor=factor,
        gpus_per_replica=gpus_per_replica,
    )  # fmt: skip


def from_need(
    need: IntArray,
    *,
    step_s: float,
    lead_s: float,
    tail_s: float,
    factor: float = math.nan,
    gpus_per_replica: float = 1.0,
) -> Schedule:
    """The cheapest schedule holding ``need`` Ready each step (:func:`plan`
    once the need is known)."""
    need = np.asarray(need, dtype=np.int64)
    lead = _steps(lead_s, step_s)
    tail = _steps(tail_s, step_s)
    ready = hold_short_gaps(need, _steps(lead_s + tail_s, step_s))
    orders = _ahead_max(ready, lead)
    billed = _behind_max(orders, tail)
    return Schedule(step_s, factor, lead_s, tail_s, need, ready, orders, billed, gpus_per_replica)


@dataclass(frozen=True)
class Trial:
    """One replay of a schedule: its factor, attainment and model cost."""

    factor: float
    attainment: float
    replica_hours: float


@dataclass(frozen=True)
class Calibrated:
    """The calibrated schedule and what its replay gave."""

    schedule: Schedule
    attainment: float
    """The replayed attainment of ``schedule``."""
    target: float
    met: bool
    trials: tuple[Trial, ...]


Replay = Callable[[Schedule], tuple[float, float | None]]
"""A schedule's replayed (attainment, GPU-hours) (None: not measured)."""


def replay_need(
    seen: dict[bytes, tuple[float, float | None]],
    replay: Replay,
    trials: list[Trial],
    results: list[tuple[Schedule, float]],
) -> Callable[[Schedule], float]:
    """A schedule's replayed attainment, each distinct schedule replayed once
    and every attempt recorded in ``trials`` and ``results``."""

    def attempt(sched: Schedule) -> float:
        key = sched.orders.tobytes()
        if key not in seen:
            seen[key] = replay(sched)
        att, _gpu_hours = seen[key]
        trials.append(Trial(sched.factor, att, sched.replica_hours))
        results.append((sched, att))
        return att

    return attempt


def _refine(
    meets: Schedule,
    fails: Schedule,
    rebuild: Callable[[IntArray], Schedule],
    attempt: Callable[[Schedule], float],
    target: float,
    good_enough: Callable[[float], bool],
    max_replays: int,
) -> None:
    """Between a schedule that meets the target and a cheaper one that does
    not: give the first ``m`` of the steps where they differ the cheaper
    one's need, bisecting on ``m``."""
    diff = np.flatnonzero(fails.need < meets.need)
    if diff.size == 0:
        return
    order = diff  # in time order: a level cut from the start of its run is not held back in
    lo, hi = 0, int(order.size)  # lo meets, hi fails
    for _ in range(max_replays):
        if hi - lo <= 1:
            return
        mid = (lo + hi) // 2
        need = meets.need.copy()
        need[order[:mid]] = fails.need[order[:mid]]
        sched = rebuild(need)
        att = attempt(sched)
        if att >= target:
            lo = mid
            if good_enough(att):
                return
        else:
            hi = mid


def calibrate(
    build: Callable[[float], Schedule],
    replay: Replay,
    target: float,
    *,
    rebuild: Callable[[IntArray], Schedule] | None = None,
    tol_points: float = 0.2,
    max_replays: int = 14,
    factors: tuple[float, float] = FACTOR_RANGE,
) -> Calibrated:
    """The cheapest schedule ``build(factor)`` whose ``replay`` meets ``target``.

    Attainment falls as the factor rises, so the factor is bisected until a
    schedule meets the target by at most ``tol_points``, the bracket is under
    :data:`FACTOR_TOL`, or ``max_replays`` ran. A replica over a burst moves
    attainment by more than that, so with ``rebuild`` the last bracket is then
    refined step by step, earliest first. Identical schedules replay once. None
    meeting the target: the closest (densest among equals), ``met`` False."""
    if not 0.0 <= target <= 1.0:
        raise ValueError(f"target must be within [0, 1], got {target!r}")
    seen: dict[bytes, tuple[float, float | None]] = {}
    trials: list[Trial] = []
    results: list[tuple[Schedule, float]] = []

    record = replay_need(seen, replay, trials, results)

    def attempt(f: float) -> float:
        return record(build(f))

    def good_enough(att: float) -> bool:
        return target <= att <= target + tol_points / 100.0

    lo, hi = factors  # invariant: lo meets (or is the floor), hi fails (or is the ceiling)
    f = min(max(1.0, lo), hi)
    att = attempt(f)
    if att >= target:
        lo = f
        if not good_enough(att):
            probe = hi
            if attempt(probe) >= target:
                lo = probe
            else:
                hi = probe
    else:
        hi = f
        if attempt(lo) < target:
            hi = lo  # the densest fleet searched fails: nothing to bisect
    while hi - lo > FACTOR_TOL and len(trials) < max_replays:
        if any(good_enough(a) for _, a in results):
            break
        mid = 0.5 * (lo + hi)
        if attempt(mid) >= target:
            lo = mid
        else:
            hi = mid
    meeting = [(s, a) for s, a in results if a >= target]
    if rebuild is not None and meeting and not any(good_enough(a) for _, a in meeting):
        best = min(meeting, key=lambda r: r[0].replica_hours)[0]
        failing = [s for s, a in results if a < target and s.replica_hours < best.replica_hours]
        if failing:
            near = max(failing, key=lambda s: s.replica_hours)
            _refine(best, near, rebuild, replay_need(seen, replay, trials, results),
                    target, good_enough, max_replays)  # fmt: skip
            meeting = [(s, a) for s, a in results if a >= target]
    if meeting:
        sched, att = min(meeting, key=lambda r: (r[0].replica_hours, -r[1]))
        return Calibrated(sched, att, target, True, tuple(trials))
    # a replay stopped early counts 0: among equals the densest came closest
    sched, att = max(results, key=lambda r: (r[1], r[0].replica_hours))
    return Calibrated(sched, att, target, False, tuple(trials))
