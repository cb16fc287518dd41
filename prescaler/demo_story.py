"""What `prescaler demo` says: its rows, what each means, and the verdict.

Pure text from the simulator's summary document (``prescaler simulate``'s
JSON shape) and the tuned fixture (:mod:`prescaler.demo_tuned`); no I/O, so
the wording is tested without a simulation. The comparison it states is the
fair one: prescaler's trigger tuned against plain KEDA tuned the same way,
both chosen on the tuning part and scored on the held-back part, beside what
teams run today (the recipe as written).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prescaler.demo_tuned import PartScore, TunedSide

__all__ = [
    "RECIPE",
    "TIE_BAND",
    "Row",
    "Verdict",
    "best_keda",
    "demo_document",
    "describe_setting",
    "keda_gain",
    "oracle_note",
    "render",
    "story_rows",
    "verdict",
]

RECIPE = "reactive"
"""The simulator's policy name for the recipe's ScaledObject as written."""

TIE_BAND = 0.02
"""Cost ratios within this of 1 are called a tie: a stated margin, so the demo
does not claim a difference this small from one seed and one trace."""

_KEDA_LABELS = {"keda-queue": "KEDA tuned: queue", "keda-queue-kv": "KEDA tuned: queue + KV"}


@dataclass(frozen=True)
class Row:
    """One line of the demo's table."""

    label: str
    policy: str | None
    """The policy's name in the summary document (None: the ceiling)."""
    slo_attainment: float | None
    cost_per_month_usd: float | None
    meaning: str
    multiple: float | None = None
    """Its cost as a multiple of the hindsight schedule's (None: not run)."""


@dataclass(frozen=True)
class Verdict:
    """prescaler tuned against the best tuned KEDA, in numbers and words."""

    keda: str | None
    """The best tuned KEDA side's policy name (None: no KEDA side ran)."""
    cost_ratio: float | None
    """prescaler's cost over that side's (None when either has none)."""
    outcome: str
    """``win``, ``tie``, ``loss`` or ``unknown``."""
    text: str


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f} %"


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:,.0f}"


def describe_setting(manifest: Mapping[str, Any] | None) -> str:
    """A tuned ScaledObject's deciding knobs in one short phrase."""
    if not manifest:
        return "no setting met the target while tuning"
    spec = manifest.get("spec") or {}
    parts: list[str] = []
    for trig in spec.get("triggers") or []:
        meta = trig.get("metadata") or {}
        if trig.get("type") in ("external", "external-push"):
            parts.append(f"forecast {meta.get('forecast', 'auto')}")
            if "forecastQuantile" in meta:
                parts.append(f"q {meta['forecastQuantile']}")
            if "targetWaitingPerReplica" in meta:
                parts.append(f"{meta['targetWaitingPerReplica']} waiting/replica")
            if "leadTimeSeconds" in meta:
                parts.append(f"lead {meta['leadTimeSeconds']}")
        elif trig.get("type") == "prometheus":
            query = str(meta.get("query", ""))
            what = "KV" if "kv_cache" in query else "queue" if "waiting" in query else "metric"
            parts.append(f"{what} {meta.get('threshold')}")
        else:
            parts.append(str(trig.get("type")))
    parts.append(f"min {spec.get('minReplicaCount', 1)}")
    parts.append(f"poll {spec.get('pollingInterval', 30)} s")
    behavior = (spec.get("advanced") or {}).get("horizontalPodAutoscalerConfig", {})
    down = (behavior.get("behavior") or {}).get("scaleDown") or {}
    # prescaler's trigger holds its answer first, then the HPA its window:
    # the two waits, one after the other, are the ScaledObject's
    waits = [
        float((t.get("metadata") or {})["scaleDownStabilizationSeconds"])
        for t in spec.get("triggers") or []
        if "scaleDownStabilizationSeconds" in (t.get("metadata") or {})
    ]
    if "stabilizationWindowSeconds" in down:
        waits.append(float(down["stabilizationWindowSeconds"]))
    if waits:
        parts.append(f"scale-in wait {sum(waits):g} s")
    return ", ".join(parts)


