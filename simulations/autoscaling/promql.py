"""The PromQL of a KEDA ``prometheus`` trigger, parsed once, evaluated on the emulated Prometheus.

A real parser (``promql-parser``) because users write
``histogram_quantile(0.9, sum by (le) (rate(...[1m])))`` or ``sum(A) /
sum(B)``, which a regular expression refuses or misreads. The text becomes
the small picklable tree below; what evaluates is listed in
docs/simulator.md, and anything else is a :class:`PromQLError` naming the
construct. Label matchers select nothing (one Deployment), and the query is
evaluated at the view's last scrape, like an instant query.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import promql_parser as pp

from engine.metrics import TTFT_BUCKETS_V1
from simulations.autoscaling.formula import float64_arith
from simulations.scrape import COUNTERS, GATEWAY_COUNTER, GAUGES, PrometheusView

__all__ = [
    "Aggregate",
    "Binary",
    "CounterRate",
    "Negate",
    "Number",
    "PromExpr",
    "PromQLError",
    "QueryResult",
    "TtftQuantile",
    "evaluate",
    "parse_promql",
    "rate_windows",
]

GAUGE_ALIASES = {"vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc"}
"""vLLM's pre-0.12 name of the KV-cache gauge, read as the new one."""
TTFT_BUCKET = "vllm:time_to_first_token_seconds_bucket"
"""The histogram ``histogram_quantile`` may read."""
_GAUGE_AGGREGATIONS = ("sum", "avg", "max", "count")
_SUPPORTED = (
    "supported: sum|avg|max|count(<vLLM gauge>), sum(rate|increase(<counter>[w])), "
    f"histogram_quantile(q, sum by (le) (rate({TTFT_BUCKET}[w]))), numbers, and + - * / "
    "between them"
)


class PromQLError(ValueError):
    """A query the simulator cannot evaluate, naming what is not supported."""


@dataclass(frozen=True)
class Number:
    """A number literal: a PromQL scalar."""

    value: float


@dataclass(frozen=True)
class Aggregate:
    """``op(gauge{labels})`` over one series per Ready pod."""

    op: Literal["sum", "avg", "max", "count"]
    metric: str
    labels: str = ""


@dataclass(frozen=True)
class CounterRate:
    """``sum(rate(counter{labels}[window]))`` (``increase``: times the window)."""

    metric: str
    window_s: float
    labels: str = ""
    increase: bool = False


@dataclass(frozen=True)
class TtftQuantile:
    """``histogram_quantile(q, sum by (le) (rate(TTFT_bucket[window])))``."""

    quantile: float
    window_s: float
    labels: str = ""


@dataclass(frozen=True)
class Negate:
    """Unary minus."""

    arg: PromExpr


@dataclass(frozen=True)
class Binary:
    """``lhs op rhs`` for an arithmetic ``op``."""

    op: Literal["+", "-", "*", "/"]
    lhs: PromExpr
    rhs: PromExpr


PromExpr = Number | Aggregate | CounterRate | TtftQuantile | Negate | Binary


@dataclass(frozen=True)
class QueryResult:
    """An evaluated query: ``value`` None is an empty vector (no series)."""

    value: float | None
    scalar: bool


# ---------------------------------------------------------------- parsing
def parse_promql(text: str, source: str = "<query>") -> PromExpr:
    """``text`` as a :data:`PromExpr`; a :class:`PromQLError` naming what is not supported."""
    q = " ".join(text.split())
    try:
        node = pp.parse(q)
    except ValueError as exc:
        raise PromQLError(f"{source}: query {q!r} is not valid PromQL ({exc})") from None
    return _convert(node, q, source)


def _err(source: str, q: str, what: str) -> PromQLError:
    return PromQLError(f"{source}: query {q!r}: {what} is not supported; {_SUPPORTED}")


