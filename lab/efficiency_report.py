"""The efficiency table from a directory of cells (:mod:`lab.efficiency`).

Per trace and lead time, each side's held-back cost as a multiple of the
hindsight schedule: the median over study seeds and the range, how many
seeds' choices met the held-back target under every arrival seed, and
prescaler's cost over the cheapest KEDA side that met it, seed by seed.
A side that missed the target has no multiple in the median: buying less
attainment is not a price paid.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simulations.bound_report import waterfall_lines

__all__ = [
    "cells",
    "choices_table",
    "flip_table",
    "markdown_table",
    "meets",
    "merged_terms",
    "moves",
    "report",
    "side_rows",
    "waterfalls",
]

PRESCALER = "prescaler"


def _key(cell: Mapping[str, Any]) -> tuple[str, float, int]:
    return str(cell["trace"]), float(cell["lead_min"]), int(cell["seed"])


def cells(*directories: Path) -> list[dict[str, Any]]:
    """Every cell file in the directories, by trace, then lead time as a number (a
    name order would put ``lead15`` before ``lead2.5``), then study seed. Cells of
    the same trace, lead time and seed in several directories (sides tuned in
    separate runs, a KEDA run beside a prescaler one) are one cell with every
    side, provided they agree on what the sides were held to."""
    merged: dict[tuple[str, float, int], dict[str, Any]] = {}
    for directory in directories:
        found = sorted(directory.glob("*.json"))
        if not found and len(directories) > 1:
            raise ValueError(f"{directory}: no cell files (is the directory's name right?)")
        for path in found:
            cell = json.loads(path.read_text(encoding="utf-8"))
            key = _key(cell)
            if key in merged:
                _merge(merged[key], cell, path)
            else:
                merged[key] = cell
    return [merged[k] for k in sorted(merged)]


#: What two runs of one cell must agree on for their sides to share a table.
AGREED = ("target_attainment", "margin", "trials", "holdout_seeds", "max_replicas")


def _merge(into: dict[str, Any], cell: Mapping[str, Any], path: Path) -> None:
    """Add ``cell``'s sides to ``into`` (the same cell, run apart)."""
    for field in AGREED:
        if into.get(field) != cell.get(field):
            raise ValueError(
                f"{path}: its {field} ({cell.get(field)!r}) differs from the same cell's "
                f"in another directory ({into.get(field)!r}): their sides are not comparable"
            )
    bound = into["hindsight"]["terms"]["bound"]["cost_usd"]
    if cell["hindsight"]["terms"]["bound"]["cost_usd"] != bound:
        raise ValueError(f"{path}: its bound differs from the same cell's in another directory")
    both = set(into["sides"]) & set(cell["sides"])
    if both:
        raise ValueError(f"{path}: side(s) {', '.join(sorted(both))} tuned in two directories")
    flips = [f for f in (into.get("forecast_flipped"), cell.get("forecast_flipped")) if f]
    if len(flips) == 2 and flips[0] != flips[1]:
        raise ValueError(f"{path}: prescaler's forecast flip differs from the same cell's")
    into["sides"] = {**into["sides"], **cell["sides"]}
    into["sides_asked"] = [*into.get("sides_asked", []), *cell.get("sides_asked", [])]
    into["warnings"] = [*into.get("warnings", []), *cell.get("warnings", [])]
    into["forecast_flipped"] = flips[0] if flips else None
    into["hindsight"] = {
        **into["hindsight"],
        "terms": merged_terms(into["hindsight"]["terms"], cell["hindsight"]["terms"]),
    }