def _setting_words(side: TunedSide) -> str:
    """The tuned setting in words; a side none of whose trials met the target
    while tuning says so, and that its closest trial is what runs."""
    words = describe_setting(side.manifest)
    if side.manifest is not None and not side.met_target:
        return f"none of {side.trials} met the target while tuning; the closest: {words}"
    return words


def story_rows(
    doc: Mapping[str, Any],
    sides: Sequence[TunedSide],
    ceiling: float,
    slo_s: float,
) -> list[Row]:
    """The demo's rows in reading order: today, tuned KEDA, tuned prescaler,
    static, oracle, best possible. A reference policy missing from ``doc`` is
    skipped; a tuned side is kept without figures when no setting met the
    target while tuning (it has nothing to run)."""
    policies: Mapping[str, Mapping[str, Any]] = doc["policies"]

    def row(label: str, name: str, meaning: str, keep: bool = False) -> Row | None:
        p = policies.get(name)
        if p is None:
            return Row(label, name, None, None, meaning) if keep else None
        return Row(
            label, name, p.get("slo_attainment"), p.get("cost_per_month_usd"), meaning,
            p.get("cost_ratio_to_hindsight"),
        )  # fmt: skip

    rows: list[Row | None] = [
        row(
            "what you run today",
            RECIPE,
            "the KEDA + vLLM recipes' ScaledObject as written: 1 replica per 3 queued",
        ),
    ]
    for s in sides:
        if s.is_keda:
            rows.append(
                row(
                    _KEDA_LABELS.get(s.name, f"KEDA tuned: {s.name}"),
                    s.run_name,
                    f"plain KEDA, every knob tuned: {_setting_words(s)}",
                    keep=True,
                )
            )
    prescaler = next((s for s in sides if s.name == "prescaler"), None)
    if prescaler is not None:
        rows.append(
            row(
                "prescaler tuned",
                prescaler.run_name,
                f"prescaler's trigger, tuned the same way: {_setting_words(prescaler)}",
                keep=True,
            )
        )
    static = policies.get("static", {})
    n, target = static.get("static_replicas"), static.get("static_slo_target")
    sized = (
        f": the fewest reaching {_pct(target)}, sized with hindsight on this part"
        if target is not None
        else ""
    )
    rows.append(row("static fleet", "static", f"{n} replicas always on{sized}"))
    rows.append(
        row(
            "oracle",
            "oracle",
            "knows every future request, runs the fewest replicas that keep up "
            "(a heuristic: neither the cost floor at the target nor an attainment ceiling)",
        )
    )
    rows.append(
        row(
            "hindsight schedule",
            "hindsight",
            "the cheapest fleet perfect foresight could run that meets the target, each "
            "replica ordered one start-up ahead: the bound every cost is a multiple of",
        )
    )
    rows.append(
        Row(
            "best possible",
            None,
            ceiling,
            None,
            f"no fleet does better: the other {_pct(1.0 - ceiling)} of prompts take over "
            f"{slo_s:g} s to process alone",
        )
    )
    return [r for r in rows if r is not None]


def best_keda(rows: Sequence[Row], sides: Sequence[TunedSide], target: float) -> Row | None:
    """The best tuned KEDA row: the cheapest that meets ``target`` on the
    scored part, else the one with the highest attainment. Picked after the
    fact, on the part it is scored on, which can only favour KEDA."""
    names = {s.run_name for s in sides if s.is_keda}
    keda = [r for r in rows if r.policy in names and r.slo_attainment is not None]
    met = [r for r in keda if r.slo_attainment >= target and r.cost_per_month_usd is not None]  # type: ignore[operator]
    if met:
        return min(met, key=lambda r: r.cost_per_month_usd or math.inf)
    return max(keda, key=lambda r: r.slo_attainment or 0.0, default=None)