def _convert(node: object, q: str, source: str) -> PromExpr:
    if isinstance(node, pp.ParenExpr):
        return _convert(node.expr, q, source)
    if isinstance(node, pp.NumberLiteral):
        return Number(float(node.val))
    if isinstance(node, pp.UnaryExpr):
        return Negate(_convert(node.expr, q, source))
    if isinstance(node, pp.BinaryExpr):
        op = str(node.op)
        if op not in ("+", "-", "*", "/"):
            raise _err(source, q, f"the operator {op!r}")
        if node.modifier is not None and str(node.modifier).strip():
            raise _err(source, q, f"the binary modifier {str(node.modifier).strip()!r}")
        lhs = _convert(node.lhs, q, source)
        rhs = _convert(node.rhs, q, source)
        return Binary(op, lhs, rhs)  # type: ignore[arg-type]
    if isinstance(node, pp.AggregateExpr):
        return _aggregate(node, q, source)
    if isinstance(node, pp.Call):
        name = node.func.name
        if name == "histogram_quantile":
            return _quantile(node, q, source)
        if name in ("rate", "increase"):
            rate = _counter_rate(node, q, source)
            if rate.metric != GATEWAY_COUNTER:
                raise _err(
                    source, q, f"{name}() of {rate.metric!r} without sum() (one series per pod)"
                )
            return rate
        raise _err(source, q, f"the function {name}()")
    if isinstance(node, pp.VectorSelector):
        raise _err(
            source,
            q,
            f"the bare selector {node.name!r} (one series per pod, which KEDA refuses); "
            "aggregate it",
        )
    raise _err(source, q, f"the expression {type(node).__name__}")


def _labels(vs: pp.VectorSelector) -> str:
    text = str(vs.matchers)
    return text[1:-1].strip() if text.startswith("{") and text.endswith("}") else text


def _plain_selector(node: object, q: str, source: str) -> pp.VectorSelector:
    if not isinstance(node, pp.VectorSelector):
        raise _err(source, q, f"the expression {str(node)!r} inside an aggregation")
    if node.offset is not None or node.at is not None:
        raise _err(source, q, "offset / @ modifiers")
    if node.name is None:
        raise _err(source, q, "a selector without a metric name")
    return node


def _aggregate(node: pp.AggregateExpr, q: str, source: str) -> PromExpr:
    op = str(node.op)
    if node.modifier is not None or node.param is not None:
        raise _err(source, q, f"{op} with by/without or a parameter")
    inner = node.expr
    while isinstance(inner, pp.ParenExpr):
        inner = inner.expr
    if isinstance(inner, pp.Call) and inner.func.name in ("rate", "increase"):
        if op != "sum":
            raise _err(source, q, f"{op}(rate(...)) (only sum of a rate)")
        return _counter_rate(inner, q, source)
    vs = _plain_selector(inner, q, source)
    metric = GAUGE_ALIASES.get(vs.name or "", vs.name or "")
    if metric not in GAUGES:
        raise _err(
            source,
            q,
            f"{op}({vs.name}): {vs.name!r} is not a vLLM gauge the simulator emulates "
            f"({', '.join(sorted(GAUGES))})",
        )
    if op not in _GAUGE_AGGREGATIONS:
        raise _err(source, q, f"the aggregation {op!r}")
    return Aggregate(op, metric, _labels(vs))  # type: ignore[arg-type]


def _range_s(node: pp.MatrixSelector, q: str, source: str) -> float:
    seconds = node.range.total_seconds()
    if not seconds > 0:
        raise _err(source, q, "a range of 0")
    return float(seconds)


def _counter_rate(node: pp.Call, q: str, source: str) -> CounterRate:
    arg = node.args[0] if len(node.args) == 1 else None
    if not isinstance(arg, pp.MatrixSelector):
        raise _err(source, q, f"{node.func.name}() of anything but a range selector")
    vs = _plain_selector(arg.vector_selector, q, source)
    metric = vs.name or ""
    if metric not in COUNTERS and metric != GATEWAY_COUNTER:
        raise _err(
            source,
            q,
            f"{node.func.name}({metric}): {metric!r} is not a counter the simulator emulates "
            f"({', '.join([*sorted(COUNTERS), GATEWAY_COUNTER])})",
        )
    return CounterRate(metric, _range_s(arg, q, source), _labels(vs), node.func.name == "increase")


