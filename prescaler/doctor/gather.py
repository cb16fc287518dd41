"""Gathers what ``prescaler doctor``'s checks need, trigger by trigger.

The queries are the scaler's own (``scaler.sources.selection_for`` and
``scaler.sources.promql.build_plan``), so "returns series" is said of exactly
what ``prescaler serve`` sends, not of a look-alike.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from decision.selectors import LabelMatcher
from decision.settings import ScalerSettings
from prescaler.doctor.checks import QueryData, SeriesData
from prescaler.doctor.fetch import FetchError, PromClient, parse_exposition
from scaler.sources import selection_for
from scaler.sources.promql import build_plan

__all__ = [
    "AnswerHistory",
    "ScalerMetrics",
    "demand_expr",
    "keda_query",
    "prescaler_series",
    "read_scaler_metrics",
    "selector_text",
]

RUNNING = "vllm:num_requests_running"
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^{}]*)\}")


def selector_text(matchers: Sequence[LabelMatcher]) -> str:
    """``{a="x",b=~"y"}`` (escaped by the matchers themselves); empty for none."""
    return "{" + ",".join(m.promql() for m in matchers) + "}" if matchers else ""


def _pod(labels: Mapping[str, str]) -> str:
    return labels.get("pod") or labels.get("instance") or "?"


def _metadata_key(matcher: LabelMatcher, settings: ScalerSettings) -> str:
    if matcher.name == "model_name" and settings.model is not None:
        return "model"
    if matcher.name == "namespace" and not any(m.name == "namespace" for m in settings.selector):
        return "the ScaledObject's namespace (or the vLLM scrape's `namespace` label)"
    return "selector"


def prescaler_series(
    prom: PromClient, settings: ScalerSettings, namespace: str, rate_window_s: float
) -> SeriesData | None:
    """The scaler's queries for one trigger, run now; None for a source other than Prometheus."""
    spec, selection = selection_for(settings, namespace)
    if spec.kind != "prometheus":
        return None
    plan = build_plan([selection], rate_window_s)
    counts = {signal: len(prom.query(q)) for signal, q in plan.queries.items()}
    matchers = tuple(LabelMatcher(m.name, m.op, m.value) for m in selection.matchers)
    sel = selector_text(matchers)
    pods = tuple(sorted({_pod(s.labels) for s in prom.query(f"{RUNNING}{sel}")}))
    culprits: list[tuple[str, str, tuple[str, ...]]] = []
    ns_pods = 0
    down: tuple[tuple[str, str], ...] = ()
    if not pods:
        for m in matchers:
            others = selector_text([x for x in matchers if x is not m])
            found = prom.query(f"count by ({m.name}) ({RUNNING}{others})")
            if found:
                values = tuple(sorted({s.labels.get(m.name) or "(no label)" for s in found}))
                culprits.append((_metadata_key(m, settings), m.promql(), values))
        ns = selector_text([LabelMatcher("namespace", "=", namespace)])
        ns_pods = len({_pod(s.labels) for s in prom.query(f"{RUNNING}{ns}")})
        down = _down_targets(prom, sel)
    gateway = None
    if settings.gateway_rate_query:
        try:
            gateway = len(prom.query(settings.gateway_rate_query))
        except FetchError:
            gateway = 0
    return SeriesData(
        selection=sel or "{}",
        counts=counts,
        pods=pods,
        culprits=tuple(culprits),
        namespace_pods=ns_pods,
        down_targets=down,
        gateway_series=gateway,
    )


def _down_targets(prom: PromClient, sel: str) -> tuple[tuple[str, str], ...]:
    """Targets whose vLLM series of this selection vanished while their scrape fails."""
    expr = (
        f"count by (instance, job) ((last_over_time({RUNNING}{sel}[1h]) unless {RUNNING}{sel})"
        " and on (instance, job) (up == 0))"
    )
    lost = {(s.labels.get("instance", ""), s.labels.get("job", "")) for s in prom.query(expr)}
    if not lost:
        return ()
    errors: dict[tuple[str, str], str] = {}
    try:
        for target in prom.targets():
            labels = target.get("labels") or {}
            key = (labels.get("instance", ""), labels.get("job", ""))
            if key in lost:
                errors[key] = str(target.get("lastError") or "")
    except FetchError:
        pass
    return tuple(sorted((inst, errors.get((inst, job), "")) for inst, job in lost))