def merged_terms(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """The waterfall terms of one cell whose sides were tuned in two runs: the
    cheapest side that met the target over both is the best causal set-up, and
    every other side that met it is a shape above it (as ``tune`` orders them)."""
    bound = a["bound"]
    per_month = float(bound["cost_per_month_usd"]) / float(bound["cost_usd"])
    met = [
        {"policy": t["policy"], "cost_usd": float(t["cost_usd"]), "multiple": t["multiple"]}
        for terms in (a, b)
        for t in ([terms["best_causal"]] if terms["best_causal"] else []) + list(terms["shape"])
    ]
    met.sort(key=lambda t: t["cost_usd"])
    out = dict(a)
    out["missed_target"] = [*a["missed_target"], *b["missed_target"]]
    if not met:
        out["best_causal"], out["shape"] = None, []
        return out
    best, *rest = met
    out["best_causal"] = {
        **best,
        "cost_per_month_usd": best["cost_usd"] * per_month,
        "future_price_usd": best["cost_usd"] - float(bound["cost_usd"]),
    }
    out["shape"] = [{**t, "shape_price_usd": t["cost_usd"] - best["cost_usd"]} for t in rest]
    return out


def _groups(found: Sequence[Mapping[str, Any]]) -> dict[tuple[str, float], list[Any]]:
    """The cells by (trace, lead time), each group in seed order."""
    groups: dict[tuple[str, float], list[Any]] = defaultdict(list)
    for c in sorted(found, key=lambda c: int(c["seed"])):
        groups[(c["trace"], float(c["lead_min"]))].append(c)
    return groups


def meets(cell: Mapping[str, Any], side: str) -> bool:
    """The side's choice met the held-back target under every arrival seed
    it was scored under (the cell's own and the next ones)."""
    s = cell["sides"].get(side)
    if s is None or s.get("holdout") is None:
        return False
    target = float(cell["target_attainment"]["holdout"])
    runs = s.get("holdout_seeds") or []
    own = float(s["holdout"]["slo_attainment"]) >= target
    return own and all(bool(r["meets"]) for r in runs)


def _multiple(cell: Mapping[str, Any], side: str) -> float | None:
    s = cell["sides"].get(side)
    if s is None or s.get("holdout_multiple_of_hindsight") is None:
        return None
    return float(s["holdout_multiple_of_hindsight"])


def _spread(values: Sequence[float]) -> str:
    if not values:
        return "-"
    mid = statistics.median(values)
    if len(values) == 1:
        return f"{mid:.2f}x"
    return f"{mid:.2f}x ({min(values):.2f}-{max(values):.2f})"


def side_rows(group: Sequence[Mapping[str, Any]], sides: Sequence[str]) -> dict[str, str]:
    """Per side: the multiple over the seeds its choice met the target in,
    then ``met/seeds`` (the seeds the side was tuned under; "not run" where none)."""
    out: dict[str, str] = {}
    for side in sides:
        ran = [c for c in group if side in c["sides"]]
        met = [c for c in ran if meets(c, side)]
        values = [m for c in met if (m := _multiple(c, side)) is not None]
        out[side] = f"{_spread(values)} {len(met)}/{len(ran)}" if ran else "not run"
    return out


def _versus_keda(cell: Mapping[str, Any]) -> float | None:
    """prescaler's held-back cost over the cheapest KEDA side's, both meeting."""
    keda = [
        float(s["holdout"]["cost_usd"])
        for name, s in cell["sides"].items()
        if name.startswith("keda") and meets(cell, name)
    ]
    if not keda or not meets(cell, PRESCALER):
        return None
    return float(cell["sides"][PRESCALER]["holdout"]["cost_usd"]) / min(keda)


def _covering(ratios: Sequence[float], group: Sequence[Mapping[str, Any]]) -> str:
    """How many seeds a ratio stands on, where it is not every one of the row's."""
    return "" if not ratios or len(ratios) == len(group) else f" {len(ratios)} of {len(group)}"


def markdown_table(found: Sequence[Mapping[str, Any]]) -> str:
    """The table: one row per (trace, lead time), a column per side; a
    dagger on the bound where a cell's bound itself missed the target (its
    multiples are then against a schedule cheaper than a valid one)."""
    if not found:
        return "(no cells)"
    sides: list[str] = []
    for c in found:
        sides += [s for s in c["sides"] if s not in sides]
    groups = _groups(found)
    head = (
        "| trace | lead | seeds | the bound | "
        + " | ".join(sides)
        + " | prescaler / best KEDA |\n|"
        + "---|" * (len(sides) + 5)
        + "\n"
    )
    rows = []
    for (trace, lead), group in sorted(groups.items()):
        by_side = side_rows(group, sides)
        ratios = [r for c in group if (r := _versus_keda(c)) is not None]
        bound = [float(c["hindsight"]["terms"]["bound"]["cost_per_month_usd"]) for c in group]
        missed = "" if all(c["hindsight"]["terms"]["bound"]["met"] for c in group) else " †"
        rows.append(
            f"| {trace} | {lead:g} min | {','.join(str(c['seed']) for c in group)} "
            f"| ${statistics.median(bound):,.0f}/month{missed} | "
            + " | ".join(by_side[s] for s in sides)
            + f" | {_spread(ratios)}{_covering(ratios, group)} |"
        )
    return head + "\n".join(rows)


def _worst(cell: Mapping[str, Any], side: str) -> float | None:
    """The side's lowest held-back attainment over the arrival seeds."""
    s = cell["sides"].get(side)
    if s is None or s.get("holdout") is None:
        return None
    runs = [float(r["slo_attainment"]) for r in s.get("holdout_seeds") or []]
    return min([float(s["holdout"]["slo_attainment"]), *runs])


def _attained(cell: Mapping[str, Any], side: str) -> str:
    worst = _worst(cell, side)
    if worst is None:
        return f"{cell['seed']}: none chosen"
    target = 100 * float(cell["target_attainment"]["holdout"])
    return f"{cell['seed']}: {100 * worst:.2f} % ({target:.2f})"


def moves(settings: Sequence[Mapping[str, str]]) -> str:
    """The keys whose chosen value differs between study seeds, each with
    its values in seed order: how far a choice moves when only the seed does."""
    if len(settings) < 2:
        return "-"
    keys = [k for k in settings[0] if len({st.get(k) for st in settings}) > 1]
    keys += sorted({k for st in settings[1:] for k in st} - set(settings[0]))
    if not keys:
        return "none"
    return "; ".join(f"{k} {'/'.join(str(st.get(k, '-')) for st in settings)}" for k in keys)


def choices_table(found: Sequence[Mapping[str, Any]]) -> str:
    """Per trace, lead time and side, each seed's choice on the held-back
    day: worst attainment over the arrival seeds against the target, cost
    per month, multiple of the bound, whether a tie-break chose it; then
    the keys its choice moved on between seeds."""
    groups = _groups(found)
    head = (
        "| trace | lead | side | held back, worst arrival seed (target) per study seed "
        "| cost per month | x bound | tie-break | what moved between seeds |\n"
        "|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for (trace, lead), group in sorted(groups.items()):
        sides = list(dict.fromkeys(s for c in group for s in c["sides"]))
        for side in sides:
            chosen = [c for c in group if (c["sides"].get(side) or {}).get("holdout")]
            att = ", ".join(_attained(c, side) for c in group if side in c["sides"])
            cost = ", ".join(f"${float(c['sides'][side]['holdout']['cost_per_month_usd']):,.0f}"
                             for c in chosen)  # fmt: skip
            mult = ", ".join(f"{m:.2f}" for c in chosen if (m := _multiple(c, side)) is not None)
            ties = sum(1 for c in chosen if c["sides"][side].get("tie_break"))
            settings = [c["sides"][side]["setting"] or {} for c in chosen]
            rows.append(
                f"| {trace} | {lead:g} min | {side} | {att} | {cost or '-'} "
                f"| {mult or '-'} | {ties}/{len(chosen)} | {moves(settings)} |"
            )
    return head + "\n".join(rows)


def slack_drops(
    found: Sequence[Mapping[str, Any]],
) -> list[tuple[str, float, str, int, float, float]]:
    """Per cell and side with a choice: (trace, lead, side, seed, points its
    tuning-day attainment cleared that day's target by, points its worst
    held-back attainment cleared the held-back target by). Their difference
    is what the choice lost out of sample: the margin it needed to hold.
    In the order of ``found`` (:func:`cells` sorts them)."""
    out = []
    for c in found:
        targets = c["target_attainment"]
        for side, s in c["sides"].items():
            worst = _worst(c, side)
            if worst is None or s.get("tuned") is None:
                continue
            tuned = 100 * (float(s["tuned"]["slo_attainment"]) - float(targets["tuned"]))
            held = 100 * (worst - float(targets["holdout"]))
            out.append((c["trace"], float(c["lead_min"]), side, int(c["seed"]), tuned, held))
    return out


def slack_table(found: Sequence[Mapping[str, Any]]) -> str:
    """Each choice's slack over its target on the tuning day and on the
    held-back day (worst arrival seed), in points, and the drop; then the
    margin that would have covered every drop, per trace and in all."""
    drops = slack_drops(found)
    if not drops:
        return "(no choice has both days' figures)"
    head = (
        "| trace | lead | side | seed | tuning day, points over target "
        "| held back, points over target | drop |\n|---|---|---|---|---|---|---|\n"
    )
    rows = [
        f"| {t} | {lead:g} min | {side} | {seed} | {tuned:+.2f} | {held:+.2f} "
        f"| {tuned - held:+.2f} |"
        for t, lead, side, seed, tuned, held in drops
    ]
    lines = []
    for trace in sorted({d[0] for d in drops}):
        mine = sorted(d[4] - d[5] for d in drops if d[0] == trace)
        median = statistics.median(mine)
        lines.append(f"{trace}: drop median {median:+.2f}, largest {mine[-1]:+.2f} "
                     f"points over {len(mine)} choices")  # fmt: skip
    every = max(d[4] - d[5] for d in drops)
    lines.append(f"a margin of {max(every, 0.0):.2f} points would have covered every drop")
    return head + "\n".join(rows) + "\n\n" + "\n".join(lines)


def waterfalls(found: Sequence[Mapping[str, Any]]) -> str:
    """Each cell's waterfall on its held-back day, as ``prescaler tune``
    prints it: the bound, the price of the lead time, of not knowing the
    future, and each side's shape."""
    out = []
    for c in found:
        bound = c["hindsight"]
        terms = bound["terms"]
        months = float(terms["bound"]["cost_usd"]) / float(terms["bound"]["cost_per_month_usd"])
        lead_s = float(bound["stated_lead"]["lead_s"])
        out.append(f"{c['trace']}, {float(c['lead_min']):g} min, seed {c['seed']}:")
        out += ["  " + line for line in waterfall_lines(terms, months, lead_s)]
    return "\n".join(out)


def _gap_closed(cell: Mapping[str, Any]) -> str:
    """How much of prescaler's "not knowing the future" gap (its cost over
    the bound) the forecast closes at its choice: (cost without it - cost
    with it) / (cost without it - bound), both meeting the target."""
    flip = cell.get("forecast_flipped")
    side = cell["sides"].get(PRESCALER) or {}
    if not flip or not side.get("holdout"):
        return "-"
    target = float(cell["target_attainment"]["holdout"])
    chosen = (float(side["holdout"]["cost_usd"]), float(side["holdout"]["slo_attainment"]))
    other = (float(flip["cost_usd"]), float(flip["slo_attainment"]))
    on, off = (chosen, other) if flip["flipped_to"] == "off" else (other, chosen)
    if on[1] < target and off[1] < target:
        return "both miss the target"
    if on[1] < target or off[1] < target:
        return "off misses the target" if off[1] < target else "on misses the target"
    bound = float(cell["hindsight"]["terms"]["bound"]["cost_usd"])
    multiples = f"(off {off[0] / bound:.2f}x, on {on[0] / bound:.2f}x the bound)"
    if off[0] <= bound:
        return f"no gap without it {multiples}"
    return f"{100 * (off[0] - on[0]) / (off[0] - bound):+.0f} % {multiples}"


def _flipped_label(flip: Mapping[str, Any]) -> str:
    """The flipped mode; turned on, the forecast's own keys were never
    tuned (a choice with the forecast off holds none), so they are the
    trigger's defaults."""
    mode = str(flip["flipped_to"])
    return mode if mode == "off" else f"{mode} (forecast keys at their defaults)"


def flip_table(found: Sequence[Mapping[str, Any]]) -> str:
    """Per cell, prescaler's choice with its forecast mode as chosen and
    flipped (:mod:`lab.efficiency_ablation`): attainment, cost per month,
    and the share of the gap to the bound the forecast closes (forecast off
    against on, whichever was chosen)."""
    head = (
        "| trace | lead | seed | as chosen | flipped | gap to the bound the forecast closes |\n"
        "|---|---|---|---|---|---|\n"
    )
    rows = []
    for c in found:
        flip = c.get("forecast_flipped")
        side = c["sides"].get(PRESCALER) or {}
        if not flip or not side.get("holdout"):
            continue
        per = float(side["holdout"]["cost_per_month_usd"]) / float(side["holdout"]["cost_usd"])
        held = side["holdout"]
        rows.append(
            f"| {c['trace']} | {float(c['lead_min']):g} min | {c['seed']} "
            f"| {flip['chosen_forecast']}: {100 * float(held['slo_attainment']):.2f} %, "
            f"${float(held['cost_per_month_usd']):,.0f} "
            f"| {_flipped_label(flip)}: {100 * float(flip['slo_attainment']):.2f} %, "
            f"${float(flip['cost_usd']) * per:,.0f} | {_gap_closed(c)} |"
        )
    return head + "\n".join(rows)


def report(*directories: Path) -> str:
    """The table, each choice, the forecast flips, and each cell's waterfall,
    from the cells in the directories (:func:`cells`)."""
    found = cells(*directories)
    if not found:
        return f"(no cells in {', '.join(str(d) for d in directories)})"
    parts = (
        markdown_table(found), choices_table(found), slack_table(found), flip_table(found),
        waterfalls(found),
    )  # fmt: skip
    return "\n\n".join(parts)
