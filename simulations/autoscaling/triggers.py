"""A ScaledObject's triggers, parsed: the prescaler, ``prometheus`` and ``cron``.

One job: each entry of ``spec.triggers`` becomes a :class:`TriggerSpec` with
KEDA's defaults and validation, failing with a message naming the trigger and
the key. The prescaler's metadata goes through
:func:`decision.settings.parse_settings`, the live scaler's own parser, so bad
metadata fails here with the same error. Evaluation is
:mod:`simulations.autoscaling.trigger_state`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from decision.settings import ScalerSettings, parse_settings
from simulations.autoscaling.cron import CronWindow, parse_cron
from simulations.autoscaling.promql import PromExpr, parse_promql, rate_windows

__all__ = [
    "COUNTER_METRICS",
    "GAUGE_METRICS",
    "SUPPORTED_TRIGGERS",
    "PromQuery",
    "TriggerSpec",
    "parse_query",
    "parse_triggers",
]

GAUGE_METRICS: frozenset[str] = frozenset(
    {
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:gpu_cache_usage_perc",
        "vllm:kv_cache_usage_perc",
    }
)
"""vLLM gauges a prometheus trigger may aggregate directly (the simulator emulates these)."""

COUNTER_METRICS: frozenset[str] = frozenset(
    {
        "vllm:request_success_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:num_preemptions_total",
    }
)
"""vLLM counters a prometheus trigger may take ``sum(rate(...))`` of."""

SUPPORTED_TRIGGERS = ("external", "external-push", "prometheus", "cron")

TriggerKind = Literal["prescaler", "prometheus", "cron"]


@dataclass(frozen=True)
class PromQuery:
    """A simple prometheus trigger query: ``aggregation(metric{labels})`` or
    ``sum(rate(metric{labels}[window]))`` (kept for callers that read its
    parts; every query also has a :data:`~simulations.autoscaling.promql.PromExpr`).
    Labels are kept as text: the simulator runs one Deployment, so they
    select nothing."""

    aggregation: Literal["sum", "avg", "max"]
    metric: str
    rate_window_s: float | None = None
    labels: str = ""


@dataclass(frozen=True)
class TriggerSpec:
    """One trigger of a ScaledObject, parsed."""

    kind: TriggerKind
    metadata: Mapping[str, str]
    settings: ScalerSettings | None
    query: PromQuery | None
    threshold: float | None
    metric_type: Literal["AverageValue", "Value"] = "AverageValue"
    activation_threshold: float = 0.0
    """prometheus: KEDA calls the trigger active when the value is > this."""
    name: str | None = None
    """``triggers[].name``: how ``scalingModifiers.formula`` refers to it."""
    expr: PromExpr | None = None
    """prometheus: the parsed query."""
    ignore_null_values: bool = True
    """prometheus: an empty result / NaN / Inf reads 0 (True) or is an error."""
    use_cached_metrics: bool = False
    """The HPA path reads the value KEDA's last poll stored."""
    cron: CronWindow | None = None
    """cron: the window and its desiredReplicas."""

    @property
    def target(self) -> float:
        """The HPA target KEDA derives: ``threshold`` (prometheus), else 1."""
        return self.threshold if self.kind == "prometheus" and self.threshold else 1.0

    @property
    def rate_windows(self) -> tuple[float, ...]:
        """Range windows the trigger's query reads (the view keeps samples that long)."""
        return () if self.expr is None else rate_windows(self.expr)


