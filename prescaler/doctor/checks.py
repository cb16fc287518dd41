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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from prescaler.doctor.inputs import HpaView, ObjectView, TriggerView

__all__ = [
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

Level = Literal["OK", "WARN", "FAIL"]
Series = Sequence[tuple[float, float]]

METRIC_NAME = "prescaler-desired-replicas"
"""The scaler's one metric (``scaler.service.METRIC_NAME``); the HPA names it
``s{index}-prescaler-desired-replicas``."""
HELD_REASONS = frozenset({"stale_hold", "fallback", "no_data", "warming_up"})
"""Decision reasons that mean the answer does not come from fresh data."""
REQUIRED_SIGNALS = ("waiting", "running", "replicas", "completions", "kv_sum")
"""Signals every serving vLLM (either metric generation) has; the others are optional."""
DEMAND_MOVED = 0.25
"""Demand moved when its range over the window is at least this fraction of its mean."""
DEMAND_FLOOR = 0.05
"""... and at least this many requests per second (a trickle's noise is not a move)."""


@dataclass(frozen=True)
class Finding:
    """One line of the report."""

    level: Level
    check: str
    subject: str
    cause: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.level:<4} {self.check} [{self.subject}]: {self.cause}"
        return text + (f" -- fix: {self.fix}" if self.fix else "")


def exit_code(findings: Iterable[Finding]) -> int:
    """1 when any check failed, else 0 (warnings pass)."""
    return 1 if any(f.level == "FAIL" for f in findings) else 0


def summary(findings: Sequence[Finding]) -> str:
    counts = {lvl: sum(f.level == lvl for f in findings) for lvl in ("FAIL", "WARN", "OK")}
    return "doctor: " + ", ".join(f"{n} {lvl}" for lvl, n in counts.items())


# --------------------------------------------------------------------------
# bounds: the trigger's minReplicas/maxReplicas against the ScaledObject's counts
# --------------------------------------------------------------------------


def check_bounds(obj: ObjectView, trigger: TriggerView, lo: int, hi: int) -> Finding:
    """``lo``/``hi``: the bounds the scaler parsed from the trigger's metadata."""
    so = f"minReplicaCount/maxReplicaCount {obj.min_replicas}/{obj.max_replicas}"
    fix = (
        f'set minReplicas: "{obj.min_replicas}" and maxReplicas: "{obj.max_replicas}" in the '
        "trigger, or build it with manifests/components/replica-bounds, which copies them"
    )
    if (lo, hi) == (obj.min_replicas, obj.max_replicas):
        return Finding("OK", "bounds", trigger.label, f"minReplicas/maxReplicas {lo}/{hi} = {so}")
    if hi < obj.max_replicas:
        return Finding(
            "FAIL",
            "bounds",
            trigger.label,
            f"the scaler caps its answer at maxReplicas {hi}, below maxReplicaCount "
            f"{obj.max_replicas}: the fleet never grows past {hi}",
            fix,
        )
    if lo > obj.min_replicas:
        level: Level = "FAIL" if obj.min_replicas == 0 else "WARN"
        why = (
            "IsActive stays true, so KEDA never scales to zero"
            if obj.min_replicas == 0
            else f"the fleet never goes below {lo}"
        )
        return Finding(
            level,
            "bounds",
            trigger.label,
            f"minReplicas {lo} above minReplicaCount {obj.min_replicas}: {why}",
            fix,
        )
    return Finding(
        "WARN",
        "bounds",
        trigger.label,
        f"minReplicas/maxReplicas {lo}/{hi} differ from {so} (the HPA clamps to the "
        "ScaledObject's, but the scaler sizes balloons, fallbacks and the max_replicas "
        "reason by its own)",
        fix,
    )


