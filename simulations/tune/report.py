"""The tune's report: the ``--json`` document, the printed progress, frontier
and verdicts, and the ScaledObject to paste; the command writes them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from simulations.backfill import DemandHistory
from simulations.bound_report import bound_terms, waterfall_lines
from simulations.tune.advice import (
    degenerate_note,
    month_cost,
    printed_sides,
    targets_line,
    verdict,
)
from simulations.tune.held_back import FrontierPoint, TuneResult
from simulations.tune.manifest import load_manifest, manifest_yaml, metadata_of
from simulations.tune.paste import paste_manifest
from simulations.tune.request import TuneRequest
from simulations.tune.run import FleetFetched, SideDone, TuneEvent, TuneStart
from simulations.tune.screening import Screening
from simulations.tune.storage import shown_url

__all__ = [
    "confirmed_line",
    "cost_at_target",
    "paste_block",
    "print_event",
    "print_report",
    "report_document",
    "verdicts",
]

ADVERSE_COST_TOLERANCE = 0.005
"""A tuned setting dearer than the ScaledObject as written by more than this
share on the held-back part is flagged adverse (less is billing noise)."""


def print_event(event: TuneEvent, out: TextIO) -> None:
    """The progress lines a running tune prints (:func:`simulations.tune.run.tune`'s events)."""
    if isinstance(event, FleetFetched):
        print(f"fleet trace: {event.minutes} minutes, {event.requests:,.0f} requests "
              f"from {event.url}", file=out)  # fmt: skip
    elif isinstance(event, SideDone):
        chose = (
            f"chosen trial {event.chosen}" if event.chosen is not None else "none met the target"
        )
        print(f"{event.name}: {event.trials} trials in {event.wall_s:.0f} s "
              f"of wall time ({event.jobs} processes), {chose}", file=out)  # fmt: skip
    elif isinstance(event, TuneStart):
        _print_start(event, out)


def _print_start(e: TuneStart, out: TextIO) -> None:
    held = e.held_requests is not None
    print(f"{e.trace}: tuning on {e.tune_requests:,} requests "
          f"({e.tune_s / 3600:.2f} h), holding back "
          f"{e.held_requests or 0:,} ({e.holdout:.0%}); "
          f"studies in {shown_url(e.storage)}", file=out)  # fmt: skip
    held_replicas = e.initial_replicas[1]
    print(f"tracker history: {_history_note(e.tune_history)} before the tuning part, "
          f"{_history_note(e.held_history) if held else '-'} before the held-back "
          f"part{' (--no-backfill)' if not e.backfill else ''}; replicas as each "
          f"opens: {e.initial_replicas[0]} (tuning part), "
          f"{held_replicas if held_replicas is not None else '-'} (held-back part)",
          file=out)  # fmt: skip
    print(f"SLO: TTFT <= {e.slo_ttft_s:g} s for {100 * e.target:.2f} % of requests "
          f"({e.fraction:g} x the {100 * e.ceiling:.2f} % an idle fleet attains)"
          + (f"; chosen only at {100 * e.bar:.2f} % or more on the tuning part (--margin "
             f"{e.margin:g})" if e.margin else ""), file=out)  # fmt: skip
    for note in e.warnings:
        print(f"warning: {note}", file=out)


def _history_note(history: DemandHistory | None) -> str:
    if history is None or len(history) == 0:
        return "none"
    span = float(history.times_s[-1] - history.times_s[0]) + (
        float(history.times_s[1] - history.times_s[0]) if len(history) > 1 else 0.0
    )
    return f"{span / 3600:.2f} h"


def _pct(x: float) -> str:
    return f"{100 * x:.2f} %"


def cost_at_target(points: Sequence[FrontierPoint], target: float) -> float | None:
    """The cheapest held-back cost among ``points`` that meet ``target``."""
    met = [p.cost_usd for p in points if p.attainment >= target and math.isfinite(p.cost_usd)]
    return min(met) if met else None


def verdicts(result: TuneResult) -> list[str]:
    """Degenerate or adverse results, in words."""
    notes: list[str] = []
    held_target = result.target_attainment[1]
    if result.held_requests == 0:
        notes.append("degenerate: no request was held back; the held-back figures repeat "
                     "the tuning part (give a longer trace or --holdout)")  # fmt: skip
    degenerate = degenerate_note(result)
    if degenerate is not None:
        notes.append(degenerate)
    for s in result.sides:
        if s.holdout is None:
            continue
        mine, base = s.holdout, s.baseline
        tuned_meets = mine["slo_attainment"] >= held_target
        base_meets = base.attainment >= held_target
        dearer = mine["cost_usd"] > base.cost_usd * (1.0 + ADVERSE_COST_TOLERANCE)
        if base_meets and (not tuned_meets or dearer):
            notes.append(
                f"adverse: on the held-back part the tuned {s.side.name} setting "
                f"({_pct(mine['slo_attainment'])}, ${mine['cost_usd']:,.2f}) does worse than "
                f"the ScaledObject as written ({_pct(base.attainment)}, "
                f"${base.cost_usd:,.2f}); keep yours, or tune on a longer history"
            )
    return notes


def report_document(result: TuneResult) -> dict[str, Any]:
    """The ``--json`` document (docs/contracts.md): the published keys first,
    then ``frontier``, ``baselines``, ``cost_ratio_at_target``, ``sides``,
    ``warnings``, ``selection_margin``, ``hindsight`` (the bound on the
    held-back part, :mod:`simulations.bound_report`), ``verdict`` (the
    headline, :func:`simulations.tune.advice.verdict`). Any set of sides:
    ``predictive`` and ``reactive`` hold nulls when prescaler's or KEDA
    queue-length's side was not tuned."""
    p, q = result.side("prescaler"), result.side("keda-queue")
    months = result.months[1]
    held_target = result.target_attainment[1]

    def point(x: FrontierPoint) -> dict[str, Any]:
        return {"trial": x.trial, "setting": dict(x.setting),
                "slo_attainment": x.attainment, "cost_usd": x.cost_usd,
                "cost_per_month_usd": x.cost_usd / months}  # fmt: skip

    costs = {s.side.name: cost_at_target(s.frontier, held_target) for s in result.sides}
    ratio = None
    if costs.get("prescaler") and costs.get("keda-queue"):
        ratio = float(costs["prescaler"]) / float(costs["keda-queue"])  # type: ignore[arg-type]
    threshold = None
    if q is not None and q.chosen is not None:
        threshold = q.chosen.trigger.threshold
    bound = _bound(result)
    bound_cost = None if bound is None else float(bound["stated_lead"]["cost_usd"])

    def multiple(cost: float | None) -> float | None:
        if cost is None or bound_cost is None or bound_cost <= 0:
            return None
        return round(float(cost) / bound_cost, 4)

    return {
        "trace": result.trace,
        "slo_ttft_s": result.slo_ttft_s,
        "target": result.target,
        "trials": len((p or result.sides[0]).study.trials) if result.sides else 0,
        "predictive": {
            "metadata": metadata_of((p and p.manifest) or {}, ("external", "external-push")),
            "tuned": p and p.tuned,
            "holdout": p and p.holdout,
        },
        "reactive": {
            "threshold": threshold,
            "tuned": q and q.tuned,
            "holdout": q and q.holdout,
        },
        "target_attainment": {"tuned": result.target_attainment[0], "holdout": held_target},
        "frontier": {s.side.name: [point(x) for x in s.frontier] for s in result.sides},
        "baselines": {s.side.name: point(s.baseline) for s in result.sides},
        "cost_ratio_at_target": ratio,
        "sides": {
            s.side.name: {
                "description": s.side.description,
                "trials": len(s.study.trials),
                "chosen_trial": None if s.study.best is None else s.study.best.number,
                "setting": None if s.study.best is None else dict(s.study.best.metadata),
                "tie_break": None if s.study.tie_break is None else s.study.tie_break.as_dict(),
                "screening": None
                if (screening := s.study.extra.get("screening")) is None
                else screening.as_dict(),
                "manifest": s.manifest,
                "cost_at_target_usd": costs[s.side.name],
                "cost_at_target_multiple_of_hindsight": multiple(costs[s.side.name]),
                "holdout_multiple_of_hindsight": None
                if s.holdout is None
                else multiple(float(s.holdout["cost_usd"])),
                "tuned": s.tuned,
                "holdout": s.holdout,
                "study_wall_s": round(s.study_wall_s, 1) if math.isfinite(s.study_wall_s) else None,
                "holdout_seeds": [
                    {
                        "seed": seed,
                        "slo_attainment": att,
                        "cost_usd": cost,
                        "meets": att >= held_target,
                    }
                    for seed, att, cost in s.holdout_seeds
                ],
            }
            for s in result.sides
        },
        "warnings": [*result.warnings, *verdicts(result)],
        "selection_margin": result.margin,
        "hindsight": bound,
        "verdict": verdict(result),
    }


def confirmed_line(screening: Screening) -> str:
    """What the confirmation replays found, in a line."""
    head = (f"trials screened with the forecaster refitted every {screening.refit_s:g} s, "
            f"replayed at the scaler's {screening.scaler_refit_s:g} s: ")  # fmt: skip
    runs = ", ".join(
        f"trial {c.trial} {_pct(c.screened_attainment)} -> {_pct(c.attainment)} "
        f"({'meets' if c.meets else 'misses'})"
        for c in screening.confirmations
    )
    if screening.confirmed is None:
        if not runs:
            return head + "no feasible trial to replay"
        return head + runs + ": none met the bar (--screen-refit 0 runs every trial at "
        "the scaler's interval)"
    return head + runs


def _bound(result: TuneResult) -> dict[str, Any] | None:
    """The bound as ``--json`` carries it: its summary and the waterfall over
    each side's chosen setting on the held-back part."""
    bound = result.extra.get("hindsight")
    if bound is None:
        return None
    held = {s.side.name: s.holdout for s in result.sides if s.holdout is not None}
    return {**bound, "terms": bound_terms(held, bound, result.months[1], not_causal=())}


def print_report(out: TextIO, result: TuneResult, doc: Mapping[str, Any]) -> None:
    """The frontier per side, the chosen settings, the verdicts and the ratio."""
    months = result.months[1]
    held_target = result.target_attainment[1]
    print(f"\n{result.trial_s:.1f} s of wall time per trial (all sides and processes "
          "together)", file=out)  # fmt: skip
    print(targets_line(result), file=out)
    print("held-back frontier (cost per month):", file=out)
    for s in result.sides:
        print(f"  {s.side.name}: {s.side.description}", file=out)
        for x in s.frontier:
            mark = "meets" if x.attainment >= held_target else "misses"
            print(f"    trial {x.trial:>4}  {_pct(x.attainment):>9}  "
                  f"{month_cost(x.cost_usd, months):>16}  {mark}", file=out)  # fmt: skip
        b = s.baseline
        print(f"    as written  {_pct(b.attainment):>9}  {month_cost(b.cost_usd, months):>16}  "
              f"{'meets' if b.attainment >= held_target else 'misses'}", file=out)  # fmt: skip
    for s in result.sides:
        if s.tuned is None or s.holdout is None:
            c = s.study.closest
            bar = min(1.0, result.target_attainment[0] + result.margin / 100.0)
            if c is None:
                goal = _pct(bar)
                print(f"\n{s.side.name}: no setting met the tuning part's target ({goal}): "
                      "no trial completed", file=out)  # fmt: skip
                continue
            reached = (
                f"was {_pct(c.attainment)} at {month_cost(c.cost_usd, result.months[0])}"
                if c.finished
                else f"was on course for {_pct(c.attainment)} (stopped early: {c.stopped})"
            )
            screening: Screening | None = s.study.extra.get("screening")
            replayed = screening is not None and bool(screening.confirmations)
            # screened trials met the bar but none held on its replay: the
            # way out is the full fidelity, said on the line below
            advice = "" if replayed else " Lower --target, raise --slo-ttft or maxReplicaCount"
            print(f"\n{s.side.name}: no setting met the tuning part's target "
                  f"({_pct(bar)}): the best attainment reached {reached} "
                  f"(trial {c.number}: {json.dumps(dict(c.metadata), sort_keys=True)})."
                  f"{advice}", file=out)  # fmt: skip
            if screening is not None and replayed:
                print(f"  {confirmed_line(screening)}", file=out)
            continue
        print(f"\n{s.side.name}: chosen trial {s.study.best.number if s.study.best else '-'}: "
              f"tuning part {_pct(s.tuned['slo_attainment'])} at "
              f"{month_cost(s.tuned['cost_usd'], result.months[0])}, held back "
              f"{_pct(s.holdout['slo_attainment'])} at "
              f"{month_cost(s.holdout['cost_usd'], months)}", file=out)  # fmt: skip
        if (screening := s.study.extra.get("screening")) is not None:
            print(f"  {confirmed_line(screening)}", file=out)
        if s.study.tie_break is not None:
            print(f"  a tie-break: {s.study.tie_break.tied} other feasible trial(s) cost the "
                  "same on the tuning part; chosen as the one that reacts most (lowest "
                  "thresholds, shortest scale-up waits, largest scale-up steps)",
                  file=out)  # fmt: skip
        if len(s.holdout_seeds) > 1:
            met = sum(1 for _, a, _ in s.holdout_seeds if a >= held_target)
            seeds = ", ".join(str(k) for k, _, _ in s.holdout_seeds)
            print(f"  held back under arrival seeds {seeds}: "
                  f"{', '.join(_pct(a) for _, a, _ in s.holdout_seeds)} "
                  f"(meets the target on {met} of {len(s.holdout_seeds)})", file=out)  # fmt: skip
    bound = doc.get("hindsight")
    if bound is not None:
        print("\nthe chosen settings on the held-back part against the hindsight schedule, "
              "the cheapest fleet perfect foresight could run there:", file=out)  # fmt: skip
        for line in waterfall_lines(bound["terms"], months, bound["stated_lead"]["lead_s"]):
            print(line, file=out)
    for note in doc["warnings"]:
        print(f"warning: {note}", file=out)
    print(f"\nwhat to do: {doc['verdict']['text']}", file=out)


def paste_block(request: TuneRequest, result: TuneResult, out: TextIO) -> None:
    """Each printed side's tuned ScaledObject (:func:`simulations.tune.advice.printed_sides`)
    with the names, addresses and model the run was given
    (:func:`simulations.tune.paste.paste_manifest`), then what it still needs."""
    user = load_manifest(request.choice.scaledobject) if request.choice.scaledobject else None
    printed = printed_sides(result)
    for s in result.sides:
        if s.manifest is None or s.side.name not in printed:
            continue
        doc, missing = paste_manifest(request, s.manifest, user)
        floors = ""
        if s.side.base.prescaler_trigger is not None:
            floors = (" (minReplicaCount follows the trigger's minReplicas, unless it "
                      "scales to zero; the trigger's scaleDownStabilizationSeconds is its one "
                      "scale-in wait, the HPA's window 0)")  # fmt: skip
        print(f"\npaste: the tuned {s.side.name} ScaledObject{floors}:\n", file=out)
        print(manifest_yaml(doc), file=out)
        for note in missing:
            print(f"still to set: {note}", file=out)
