"""What a tune tells its reader to do, in words.

Apart from the report, which lays out figures: this decides what they
amount to. The headline compares each side's chosen setting (the one
printed to paste) on the held-back part, so the ratio a reader acts on is
the ratio of the blocks they copy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simulations.tune.held_back import SideResult, TuneResult

__all__ = [
    "Chosen",
    "chosen_settings",
    "degenerate_note",
    "floor_of",
    "month_cost",
    "printed_sides",
    "targets_line",
    "verdict",
]


@dataclass(frozen=True)
class Chosen:
    """One side's chosen setting as the held-back part scored it."""

    side: str
    floor: int
    """The replicas its ScaledObject never goes below (a running fleet's)."""
    static: bool
    """Its fleet never rose above ``floor`` on either part: a static floor."""
    attainment: float
    cost_usd: float
    seeds_met: int
    """Arrival seeds under which it met the held-back target."""
    seeds: int


def floor_of(manifest: Mapping[str, Any]) -> int:
    """The floor a ScaledObject holds a running fleet at: ``minReplicaCount``,
    or prescaler's ``minReplicas`` when higher (a scale-to-zero one's floor
    once awake)."""
    spec = manifest.get("spec") or {}
    floor = int(spec.get("minReplicaCount", 0) or 0)
    for trig in spec.get("triggers") or []:
        if trig.get("type") in ("external", "external-push"):
            floor = max(floor, int((trig.get("metadata") or {}).get("minReplicas", 0) or 0))
    return floor


def _static(s: SideResult, floor: int) -> bool:
    """Whether the chosen setting's fleet sat at its floor on both parts:
    it never held more replicas than the floor, so its triggers decided
    nothing a fixed count of ``floor`` would not."""
    if floor < 1:
        return False
    runs = [r for r in (s.tuned, s.holdout) if r is not None]
    return bool(runs) and all(int(r.get("max_replicas", floor + 1)) <= floor for r in runs)


def chosen_settings(result: TuneResult) -> list[Chosen]:
    """Every side with a chosen setting, in report order."""
    target = result.target_attainment[1]
    out: list[Chosen] = []
    for s in result.sides:
        if s.holdout is None or s.manifest is None:
            continue
        floor = floor_of(s.manifest)
        seeds = s.holdout_seeds or (
            (0, float(s.holdout["slo_attainment"]), float(s.holdout["cost_usd"])),
        )
        out.append(
            Chosen(
                s.side.name,
                floor,
                _static(s, floor),
                float(s.holdout["slo_attainment"]),
                float(s.holdout["cost_usd"]),
                sum(1 for _, a, _ in seeds if a >= target),
                len(seeds),
            )
        )
    return out


def targets_line(result: TuneResult) -> str:
    """Both targets, explained once: the fraction asked for times each
    part's own ceiling (what an idle fleet attains there)."""
    tuned, held = result.target_attainment
    bar = min(1.0, tuned + result.margin / 100.0)
    margin = (
        f"; a setting is chosen only at {100 * bar:.2f} % or more on the tuning part "
        f"(--margin {result.margin:g})"
        if result.margin
        else ""
    )
    return (
        f"target: TTFT <= {result.slo_ttft_s:g} s for {result.target:g} x what an idle fleet "
        f"attains on each part (a prompt too long to prefill in time misses on any fleet): "
        f"{100 * tuned:.2f} % of requests on the tuning part, {100 * held:.2f} % on the "
        f"held-back part{margin}. 'meets' below is against the held-back one."
    )


def degenerate_note(result: TuneResult) -> str | None:
    """One line naming every side the trace could not tell settings apart
    on: every finished trial scored the same, or the chosen setting is a
    static floor (its triggers never added a replica)."""
    static = {c.side for c in chosen_settings(result) if c.static}
    named: list[str] = []
    for s in result.sides:
        done = {
            (round(t.cost_usd, 6), round(t.attainment, 6)) for t in s.study.trials if t.finished
        }
        finished = sum(1 for t in s.study.trials if t.finished)
        if finished > 1 and len(done) == 1:
            named.append(f"{s.side.name} (every finished trial scored the same)")
        elif s.side.name in static:
            named.append(f"{s.side.name} (its chosen setting never left its floor)")
    if not named:
        return None
    return (
        "degenerate: the trace does not tell settings apart on "
        + ", ".join(named)
        + "; tune on a longer or busier history (--since 7d) before trusting these sides' "
        "choices"
    )


def printed_sides(result: TuneResult) -> list[str]:
    """The sides whose tuned ScaledObject is printed to paste: every side
    with a chosen setting, but the queue-only KEDA side beside the
    queue-and-KV-cache one (the same triggers and one more)."""
    have = [s.side.name for s in result.sides if s.manifest is not None]
    if "keda-queue-kv" in have:
        have = [n for n in have if n != "keda-queue"]
    return have