def verdict(rows: Sequence[Row], sides: Sequence[TunedSide], target: float) -> Verdict:
    """prescaler tuned against the best tuned KEDA: the cost ratio and, in
    plain words, a win, a tie or a loss (a miss of the target where KEDA
    meets it is a loss whatever the cost)."""
    prescaler = next((s for s in sides if s.name == "prescaler"), None)
    mine = next((r for r in rows if prescaler and r.policy == prescaler.run_name), None)
    keda = best_keda(rows, sides, target)
    if mine is None or keda is None or mine.slo_attainment is None:
        who = (
            "no plain-KEDA side had a setting that"
            if keda is None
            else "prescaler's trigger had no setting that"
        )
        return Verdict(
            None if keda is None else keda.policy,
            None,
            "unknown",
            f"no cost ratio: {who} met the target while tuning.",
        )
    ratio = None
    if mine.cost_per_month_usd is not None and keda.cost_per_month_usd:
        ratio = mine.cost_per_month_usd / keda.cost_per_month_usd
    assert keda.slo_attainment is not None
    p_met, k_met = mine.slo_attainment >= target, keda.slo_attainment >= target
    costs = (
        f"{ratio:.2f}x the cost of {keda.label} ({_usd(mine.cost_per_month_usd)} vs "
        f"{_usd(keda.cost_per_month_usd)} a month), at {_pct(mine.slo_attainment)} vs "
        f"{_pct(keda.slo_attainment)} SLO attainment"
        if ratio is not None
        else "no cost to compare"
    )
    if ratio is None:
        outcome, words = "unknown", "no cost ratio"
    elif p_met and not k_met:
        outcome, words = "win", "only prescaler meets the target here"
    elif k_met and not p_met:
        outcome, words = "loss", "prescaler misses the target where KEDA meets it: a loss"
    elif abs(ratio - 1.0) <= TIE_BAND:
        outcome, words = "tie", f"a tie (within {TIE_BAND:.0%} on cost)"
    elif ratio < 1.0:
        outcome = "win" if mine.slo_attainment >= keda.slo_attainment or p_met else "tie"
        words = (
            f"prescaler is {1 - ratio:.0%} cheaper"
            if outcome == "win"
            else f"prescaler is {1 - ratio:.0%} cheaper but attains less: not a clean win"
        )
    else:
        outcome = "loss"
        words = f"prescaler costs {ratio - 1:.0%} more: a loss"
    if not (p_met or k_met):
        words += "; neither meets the target on this part"
    return Verdict(keda.policy, ratio, outcome, f"prescaler tuned costs {costs}: {words}.")


def render(rows: Sequence[Row], target: float) -> list[str]:
    """The table, then one line per row saying what it is (with a column of
    multiples of the hindsight schedule's cost when it ran)."""
    width = max(len(r.label) for r in rows)
    bound = any(r.multiple is not None for r in rows)
    head = f"{'':<{width}}  {'SLO attainment':>14}  {'cost per month':>14}  meets target"
    head += "  x the bound" if bound else ""
    lines = [head, "-" * len(head)]
    for r in rows:
        meets = (
            ""
            if r.policy is None or r.slo_attainment is None
            else ("yes" if r.slo_attainment >= target else "no")
        )
        times = "" if r.multiple is None else f"{r.multiple:.2f}x"
        line = (
            f"{r.label:<{width}}  {_pct(r.slo_attainment):>14}  "
            f"{_usd(r.cost_per_month_usd):>14}  {meets}"
        )
        lines.append(f"{line:<{len(head) - 11}}  {times:>9}".rstrip() if bound else line)
    lines += ["", "what each row is:"]
    lines += [f"  {r.label:<{width}}  {r.meaning}" for r in rows]
    return lines


