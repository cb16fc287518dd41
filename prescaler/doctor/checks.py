"""``prescaler doctor``'s checks: pure functions from what was fetched to findings.

An autoscaler can sit inert for days while its ScaledObject says Ready and
Active: a label that matches no series reads as an idle fleet, not as an
error. Each check here looks at one link of the loop (the series a trigger
reads, whether the scaler's answer comes from fresh data, whether it moved
as demand did, whether the HPA reads what the scaler answers, whether
``maxReplicaCount`` leaves room for the need) and says OK, WARN or FAIL with
the cause and the fix. No I/O here: ``prescaler.doctor.fetch`` gathers the
data, so every verdict is testable on plain values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from decision.reason import Reason
from prescaler.doctor.checks_series import (
    QueryData,
    SeriesData,
    check_bounds,
    check_query,
    check_series,
)
from prescaler.doctor.findings import Finding, exit_code, summary
from prescaler.doctor.inputs import HpaView, ObjectView, TriggerView

__all__ = [
    "DEMAND_FLOOR",
    "HELD_REASONS",
    "METRIC_NAME",
    "Finding",
    "QueryData",
    "ScalerAnswer",
    "SeriesData",
    "check_answer",
    "check_bounds",
    "check_hpa",
    "check_max",
    "check_movement",
    "check_query",
    "check_series",
    "exit_code",
    "moved",
    "summary",
]

Series = Sequence[tuple[float, float]]

METRIC_NAME = "prescaler-desired-replicas"
"""The scaler's one metric (``scaler.service.METRIC_NAME``); the HPA names it
``s{index}-prescaler-desired-replicas``."""
HELD_REASONS: frozenset[str] = frozenset(
    r.value for r in (Reason.STALE_HOLD, Reason.FALLBACK, Reason.NO_DATA, Reason.WARMING_UP)
)
"""Decision reasons that mean the answer does not come from fresh data."""
DEMAND_MOVED = 0.25
"""Demand moved when its range over the window is at least this fraction of its mean."""
DEMAND_FLOOR = 0.05
"""... and at least this many requests per second (a trickle's noise is not a move)."""
SEEN_SHORT = 0.5
"""The scaler read the wrong series when what it saw averages under this
fraction of what the fleet served (arrivals and completions agree in mean)."""


# --------------------------------------------------------------------------
# answer: the scaler's answer for this object comes from fresh data
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ScalerAnswer:
    """What ``prescaler serve`` says about one ScaledObject."""

    tracked: bool
    """Its ``/metrics`` carries the object (KEDA has asked it)."""
    value: float | None = None
    """Its ``prescaler_desired_replicas`` on ``/metrics`` (what GetMetrics answers)."""
    error: str | None = None
    """Why the scaler's ``/metrics`` could not be read (the object is then untracked)."""
    reasons: Mapping[str, float] = field(default_factory=dict)
    """Decisions made for the object by reason over the last ``settle_s`` seconds."""
    settle_s: float = 0.0
    source: str = ""
    source_up: float | None = None


def check_answer(trigger: TriggerView, obj: ObjectView, ans: ScalerAnswer) -> Finding:
    label = trigger.label
    key = f"{obj.namespace}/{obj.name}"
    if not ans.tracked and ans.error:
        return Finding(
            "FAIL",
            "answer",
            label,
            f"cannot read the scaler: {ans.error}",
            "give --scaler-metrics the scaler's /metrics URL "
            "(kubectl -n prescaler port-forward deploy/prescaler 9091)",
        )
    if not ans.tracked:
        return Finding(
            "FAIL",
            "answer",
            label,
            f"the scaler does not track {key}: KEDA has not asked it",
            "check scalerAddress, the scaler's NetworkPolicy (gRPC from namespace keda) "
            "and the KEDA operator's log for this ScaledObject",
        )
    held = {r: n for r, n in ans.reasons.items() if r in HELD_REASONS and n > 0}
    now = "" if ans.value is None else f"answers {ans.value:g}"
    source = ""
    if ans.source_up is not None and ans.source_up < 1:
        source = f"; prescaler_source_up{{source={ans.source!r}}} is 0"
    if held:
        named = ", ".join(f"{r} x{n:g}" for r, n in sorted(held.items()))
        return Finding(
            "FAIL",
            "answer",
            label,
            f"{now} from held data, not fresh ({named} over {ans.settle_s:g} s){source}",
            "the scaler cannot read the fleet: see the series check and the scaler's log "
            "(`source ... failed`); it answers fallbackReplicas after fallbackAfterSeconds",
        )
    if ans.reasons.get("partial_hold", 0) > 0:
        return Finding(
            "WARN",
            "answer",
            label,
            f"{now}, part of the fleet unread (partial_hold over {ans.settle_s:g} s){source}",
            "some replicas' series are missing: see the series check",
        )
    if not any(n > 0 for n in ans.reasons.values()):
        return Finding(
            "WARN",
            "answer",
            label,
            f"{now}, but no decision for it in {ans.settle_s:g} s",
            "wait a refresh (--settle-seconds above prescaler serve --refresh-seconds) or "
            "check the scaler's log and prescaler_decider_up",
        )
    fresh = ", ".join(f"{r} x{n:g}" for r, n in sorted(ans.reasons.items()) if n > 0)
    return Finding(
        "OK", "answer", label, f"{now} from fresh data ({fresh} over {ans.settle_s:g} s)"
    )


# --------------------------------------------------------------------------
# movement: over the window, the answer moved as demand did
# --------------------------------------------------------------------------


def moved(values: Sequence[float]) -> bool:
    """Demand moved: its range is a real fraction of its level (not a trickle's noise)."""
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < 2:
        return False
    spread = max(finite) - min(finite)
    mean = sum(finite) / len(finite)
    return spread >= max(DEMAND_MOVED * abs(mean), DEMAND_FLOOR)


def _range(values: Sequence[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    lo, hi = min(finite), max(finite)
    return f"{lo:.3g}" if lo == hi else f"{lo:.3g}-{hi:.3g}"


def check_movement(
    trigger: TriggerView,
    demand: Series,
    answer: Series,
    window_s: float,
    demand_what: str,
    answer_what: str,
    *,
    seen: Series | None = None,
    answer_is_query: bool = False,
    answer_series: int = 1,
) -> Finding:
    """Over the window, did the trigger follow the fleet's ``demand``?

    ``seen`` is the demand the scaler itself read for the object
    (``prescaler_demand``): the sharp test, because a flat answer alone is
    no fault (demand that fits in ``minReplicas`` leaves it flat) while a
    scaler that saw far less than the fleet served reads the wrong series.
    Without it, a flat answer while demand moved is only a warning.
    ``answer_is_query``: the answer is a KEDA trigger's own query (no
    history there means the trigger read nothing, not that Prometheus skips
    the scaler). ``answer_series``: how many series the query returned over
    the window; more than one is read too much, not nothing."""
    label = trigger.label
    minutes = f"{window_s / 60:g} min"
    d = [v for _, v in demand if math.isfinite(v)]
    a = [v for _, v in answer if math.isfinite(v)]
    s = [v for _, v in seen or () if math.isfinite(v)]
    if answer_is_query and answer_series > 1:
        return Finding(
            "FAIL",
            "movement",
            label,
            f"the query returned {answer_series} series over the last {minutes}, not one: "
            "the trigger read too much, and KEDA refuses more than one series",
            "aggregate it to one series (sum(...)), or narrow its label matchers",
        )
    if not a:
        if answer_is_query:
            return Finding(
                "FAIL",
                "movement",
                label,
                f"the query had no value over the last {minutes}: the trigger read nothing",
                "correct its label matchers (see the series check)",
            )
        return Finding(
            "WARN",
            "movement",
            label,
            f"Prometheus holds no {answer_what} over the last {minutes}",
            "let Prometheus scrape the scaler's metrics port 9091 with honor_labels "
            "(docs/adopt.md, step 1)",
        )
    if len(d) < 3:
        return Finding(
            "WARN",
            "movement",
            label,
            f"too little demand history ({demand_what}) over the last {minutes} to compare",
            "rerun once Prometheus holds an hour of vLLM's series",
        )
    served = sum(d) / len(d)
    if s and served >= DEMAND_FLOOR and sum(s) / len(s) < SEEN_SHORT * served:
        return Finding(
            "FAIL",
            "movement",
            label,
            f"the scaler saw {_range(s)} req/s over the last {minutes} while the fleet served "
            f"{_range(d)} req/s ({demand_what}); the answer "
            + (f"held at {a[0]:g}" if max(a) == min(a) else f"ranged {_range(a)}"),
            "the trigger does not read this fleet's series: see the series check",
        )
    if not moved(d):
        return Finding(
            "OK",
            "movement",
            label,
            f"demand was flat ({_range(d)} req/s); the answer ranged {_range(a)}",
        )
    if max(a) > min(a):
        return Finding(
            "OK",
            "movement",
            label,
            f"demand ranged {_range(d)} req/s and the answer {_range(a)} over the last {minutes}",
        )
    if s:
        return Finding(
            "OK",
            "movement",
            label,
            f"demand ranged {_range(d)} req/s and the scaler saw {_range(s)}; the answer "
            f"held at {a[0]:g}, enough for it",
        )
    return Finding(
        "WARN",
        "movement",
        label,
        f"the answer held at {a[0]:g} over the last {minutes} while demand ({demand_what}) "
        f"ranged {_range(d)} req/s",
        "if the trigger should follow demand, its matchers miss it: see the series check"
        if answer_is_query
        else "if more replicas were due, the trigger does not see this demand: see the "
        "series check",
    )


# --------------------------------------------------------------------------
# hpa: the HPA reads what the scaler answers
# --------------------------------------------------------------------------


def hpa_metric_name(trigger: TriggerView) -> str:
    return f"s{trigger.index}-{METRIC_NAME}"


def check_hpa(trigger: TriggerView, hpa: HpaView, answer: float | None) -> Finding:
    """The HPA's reported value of the trigger's metric against ``answer``
    (the scaler's GetMetrics now, or a KEDA query's value now)."""
    label = trigger.label
    prefix = f"s{trigger.index}-"
    if trigger.is_prescaler:
        metric = hpa.metric(hpa_metric_name(trigger))
    else:
        metric = next((m for m in hpa.metrics if m.name.startswith(prefix)), None)
    if metric is None:
        status, reason, message = hpa.conditions.get("ScalingActive", ("", "", ""))
        why = f" (ScalingActive {status} {reason}: {message})" if status else ""
        return Finding(
            "FAIL",
            "hpa",
            label,
            f"the HPA {hpa.name} reports no {prefix}* metric{why}",
            "see `kubectl describe hpa` events and the KEDA operator's log; the HPA "
            "cannot scale on a metric it cannot read",
        )
    if metric.average_value is not None:
        total = metric.average_value * max(hpa.current_replicas, 1)
        shown = f"{metric.average_value:g} x {hpa.current_replicas} replicas = {total:g}"
    elif metric.value is not None:
        total = metric.value
        shown = f"{total:g}"
    else:
        return Finding("FAIL", "hpa", label, f"the HPA has {metric.name} without a value")
    if answer is None:
        return Finding(
            "WARN", "hpa", label, f"the HPA reads {metric.name} {shown}; no answer to compare"
        )
    if abs(total - answer) <= max(0.5, 0.1 * abs(answer)):
        return Finding("OK", "hpa", label, f"the HPA reads {metric.name} {shown}, as answered")
    return Finding(
        "WARN",
        "hpa",
        label,
        f"the HPA reads {metric.name} {shown}, the answer now is {answer:g}",
        "rerun with a fresh `kubectl get hpa -o json` (the HPA syncs every 15 s); if it "
        "persists, KEDA is polling another scaler or another object",
    )


# --------------------------------------------------------------------------
# max: maxReplicaCount is above the recent need
# --------------------------------------------------------------------------


def check_max(
    trigger: TriggerView,
    obj: ObjectView,
    peak_need: float | None,
    capped: float | None,
    hpa: HpaView | None,
    window_s: float,
) -> Finding:
    """``peak_need``: the most replicas asked for over the window (the scaler's
    answer, or a KEDA query's value over its threshold); ``capped``: decisions
    the scaler clamped at ``maxReplicas`` over the window."""
    label = trigger.label
    top = obj.max_replicas
    minutes = f"{window_s / 60:g} min"
    fix = f"raise maxReplicaCount above {top} (and maxReplicas with it)"
    if capped is not None and capped > 0:
        return Finding(
            "FAIL",
            "max",
            label,
            f"the need exceeded the bound: {capped:g} decisions capped at maxReplicas over "
            f"the last {minutes}",
            fix,
        )
    if hpa is not None:
        status, reason, _ = hpa.conditions.get("ScalingLimited", ("", "", ""))
        if (
            status == "True"
            and reason == "TooManyReplicas"
            and hpa.desired_replicas >= hpa.max_replicas
        ):
            return Finding(
                "FAIL",
                "max",
                label,
                f"the HPA is limited at maxReplicas {hpa.max_replicas} (TooManyReplicas)",
                fix,
            )
    if peak_need is None:
        return Finding("WARN", "max", label, f"no need recorded over the last {minutes}")
    if peak_need > top:
        return Finding(
            "FAIL",
            "max",
            label,
            f"the need reached {peak_need:g} over the last {minutes}, above maxReplicaCount {top}",
            fix,
        )
    if peak_need >= top:
        return Finding(
            "WARN",
            "max",
            label,
            f"the need reached maxReplicaCount {top} over the last {minutes}",
            fix,
        )
    return Finding(
        "OK",
        "max",
        label,
        f"peak need {peak_need:g} over the last {minutes}, below maxReplicaCount {top}",
    )
