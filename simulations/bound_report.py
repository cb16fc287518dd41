"""Every set-up in the hindsight schedule's terms: cost multiples and where the gap goes.

Pure text and numbers from a report's per-policy objects (``simulate``'s
JSON shape) and the bound's own summary
(:func:`simulations.hindsight_run.bound_summary`); shared by ``simulate``,
``tune`` and ``prescaler demo`` so the three say it one way.

The waterfall reads from the cheapest fleet anything could run to what a
set-up costs: the bound with an instant start-up; plus the price of the
lead time (the bound at the stated start-up); plus the price of not knowing
the future (the cheapest causal set-up that meets the target, against the
bound); plus, for every other set-up that meets the target, the price of
its shape (its cost over the cheapest causal one's). A set-up that misses
the target is not in it: buying less attainment is not a price paid.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

__all__ = [
    "NOT_CAUSAL",
    "bound_terms",
    "waterfall_lines",
]

NOT_CAUSAL = frozenset({"oracle", "hindsight"})
"""Policies that see the future: never the best causal set-up."""


def _month(cost_usd: float, months: float) -> float | None:
    return cost_usd / months if months > 0 else None


def bound_terms(
    policies: Mapping[str, Mapping[str, Any]],
    bound: Mapping[str, Any],
    months: float,
    *,
    not_causal: Collection[str] = NOT_CAUSAL,
) -> dict[str, Any]:
    """The waterfall as data: the bound's two costs (instant start-up, stated
    lead), the best causal set-up meeting the bound's target and the others
    that meet it, each with its monthly cost and its multiple of the bound.
    ``policies``: name -> a per-policy object (``cost_usd``, ``slo_attainment``);
    ``bound``: :func:`simulations.hindsight_run.bound_summary`'s object;
    ``months``: the window's span in months (730 h)."""
    target = float(bound["target_attainment"])
    stated = bound["stated_lead"]
    instant = bound["instant_start"]
    at_lead = float(stated["cost_usd"])
    meeting = {
        name: p
        for name, p in policies.items()
        if name not in not_causal
        and p.get("cost_usd") is not None
        and p.get("slo_attainment") is not None
        and float(p["slo_attainment"]) >= target
    }
    ranked = sorted(meeting, key=lambda n: float(meeting[n]["cost_usd"]))
    best = ranked[0] if ranked else None

    def cost(name: str) -> float:
        return float(meeting[name]["cost_usd"])

    def ratio(c: float) -> float | None:
        return round(c / at_lead, 4) if at_lead > 0 else None

    def month(c: float) -> float | None:
        m = _month(c, months)
        return None if m is None else round(m, 2)

    return {
        "target_attainment": target,
        "instant_start": {
            "cost_usd": round(float(instant["cost_usd"]), 6),
            "cost_per_month_usd": month(float(instant["cost_usd"])),
            "multiple": ratio(float(instant["cost_usd"])),
        },
        "lead_time_price_usd": round(at_lead - float(instant["cost_usd"]), 6),
        "bound": {
            "cost_usd": round(at_lead, 6),
            "cost_per_month_usd": month(at_lead),
            "slo_attainment": stated["slo_attainment"],
            "met": bool(stated["met"]),
        },
        "best_causal": None
        if best is None
        else {
            "policy": best,
            "cost_usd": round(cost(best), 6),
            "cost_per_month_usd": month(cost(best)),
            "multiple": ratio(cost(best)),
            "future_price_usd": round(cost(best) - at_lead, 6),
        },
        "shape": [
            {
                "policy": name,
                "cost_usd": round(cost(name), 6),
                "cost_per_month_usd": month(cost(name)),
                "multiple": ratio(cost(name)),
                "shape_price_usd": round(cost(name) - cost(best), 6),
            }
            for name in ranked[1:]
            if best is not None
        ],
        "missed_target": sorted(n for n in policies if n not in not_causal and n not in meeting),
    }


def waterfall_lines(terms: Mapping[str, Any], months: float, lead_s: float) -> list[str]:
    """The waterfall as a few lines a person reads top to bottom, in dollars a
    month at this window's rate and as multiples of the bound."""
    per = 1.0 / months if months > 0 else math.nan

    def usd(c: float) -> str:
        return f"${c * per:,.0f}" if math.isfinite(per) else "-"

    def delta(c: float) -> str:
        return f"{'+' if c >= 0 else '-'}${abs(c) * per:,.0f}" if math.isfinite(per) else "-"

    def mult(m: float | None) -> str:
        return "" if m is None else f"{m:.2f}x"

    bound = terms["bound"]
    at_lead = float(bound["cost_usd"])
    inst = terms["instant_start"]
    rows: list[tuple[str, str, str]] = [
        ("perfect foresight, instant start-up", usd(float(inst["cost_usd"])),
         mult(inst["multiple"])),
        (f"+ the lead time ({lead_s:.0f} s)", delta(float(terms["lead_time_price_usd"])), ""),
        ("= the hindsight schedule (the bound)", usd(at_lead), "1.00x"),
    ]  # fmt: skip
    missed: str | None = None
    if not bound.get("met", True):
        missed = (
            f"the hindsight schedule itself reached only {100 * float(bound['slo_attainment']):.1f}"
            " %: the target is out of reach within the fleet's maximum"
        )
    best = terms["best_causal"]
    if best is None:
        rows.append(("no causal set-up met the target", "", ""))
    else:
        rows.append((f"+ not knowing the future ({best['policy']})",
                     delta(float(best["future_price_usd"])), ""))  # fmt: skip
        rows.append((f"= best causal set-up ({best['policy']})", usd(float(best["cost_usd"])),
                     mult(best["multiple"])))  # fmt: skip
        for s in terms["shape"]:
            rows.append((f"  + the shape of {s['policy']}", delta(float(s["shape_price_usd"])),
                         f"= {usd(float(s['cost_usd']))}  {mult(s['multiple'])}"))  # fmt: skip
    if terms["missed_target"]:
        rows.append((f"missed the target: {', '.join(terms['missed_target'])}", "", ""))
    width = max(len(r[0]) for r in rows)
    cw = max(len(r[1]) for r in rows)
    head = (
        f"where the cost goes, per month at this rate (TTFT SLO met for "
        f"{100 * float(terms['target_attainment']):.1f} % of requests):"
    )
    lines = [head, *(f"  {a:<{width}}  {b:>{cw}}  {c}".rstrip() for a, b, c in rows)]
    return [*lines, f"  {missed}"] if missed else lines
