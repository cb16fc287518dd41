"""A study's first trials: the deployed settings, then their neighbours.

TPE's first draws are random, and a knob that decides feasibility in a
narrow band is rarely drawn there; seeding with the user's ScaledObject and
one step either way on each knob that sizes the fleet makes the search
always know the ground next to what is deployed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from decision.settings import METADATA_KEYS, metadata_value
from simulations.autoscaling.scaledobject import ScaledObjectSpec
from simulations.tune.manifest import (
    HPA_SCALE_DOWN_WINDOW,
    TRIGGER_SCALE_DOWN_WINDOW,
    hpa_scale_down_s,
)
from simulations.tune.search import FLOOR_KEYS, LEAD_MODE, Param, format_value, param_high

__all__ = ["NEIGHBOUR_SHARE", "neighbour_params", "seed_params", "sizing_keys"]

_WINDOW_REPLICAS_KEY = re.compile(r"^triggers\.\d+\.desiredReplicas$")
"""A cron trigger's replicas: a floor inside its window."""
_TARGET_KEY = re.compile(r"^(targetWaitingPerReplica|targetKvCacheUsage|triggers\.\d+\.threshold)$")
"""Per-replica targets: prescaler's queue and KV-cache terms, each KEDA
trigger's ``threshold`` (a cron trigger has none)."""

NEIGHBOUR_SHARE = 5
"""At most one trial in this many of a study's budget is a seeded neighbour,
so the sampler keeps most of the budget."""

_RELATIVE_STEP = 0.1
"""A neighbour's move on a continuous target: 10 % of its value (what a
person tries next: 0.5 -> 0.45 or 0.55), at least one grid step."""


def seed_params(
    base: ScaledObjectSpec,
    space: Sequence[Param],
    max_replicas: int,
    knobs: Mapping[str, str | None] | None = None,
) -> dict[str, Any] | None:
    """The search parameters that reproduce ``base``'s own trigger settings
    (the user's ScaledObject, or the shipped defaults), for the study's first
    trial: the search starts from what is deployed rather than a random draw,
    and the report can say whether tuning beat it. A prescaler key the
    metadata leaves out is seeded with its default, which is what runs.
    Keys off the search grid are left out (the sampler picks them); None
    when nothing maps. ``knobs`` holds the base manifest's value of each
    dotted (manifest) key. Beside prescaler's trigger, whose
    ``scaleDownStabilizationSeconds`` is the one scale-in wait searched
    (the HPA's window is derived 0), the trigger's window is seeded with
    both windows as written added up: the wait the ScaledObject ran with."""
    trig = base.prescaler_trigger or base.trigger
    meta, settings = trig.metadata, trig.settings
    folds = base.prescaler_trigger is not None and all(
        q.key != HPA_SCALE_DOWN_WINDOW for q in space
    )
    picked: dict[str, Any] = {}
    for p in space:
        # picked holds optuna's values (an int for an int knob), ``when`` a string
        if not p.applies(picked):
            continue
        if "." in p.key:
            raw: str | None = (knobs or {}).get(p.key)
        elif p.key == LEAD_MODE:
            raw = "auto" if meta.get(LEAD_MODE, "auto") == "auto" else "fixed"
        elif p.key == f"{LEAD_MODE}:fixed":
            raw = meta.get(LEAD_MODE)
        else:
            raw = meta.get(p.key)
            if raw is None and p.key in FLOOR_KEYS:
                raw = str(base.keda.min_replica_count)  # the floor KEDA holds
            elif raw is None and settings is not None and p.key in METADATA_KEYS:
                # left out of the metadata: the trigger runs with its default
                raw = metadata_value(settings, p.key)
        if raw is None:
            continue
        if p.key == TRIGGER_SCALE_DOWN_WINDOW and folds:
            # the HPA's window is derived (0) in every trial: the two waits
            # as written, one after the other, are the trigger's one
            raw = format_value(float(raw) + hpa_scale_down_s(base))
        value = _on_grid(p, raw, max_replicas)
        if value is not None and _above_floor(p, value, picked):
            picked[p.key] = value
    return picked or None