def parse_triggers(
    source: str, triggers: Any, *, epoch_s: float
) -> tuple[tuple[TriggerSpec, ...], bool]:
    """Every trigger of ``spec.triggers`` and whether one is ``external-push``.

    ``epoch_s`` is the Unix time of simulated t = 0, for cron triggers.
    """
    if not isinstance(triggers, list) or not triggers:
        raise ValueError(f"{source}: spec.triggers must be a non-empty list")
    parsed: list[TriggerSpec] = []
    push = False
    for i, trig in enumerate(triggers):
        where = f"{source}: triggers[{i}]"
        spec, is_push = _trigger(where, trig, epoch_s)
        parsed.append(spec)
        push = push or is_push
    if sum(t.kind == "prescaler" for t in parsed) > 1:
        raise ValueError(f"{source}: at most one prescaler (external) trigger is supported")
    names = [t.name for t in parsed if t.name is not None]
    if len(names) != len(set(names)):
        raise ValueError(f"{source}: trigger names must be unique, got {names}")
    return tuple(parsed), push


def _trigger(where: str, trig: Any, epoch_s: float) -> tuple[TriggerSpec, bool]:
    if not isinstance(trig, Mapping):
        raise ValueError(f"{where}: a trigger must be a mapping")
    kind = trig.get("type")
    if kind not in SUPPORTED_TRIGGERS:
        raise ValueError(
            f"{where}: trigger type {kind!r} is not supported; "
            f"supported: {', '.join(SUPPORTED_TRIGGERS)}"
        )
    unknown = sorted(set(trig) - {"type", "name", "metadata", "metricType", "useCachedMetrics"})
    if unknown:
        raise ValueError(f"{where}: trigger field {unknown[0]!r} is not supported")
    metric_type = trig.get("metricType", "AverageValue")
    if metric_type not in ("AverageValue", "Value"):
        raise ValueError(
            f"{where}: metricType {metric_type!r} is not supported; supported: AverageValue, Value"
        )
    name = trig.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"{where}: name must be a non-empty string, got {name!r}")
    cached = trig.get("useCachedMetrics", False)
    if not isinstance(cached, bool):
        raise ValueError(f"{where}: useCachedMetrics must be true or false, got {cached!r}")
    metadata = trig.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise ValueError(f"{where}: trigger metadata must be a mapping")
    if kind in ("external", "external-push"):
        if metric_type != "AverageValue":
            raise ValueError(
                f"{where}: the prescaler trigger answers a replica count with target 1; "
                f"metricType must be AverageValue, got {metric_type!r}"
            )
        settings = parse_settings(metadata)  # the live scaler's parser: same errors
        spec = TriggerSpec(
            "prescaler",
            dict(metadata),
            settings,
            None,
            None,
            "AverageValue",
            name=name,
            use_cached_metrics=cached,
        )
        return spec, kind == "external-push"
    _string_values(where, metadata)
    if kind == "cron":
        if cached:
            raise ValueError(f"{where}: useCachedMetrics is not allowed for a cron trigger")
        return _cron(where, metadata, metric_type, name, epoch_s), False
    return _prometheus(where, metadata, metric_type, name, cached), False


def _string_values(where: str, metadata: Mapping[str, Any]) -> None:
    for key, value in metadata.items():
        if not isinstance(value, str):
            raise ValueError(
                f"{where}: trigger metadata {key!r} must be a string (quote it), got {value!r}"
            )


def _prometheus(
    where: str, metadata: Mapping[str, Any], metric_type: str, name: str | None, cached: bool
) -> TriggerSpec:
    if "query" not in metadata:
        raise ValueError(f"{where}: the prometheus trigger needs metadata.query")
    if "threshold" not in metadata:
        raise ValueError(f"{where}: the prometheus trigger needs metadata.threshold")
    threshold = _float(where, "threshold", metadata["threshold"], positive=True)
    activation = 0.0
    if "activationThreshold" in metadata:
        activation = _float(where, "activationThreshold", metadata["activationThreshold"])
    ignore = metadata.get("ignoreNullValues", "true").strip().lower()
    if ignore not in ("true", "false"):
        raise ValueError(
            f"{where}: metadata.ignoreNullValues must be true or false, got {ignore!r}"
        )
    text = metadata["query"]
    expr = parse_promql(text, where)
    try:
        simple: PromQuery | None = parse_query(text, where)
    except ValueError:
        simple = None
    return TriggerSpec(
        "prometheus",
        dict(metadata),
        None,
        simple,
        threshold,
        "Value" if metric_type == "Value" else "AverageValue",
        activation,
        name=name,
        expr=expr,
        ignore_null_values=ignore == "true",
        use_cached_metrics=cached,
    )