# --------------------------------------------------------------------------
# series: every query a trigger sends returns series for the pods it should
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class SeriesData:
    """What the scaler's queries for one prescaler trigger return now."""

    selection: str
    """The label matchers, as PromQL (``{namespace="llm",model_name="m"}``)."""
    counts: Mapping[str, int]
    """Signal -> series the scaler's query for it returns."""
    pods: tuple[str, ...]
    """Pods (or scrape targets) with ``vllm:num_requests_running`` in the selection."""
    culprits: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    """(metadata key, matcher, values its label has once it is dropped) for each
    matcher without which series appear."""
    namespace_pods: int = 0
    """Pods with vLLM series in the ScaledObject's namespace, whatever the other matchers."""
    down_targets: tuple[tuple[str, str], ...] = ()
    """(instance, last scrape error) of targets that served the selection and now fail."""
    gateway_series: int | None = None
    """Series ``gatewayRateQuery`` returns; None when the trigger has none."""


def _names(items: Sequence[str], limit: int = 4) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f", +{len(items) - limit} more" if len(items) > limit else "")


def check_series(
    trigger: TriggerView, data: SeriesData, expected_pods: int | None
) -> list[Finding]:
    """``expected_pods``: the pods the target runs (the HPA's ``currentReplicas``), if known."""
    out = [_vllm_series(trigger, data, expected_pods)]
    if data.gateway_series is not None:
        if data.gateway_series == 0:
            out.append(
                Finding(
                    "FAIL",
                    "series",
                    f"{trigger.label} gatewayRateQuery",
                    "gatewayRateQuery returns no series: the scaler reads it as unknown, so "
                    "the fleet never wakes from zero on it",
                    "check its label matchers in Prometheus; append `or vector(0)` if the "
                    "series only appears after the first request",
                )
            )
        else:
            out.append(
                Finding(
                    "OK",
                    "series",
                    f"{trigger.label} gatewayRateQuery",
                    f"gatewayRateQuery returns {data.gateway_series} series",
                )
            )
    return out


def _vllm_series(trigger: TriggerView, data: SeriesData, expected: int | None) -> Finding:
    label = trigger.label
    sel = data.selection
    returning = sum(1 for n in data.counts.values() if n > 0)
    pods = len(data.pods)
    if pods == 0:
        if data.down_targets:
            down = "; ".join(f"{i}: {e or 'up == 0'}" for i, e in data.down_targets[:3])
            return Finding(
                "FAIL",
                "series",
                label,
                f"no vLLM series match {sel} now: {len(data.down_targets)} target(s) that "
                f"served them fail their scrape ({down}); the scaler holds its last answer",
                "make the pods' /metrics scrape succeed again (the pod, its port, a "
                "NetworkPolicy, Prometheus' scrape job)",
            )
        if expected == 0:
            return Finding(
                "OK",
                "series",
                label,
                f"no vLLM series match {sel}: the target runs 0 pods (gatewayRateQuery wakes it)",
            )
        if data.culprits:
            key, matcher, values = data.culprits[0]
            present = _names(list(values)) if values else "no value"
            return Finding(
                "FAIL",
                "series",
                label,
                f"no vLLM series match {sel}: {matcher} matches nothing (label has "
                f"{present} there); the scaler reads an idle fleet and never scales it",
                f"set {key} to one of: {present}",
            )
        where = (
            f"{data.namespace_pods} pod(s) in the namespace serve other models"
            if data.namespace_pods
            else "no vLLM series carry this namespace label at all"
        )
        return Finding(
            "FAIL",
            "series",
            label,
            f"no vLLM series match {sel} ({where}); the scaler reads an idle fleet",
            "scrape vLLM with its pod's namespace as label `namespace` (docs/adopt.md, "
            "step 1) and check `model`/`selector` against `count by (namespace, model_name) "
            "(vllm:num_requests_running)`",
        )
    missing = [s for s in REQUIRED_SIGNALS if data.counts.get(s, 0) == 0]
    pod_text = f"{pods} pod(s) ({_names(list(data.pods))}) match {sel}"
    total = len(data.counts)
    if expected is not None and pods < expected:
        return Finding(
            "WARN",
            "series",
            label,
            f"only {pod_text}, the target runs {expected}: the others' series are missing",
            "check that every pod is scraped with the labels the selection names",
        )
    if missing:
        return Finding(
            "WARN",
            "series",
            label,
            f"{pod_text}, but {', '.join(missing)} return(s) no series",
            "check the vLLM version's metric names (docs/contracts.md) and the scrape",
        )
    return Finding(
        "OK", "series", label, f"{pod_text}; {returning} of {total} queries return series"
    )