def demand_expr(
    settings: ScalerSettings | None, namespace: str, pods_matched: bool, rate_window_s: float
) -> tuple[str, str]:
    """The demand the answer should follow, and how the report names it: the
    gateway's rate where the trigger has one (it exists at zero replicas),
    else vLLM's completions in the trigger's selection, or in the whole
    namespace when the selection matches nothing (what the fleet really served)."""
    window = f"{max(1, round(rate_window_s))}s"
    if settings is not None and settings.gateway_rate_query:
        return settings.gateway_rate_query, "gatewayRateQuery"
    if settings is not None and pods_matched:
        _, selection = selection_for(settings, namespace)
        sel = selector_text([LabelMatcher(m.name, m.op, m.value) for m in selection.matchers])
        what = f"vLLM completions in {sel}"
    else:
        sel = selector_text([LabelMatcher("namespace", "=", namespace)])
        what = f"vLLM completions in namespace {namespace}"
    return f"sum(rate(vllm:request_success_total{sel}[{window}]))", what


def keda_query(prom: PromClient, query: str) -> QueryData:
    """A KEDA ``prometheus`` trigger's query now, and which of its selectors match nothing."""
    try:
        found = prom.query(query)
    except FetchError as exc:
        return QueryData(query, 0, None, error=str(exc))
    value = found[0].value if len(found) == 1 else None
    empty: list[str] = []
    if not found:
        for name, inner in _SELECTOR.findall(query):
            selector = f"{name}{{{inner}}}"
            try:
                if not prom.query(f"count({selector})"):
                    empty.append(selector)
            except FetchError:
                continue
    return QueryData(query, len(found), value, tuple(empty))


@dataclass(frozen=True)
class ScalerMetrics:
    """The scaler's ``/metrics`` for one object: its answer, decisions by reason, sources."""

    tracked: bool
    desired: float | None
    decisions: Mapping[str, float]
    source_up: Mapping[str, float]


def read_scaler_metrics(text: str, namespace: str, name: str) -> ScalerMetrics:
    desired = None
    decisions: dict[str, float] = {}
    source_up: dict[str, float] = {}
    for sample, labels, value in parse_exposition(text):
        if sample == "prescaler_source_up":
            source_up[labels.get("source", "")] = value
            continue
        if labels.get("namespace") != namespace or labels.get("scaledobject") != name:
            continue
        if sample == "prescaler_desired_replicas":
            desired = value
        elif sample == "prescaler_decisions_total":
            decisions[labels.get("reason", "")] = value
    return ScalerMetrics(desired is not None, desired, decisions, source_up)


def decision_deltas(before: ScalerMetrics, after: ScalerMetrics) -> dict[str, float]:
    """Decisions by reason made between two scrapes (a counter that went back restarted)."""
    out = {}
    for reason, value in after.decisions.items():
        prior = before.decisions.get(reason, 0.0)
        out[reason] = value - prior if value >= prior else value
    return out


@dataclass(frozen=True)
class AnswerHistory:
    """Over the window: the answer's series, the demand the scaler saw, the
    answer's peak, decisions capped at maxReplicas."""

    series: list[tuple[float, float]]
    seen: list[tuple[float, float]]
    peak: float | None
    capped: float | None


def answer_history(
    prom: PromClient,
    namespace: str,
    name: str,
    window: tuple[float, float, float],
    seen_signal: str = "requests_per_s",
) -> AnswerHistory:
    """From Prometheus (which scrapes the scaler): ``prescaler_desired_replicas``,
    ``prescaler_demand{signal=seen_signal}`` and the ``max_replicas`` decisions."""
    start_s, end_s, step_s = window
    labels = ",".join(
        LabelMatcher(k, "=", v).promql()
        for k, v in (("namespace", namespace), ("scaledobject", name))
    )
    found = prom.query_range(f"max(prescaler_desired_replicas{{{labels}}})", start_s, end_s, step_s)
    series = found[0][1] if found else []
    seen_q = prom.query_range(
        f'max(prescaler_demand{{{labels},signal="{seen_signal}"}})', start_s, end_s, step_s
    )
    seen = seen_q[0][1] if seen_q else []
    finite = [v for _, v in series if math.isfinite(v)]
    span = f"{max(1, round(end_s - start_s))}s"
    capped_q = prom.query(
        f'sum(increase(prescaler_decisions_total{{{labels},reason="max_replicas"}}[{span}]))',
        at_s=end_s,
    )
    capped = capped_q[0].value if capped_q else None
    return AnswerHistory(series, seen, max(finite) if finite else None, capped)