def _replicas(n: int) -> str:
    return f"{n} replica" if n == 1 else f"{n} replicas"


def month_cost(cost_usd: float, months: float) -> str:
    """A cost over ``months`` as the report prints it (``-`` when not finite)."""
    return f"${cost_usd / months:,.0f}/month" if math.isfinite(cost_usd) else "-"


def _held(c: Chosen, months: float) -> str:
    """Its held-back figures and whether it meets the target, seed by seed."""
    figures = f"{100 * c.attainment:.2f} % at {month_cost(c.cost_usd, months)}"
    if c.seeds == 1:
        return f"{figures}, {'meets' if c.seeds_met else 'misses'} the held-back target"
    return f"{figures}, meets the held-back target under {c.seeds_met} of {c.seeds} arrival seeds"


def verdict(result: TuneResult) -> dict[str, Any]:
    """The headline, as ``--json`` carries it (``verdict``): ``text`` (the
    words printed, about the sides printed to paste), ``chosen_cost_ratio``
    (prescaler's chosen setting over the printed KEDA queue block's, on the
    held-back part: ``keda-queue-kv`` when it was tuned, else ``keda-queue``;
    ``ratio_side`` names it; None unless both have one), ``static_floor`` (the replicas every side's
    chosen setting sat at, when they all did and agree) and
    ``static_sides`` (the sides whose chosen setting is a static floor)."""
    months = result.months[1]
    printed = set(printed_sides(result))
    chosen = [c for c in chosen_settings(result) if c.side in printed]
    by = {c.side: c for c in chosen}
    static = [c for c in chosen if c.static]
    ratio = None
    keda = next((by[k] for k in ("keda-queue-kv", "keda-queue") if k in by), None)
    if "prescaler" in by and keda is not None and keda.cost_usd > 0:
        ratio = round(by["prescaler"].cost_usd / keda.cost_usd, 4)
    floors = {c.floor for c in static}
    floor = (
        next(iter(floors)) if chosen and len(static) == len(chosen) and len(floors) == 1 else None
    )
    lines: list[str] = []
    if not chosen:
        lines.append(
            "no side's setting met the tuning part's target: nothing to paste. Lower "
            "--target, raise --slo-ttft or maxReplicaCount, or tune on a longer history."
        )
    elif len(static) == len(chosen):
        sides = ", ".join(c.side for c in chosen)
        if floor is not None:
            lines.append(
                f"no side beat a static floor of {floor} here: every side's chosen setting "
                f"({sides}) held the fleet at {_replicas(floor)} and its triggers never added "
                "one; the trace is too short or too flat to tell settings apart. Running "
                f"{_replicas(floor)} does as well on this trace; tune on a longer or busier "
                "history before choosing a trigger."
            )
        else:
            met = [c for c in chosen if c.seeds_met == c.seeds]
            cheapest = min(met or chosen, key=lambda c: c.cost_usd)
            which = (
                "The cheapest that met the held-back target"
                if met
                else "None met the held-back target; the cheapest"
            )
            each = ", ".join(f"{c.side} {c.floor}" for c in chosen)
            lines.append(
                f"no side beat a static floor here: each side's chosen setting held the fleet "
                f"at its floor ({each}) and its triggers never added a replica; the trace is "
                f"too short or too flat to tell settings apart. {which}: a floor of "
                f"{cheapest.floor} ({month_cost(cheapest.cost_usd, months)})."
            )
    else:
        ok = [c for c in chosen if c.seeds_met == c.seeds]
        lead = by.get("prescaler") or min(ok or chosen, key=lambda c: c.cost_usd)
        what = (
            "prescaler's chosen setting"
            if lead.side == "prescaler"
            else f"the cheapest chosen setting{' that meets the held-back target' if ok else ''}"
            f", {lead.side}'s"
        )
        lines.append(f"{what}, printed below: {_held(lead, months)}.")
        others = [c for c in chosen if c is not lead]
        if others:
            lines.append(
                "Beside it, held back: "
                + "; ".join(
                    f"{c.side} {_held(c, months)}"
                    + (
                        f" ({lead.side} costs {lead.cost_usd / c.cost_usd:.2f}x it)"
                        if c.cost_usd > 0
                        else ""
                    )
                    for c in others
                )
                + "."
            )
        if static:
            lines.append(
                "Chosen as a static floor (its triggers never added a replica): "
                + ", ".join(f"{c.side} ({_replicas(c.floor)})" for c in static)
                + "."
            )
    return {
        "text": " ".join(lines),
        "chosen_cost_ratio": ratio,
        "static_floor": floor,
        "static_sides": [c.side for c in static],
        "ratio_side": None if ratio is None or keda is None else keda.side,
    }