def _above_floor(p: Param, value: Any, picked: Mapping[str, Any]) -> bool:
    """Whether ``value`` lies above the key ``p`` is searched above (a cron
    window at or below the floor is left to the sampler, which draws above it)."""
    low = p.floor_in(picked)
    return low is None or float(value) >= low


def sizing_keys(space: Sequence[Param]) -> list[str]:
    """The searched keys that size the fleet, in seeding order: the floor,
    each cron window's replicas (the floor inside the window, so a cron
    side knows the ground next to its window as the other sides know theirs
    next to their floor), then the per-replica targets in the space's order."""
    floors = [p.key for p in space if p.key in FLOOR_KEYS]
    windows = [p.key for p in space if _WINDOW_REPLICAS_KEY.match(p.key)]
    targets = [p.key for p in space if _TARGET_KEY.match(p.key)]
    return floors + windows + targets


def neighbour_params(
    seed: Mapping[str, Any],
    space: Sequence[Param],
    max_replicas: int,
    limit: int,
) -> list[tuple[str, dict[str, Any]]]:
    """Up to ``limit`` settings one step from ``seed``, each labelled
    ``key-`` or ``key+``: for each sizing key (:func:`sizing_keys`) the seed
    with that key moved down, then up (an integer by one, a float by
    :data:`_RELATIVE_STEP` of its value on the grid), inside the key's range.
    A key the seed leaves to the sampler has no neighbours, nor a window's
    replicas at the floor. A move that switches a conditional key off drops
    it; one that switches it on leaves it to the sampler."""
    by_key = {p.key: p for p in space}
    out: list[tuple[str, dict[str, Any]]] = []
    for key in sizing_keys(space):
        if key not in seed:
            continue
        p = by_key[key]
        for sign, label in ((-1, "-"), (1, "+")):
            value = _moved(p, seed[key], sign, max_replicas)
            if value is None or not _above_floor(p, value, seed):
                continue
            if len(out) >= limit:
                return out
            out.append((key + label, _consistent({**seed, key: value}, space)))
    return out


def _moved(p: Param, value: Any, sign: int, max_replicas: int) -> Any:
    """``value`` one step along ``sign`` on ``p``'s grid, or None off its range."""
    high = param_high(p, max_replicas)
    if p.kind == "int":
        moved_int = int(value) + sign * int(p.step or 1)
        return moved_int if p.low <= moved_int <= high else None
    if p.kind != "float":
        return None
    x = float(value)
    target = x * (1.0 + sign * _RELATIVE_STEP)
    step = p.step
    if step is None:
        moved = target
    else:
        k = round((target - p.low) / step)
        if abs(p.low + k * step - x) < step / 2:  # the 10 % fell inside one step
            k = round((x - p.low) / step) + sign
        moved = float(f"{p.low + k * step:.10g}")
    if not p.low <= moved <= high or math.isclose(moved, x):
        return None
    return moved


def _consistent(params: Mapping[str, Any], space: Sequence[Param]) -> dict[str, Any]:
    """``params`` without the keys whose condition no longer holds (or that
    a moved floor now covers)."""
    kept: dict[str, Any] = {}
    for p in space:
        if p.key not in params:
            continue
        if not p.applies(kept) or not _above_floor(p, params[p.key], kept):
            continue
        kept[p.key] = params[p.key]
    return kept


def _on_grid(p: Param, raw: str, max_replicas: int) -> Any:
    """``raw`` as the value optuna's distribution for ``p`` holds, or None."""
    if p.kind == "choice":
        return raw if raw in p.choices else None
    try:
        x = float(raw)
    except ValueError:
        return None
    if not p.low <= x <= param_high(p, max_replicas):
        return None
    step = p.step or (1.0 if p.kind == "int" else None)
    if step is not None:
        k = (x - p.low) / step
        if abs(k - round(k)) > 1e-9:
            return None
    return int(x) if p.kind == "int" else x