def keda_gain(rows: Sequence[Row], keda: str | None) -> str | None:
    """What tuning alone buys a team on plain KEDA: the recipe as written
    against the best tuned KEDA row (None when either has no figures)."""
    today = next((r for r in rows if r.policy == RECIPE), None)
    best = next((r for r in rows if keda is not None and r.policy == keda), None)
    if today is None or best is None:
        return None
    return (
        f"a team on plain KEDA, before adopting prescaler's trigger: tuning its own "
        f"ScaledObject (`prescaler tune --scaledobject`) takes it from "
        f"{_pct(today.slo_attainment)} at {_usd(today.cost_per_month_usd)} a month to "
        f"{_pct(best.slo_attainment)} at {_usd(best.cost_per_month_usd)} ({best.label})."
    )


def demo_document(
    rows: Sequence[Row],
    found: Verdict,
    sides: Sequence[TunedSide],
    tuned_from: str,
    start_s: float,
    target: float,
    ceiling: float,
) -> dict[str, Any]:
    """The ``demo`` key of the demo's summary.json (docs/contracts.md)."""

    def part(p: PartScore | None) -> dict[str, float] | None:
        return None if p is None else {"slo_attainment": p.slo_attainment,
                                       "cost_per_month_usd": p.cost_per_month_usd}  # fmt: skip

    return {
        "tuned_from": tuned_from,
        "held_back_start_s": start_s,
        "target_attainment": target,
        "best_possible": ceiling,
        "rows": [
            {
                "label": r.label,
                "policy": r.policy,
                "slo_attainment": r.slo_attainment,
                "cost_per_month_usd": r.cost_per_month_usd,
                "multiple_of_hindsight": r.multiple,
                "meaning": r.meaning,
            }
            for r in rows
        ],
        "best_tuned_keda": found.keda,
        "cost_ratio_prescaler_to_best_keda": found.cost_ratio,
        "outcome": found.outcome,
        "verdict": found.text,
        "tuning": {
            s.name: {
                "trials": s.trials,
                "met_target": s.met_target,
                "chosen_trial": s.chosen_trial,
                "setting": dict(s.setting),
                "tuning": part(s.tuning),
                "held_back": part(s.held_back),
            }
            for s in sides
        },
    }


def oracle_note(doc: Mapping[str, Any], profile: Any, name: str = "predictive") -> str | None:
    """Why the oracle meets the SLO less often than policy ``name``, when it does.

    The oracle is sized for cost (:func:`simulations.policies.oracle_need`): each
    15 s it asks for the replicas the coming peak needs at 85 % of what they
    sustain, with no spare for bursts inside the step, one mean start-up ahead
    while node start-up is drawn around that mean. None when the oracle does at
    least as well."""
    from simulations.cluster.config import ClusterConfig
    from simulations.policies import ORACLE_STEP_S, ORACLE_UTILIZATION

    policies: Mapping[str, Mapping[str, Any]] = doc["policies"]
    oracle, other = policies.get("oracle"), policies.get(name)
    if oracle is None or other is None:
        return None
    o, p = oracle["slo_attainment"], other["slo_attainment"]
    if o is None or p is None or o >= p:
        return None
    lo, _, hi = ClusterConfig.for_profile(profile).node_ready_s
    ratio = other.get("cost_ratio_to_oracle")
    cost = f" and costs {ratio:.2f}x as much" if ratio is not None else ""
    return (
        f"why the oracle meets the SLO less often than {name} ({_pct(o)} vs {_pct(p)}): "
        f"it knows the future but is sized for cost, not for the SLO. Every "
        f"{ORACLE_STEP_S:.0f} s it runs the fewest replicas that carry the coming peak at "
        f"{100 * ORACLE_UTILIZATION:.0f} % of what they can sustain, with nothing spare for "
        f"bursts inside those {ORACLE_STEP_S:.0f} s, so requests queue even when it has all "
        f"it asked for. It also orders replicas one average start-up "
        f"({profile.startup.total_s:.0f} s) ahead while a node alone takes {lo:.0f} to "
        f"{hi:.0f} s to come up, so some arrive after the rise. {name} keeps more "
        f"replicas up ({other['mean_replicas']:.1f} vs {oracle['mean_replicas']:.1f} on "
        f"average){cost}."
    )