def _cron(
    where: str, metadata: Mapping[str, Any], metric_type: str, name: str | None, epoch_s: float
) -> TriggerSpec:
    for key in ("timezone", "start", "end", "desiredReplicas"):
        if key not in metadata:
            raise ValueError(f"{where}: the cron trigger needs metadata.{key}")
    raw = metadata["desiredReplicas"].strip()
    if not raw.lstrip("-").isdigit():
        raise ValueError(f"{where}: metadata.desiredReplicas is not an integer: {raw!r}")
    try:
        window = CronWindow(
            parse_cron(metadata["start"]),
            parse_cron(metadata["end"]),
            metadata["timezone"],
            int(raw),
            epoch_s,
        )
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    return TriggerSpec(
        "cron",
        dict(metadata),
        None,
        None,
        None,
        "Value" if metric_type == "Value" else "AverageValue",
        name=name,
        cron=window,
    )


def _float(where: str, key: str, raw: str, *, positive: bool = False) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ValueError(f"{where}: metadata.{key} is not a number: {raw!r}") from None
    if not math.isfinite(value) or (positive and value <= 0):
        bound = "finite and > 0" if positive else "finite"
        raise ValueError(f"{where}: metadata.{key} must be {bound}, got {raw!r}")
    return value


_METRIC = r"(?P<metric>[a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{(?P<labels>[^{}]*)\})?"
_PLAIN = re.compile(rf"^(?P<agg>sum|avg|max)\s*\(\s*{_METRIC}\s*\)$")
_RATE = re.compile(
    rf"^(?P<agg>sum)\s*\(\s*rate\s*\(\s*{_METRIC}\s*\[\s*(?P<window>[0-9a-z]+)\s*\]\s*\)\s*\)$"
)
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_S = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
    "y": 31536000.0,
}


def parse_query(text: str, source: str = "<query>") -> PromQuery:
    """``sum|avg|max(M{...})`` over a vLLM gauge, or ``sum(rate(M{...}[w]))``
    over a vLLM counter; a ``ValueError`` saying what is supported otherwise."""
    q = " ".join(text.split())
    supported = (
        "supported: sum|avg|max(<vLLM gauge>{...}) or sum(rate(<vLLM counter>{...}[window]))"
    )

    def emulated(match: re.Match[str], kind: str, known: Collection[str]) -> str:
        """The query's metric, if the simulator emulates it as a vLLM ``kind``."""
        metric = match.group("metric")
        if metric not in known:
            raise ValueError(
                f"{source}: query {q!r}: metric {metric!r} is not a vLLM {kind} the simulator "
                f"emulates ({', '.join(sorted(known))}); {supported}"
            )
        return metric

    m = _PLAIN.match(q)
    if m is not None:
        metric = emulated(m, "gauge", GAUGE_METRICS)
        agg: Any = m.group("agg")
        return PromQuery(agg, metric, None, (m.group("labels") or "").strip())
    m = _RATE.match(q)
    if m is not None:
        metric = emulated(m, "counter", COUNTER_METRICS)
        window = m.group("window")
        parts = _DURATION.findall(window)
        if not parts or "".join(n + u for n, u in parts) != window:
            raise ValueError(f"{source}: query {q!r}: bad range {window!r}")
        seconds = sum(int(n) * _UNIT_S[u] for n, u in parts)
        if seconds <= 0:
            raise ValueError(f"{source}: query {q!r}: the rate range must be > 0")
        return PromQuery("sum", metric, seconds, (m.group("labels") or "").strip())
    raise ValueError(f"{source}: query {q!r} is not supported; {supported}")
