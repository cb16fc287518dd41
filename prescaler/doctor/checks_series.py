"""``prescaler doctor``'s checks of what the triggers read: the bounds a
prescaler trigger repeats, the series each query returns, a KEDA query's answer.

Pure: functions over what ``prescaler.doctor.gather`` fetched (re-exported
by ``prescaler.doctor.checks``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from prescaler.doctor.findings import Finding, Level
from prescaler.doctor.inputs import ObjectView, TriggerView

__all__ = ["QueryData", "SeriesData", "check_bounds", "check_query", "check_series"]

REQUIRED_SIGNALS = ("waiting", "running", "replicas", "completions", "kv_sum")
"""Signals every serving vLLM (either metric generation) has; the others are optional."""


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