@dataclass(frozen=True)
class QueryData:
    """A KEDA ``prometheus`` trigger's query, run now."""

    query: str
    series: int
    value: float | None
    empty_selectors: tuple[str, ...] = ()
    """Vector selectors in the query that match no series on their own."""
    error: str | None = None


def check_query(trigger: TriggerView, data: QueryData) -> Finding:
    label = trigger.label
    if data.error:
        return Finding(
            "FAIL",
            "series",
            label,
            f"the query fails: {data.error}",
            "fix the PromQL (run it in Prometheus' UI)",
        )
    if data.series == 0:
        culprit = (
            f"{_names(list(data.empty_selectors), 2)} matches nothing"
            if data.empty_selectors
            else "its selectors match series, the expression keeps none"
        )
        ignore = trigger.metadata.get("ignoreNullValues", "true").lower() != "false"
        effect = (
            "KEDA reads that as 0 (ignoreNullValues defaults to true): the trigger never scales"
            if ignore
            else "KEDA's polls fail and it falls back"
        )
        return Finding(
            "FAIL",
            "series",
            label,
            f"the query returns no series ({culprit}); {effect}",
            "correct the label matchers (compare with `count by (namespace, model_name) "
            "(vllm:num_requests_running)`)",
        )
    if data.series > 1:
        return Finding(
            "FAIL",
            "series",
            label,
            f"the query returns {data.series} series; KEDA refuses an answer with more than "
            "one, so its polls fail",
            "aggregate it to one series (sum(...))",
        )
    shown = "" if data.value is None else f", now {data.value:g}"
    return Finding("OK", "series", label, f"the query returns {data.series} series{shown}")


# --------------------------------------------------------------------------
# answer: the scaler's answer for this object comes from fresh data
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ScalerAnswer:
    """What ``prescaler serve`` says about one ScaledObject."""

    tracked: bool
    """Its ``/metrics`` carries the object (KEDA has asked it)."""
    value: float | None = None
    """GetMetrics' value; None when the call failed or was not made."""
    error: str | None = None
    """The failed call's status and message, or why the scaler could not be read."""
    active: bool | None = None
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
            "give --scaler host:port and --scaler-metrics URL it answers on "
            "(kubectl -n prescaler port-forward deploy/prescaler 9090 9091)",
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
    if ans.error:
        fix = (
            "correct the key it names"
            if "INVALID_ARGUMENT" in ans.error
            else "see the cause: the scaler has no data for it, KEDA holds the current count"
        )
        return Finding("FAIL", "answer", label, f"GetMetrics: {ans.error}", fix)
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
    answer_is_query: bool = False,
) -> Finding:
    """``answer_is_query``: the answer is a KEDA trigger's own query (no history
    there means the trigger read nothing, not that Prometheus skips the scaler)."""
    label = trigger.label
    minutes = f"{window_s / 60:g} min"
    d = [v for _, v in demand if math.isfinite(v)]
    a = [v for _, v in answer if math.isfinite(v)]
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
    answer_moved = max(a) > min(a)
    if not moved(d):
        return Finding(
            "OK",
            "movement",
            label,
            f"demand was flat ({_range(d)} req/s); the answer ranged {_range(a)}",
        )
    if not answer_moved:
        return Finding(
            "FAIL",
            "movement",
            label,
            f"the answer held at {a[0]:g} over the last {minutes} while demand ({demand_what}) "
            f"ranged {_range(d)} req/s",
            "the trigger does not see this demand: see the series check",
        )
    return Finding(
        "OK",
        "movement",
        label,
        f"demand ranged {_range(d)} req/s and the answer {_range(a)} over the last {minutes}",
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