def _quantile(node: pp.Call, q: str, source: str) -> TtftQuantile:
    shape = f"histogram_quantile(q, sum by (le) (rate({TTFT_BUCKET}[w])))"
    if len(node.args) != 2 or not isinstance(node.args[0], pp.NumberLiteral):
        raise _err(source, q, f"histogram_quantile not of the form {shape}")
    agg = node.args[1]
    while isinstance(agg, pp.ParenExpr):
        agg = agg.expr
    mod = getattr(agg, "modifier", None)
    if not (
        isinstance(agg, pp.AggregateExpr)
        and str(agg.op) == "sum"
        and mod is not None
        and list(mod.labels) == ["le"]
        and str(mod).startswith("by")
        and isinstance(agg.expr, pp.Call)
        and agg.expr.func.name == "rate"
    ):
        raise _err(source, q, f"histogram_quantile not of the form {shape}")
    call = agg.expr
    arg = call.args[0] if len(call.args) == 1 else None
    if not isinstance(arg, pp.MatrixSelector):
        raise _err(source, q, f"histogram_quantile not of the form {shape}")
    vs = _plain_selector(arg.vector_selector, q, source)
    if vs.name != TTFT_BUCKET:
        raise _err(
            source, q, f"the histogram {vs.name!r} (the simulator emulates only {TTFT_BUCKET})"
        )
    return TtftQuantile(float(node.args[0].val), _range_s(arg, q, source), _labels(vs))


# ------------------------------------------------------------- evaluation
def rate_windows(expr: PromExpr) -> tuple[float, ...]:
    """Every range window ``expr`` reads (the view must keep samples that long)."""
    if isinstance(expr, CounterRate | TtftQuantile):
        return (expr.window_s,)
    if isinstance(expr, Negate):
        return rate_windows(expr.arg)
    if isinstance(expr, Binary):
        return rate_windows(expr.lhs) + rate_windows(expr.rhs)
    return ()


def evaluate(expr: PromExpr, view: PrometheusView) -> QueryResult:
    """``expr`` as an instant query at the view's last scrape."""
    if isinstance(expr, Number):
        return QueryResult(expr.value, True)
    if isinstance(expr, Aggregate):
        return QueryResult(view.gauge(expr.metric, expr.op), False)
    if isinstance(expr, CounterRate):
        rate = view.counter_rate(expr.metric, expr.window_s)
        if rate is not None and expr.increase:
            rate *= expr.window_s
        return QueryResult(rate, False)
    if isinstance(expr, TtftQuantile):
        rates = view.ttft_bucket_rates(expr.window_s)
        if rates is None:
            return QueryResult(None, False)
        return QueryResult(bucket_quantile(expr.quantile, TTFT_BUCKETS_V1, rates), False)
    if isinstance(expr, Negate):
        inner = evaluate(expr.arg, view)
        return QueryResult(None if inner.value is None else -inner.value, inner.scalar)
    lhs = evaluate(expr.lhs, view)
    rhs = evaluate(expr.rhs, view)
    scalar = lhs.scalar and rhs.scalar
    if lhs.value is None or rhs.value is None:
        return QueryResult(None, scalar)
    return QueryResult(float64_arith(expr.op, lhs.value, rhs.value), scalar)


def bucket_quantile(q: float, bounds: tuple[float, ...], cumulative: tuple[float, ...]) -> float:
    """Prometheus's ``bucketQuantile`` over finite ``bounds`` plus ``+Inf``.

    ``cumulative`` has one entry per bound and a last one for ``+Inf``. NaN
    for no observations; the upper bound of the last finite bucket when the
    rank falls in ``+Inf``; linear interpolation inside a bucket otherwise
    (the first bucket starts at 0).
    """
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    total = cumulative[-1]
    if not total > 0:
        return math.nan
    rank = q * total
    b = next(i for i, c in enumerate(cumulative) if c >= rank)
    if b == len(bounds):
        return bounds[-1]
    start = 0.0 if b == 0 else bounds[b - 1]
    below = 0.0 if b == 0 else cumulative[b - 1]
    count = cumulative[b] - below
    if count <= 0:
        return bounds[b]
    return start + (bounds[b] - start) * ((rank - below) / count)
