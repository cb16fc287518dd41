"""Demand series from Prometheus: the PromQL text and the result conversion.

The caller runs the range query; everything around it is pure, so it can be
tested without a server. vLLM counters are rated and summed over pods *and* the V1
``engine`` label (``sum(...)`` with no ``by``: one fleet-wide series). Both
metric generations are queried: V1 (vLLM >= 0.8) and V0 expose the same counter
names, but some exporters (and prometheus_client's parser) drop ``_total``, so
each signal ORs its alternatives and the first one that has data wins.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from forecasting.series import DemandSeries, regularize

# signal -> counter names to try, in order (V1/V0 spelling, then fallbacks).
SIGNAL_COUNTERS: dict[str, tuple[str, ...]] = {
    "requests_per_s": (
        "vllm:request_success_total",
        "vllm:request_success",
        "vllm:e2e_request_latency_seconds_count",
    ),
    "prompt_tokens_per_s": ("vllm:prompt_tokens_total", "vllm:prompt_tokens"),
    "output_tokens_per_s": ("vllm:generation_tokens_total", "vllm:generation_tokens"),
}

_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _matchers(labels: Mapping[str, str]) -> str:
    """Exact-match label selectors, validated and escaped (never pasted raw)."""
    parts = []
    for key, value in sorted(labels.items()):
        if not _LABEL.match(key) or key.startswith("__"):
            raise ValueError(f"invalid Prometheus label name {key!r}")
        escaped = str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        parts.append(f'{key}="{escaped}"')
    return "{" + ",".join(parts) + "}" if parts else ""


def build_query(
    signal: str, labels: Mapping[str, str] | None = None, rate_window_s: int = 60
) -> str:
    """PromQL for ``signal`` per second, summed over pods and engines."""
    try:
        names = SIGNAL_COUNTERS[signal]
    except KeyError:
        raise ValueError(
            f"unknown signal {signal!r}; known: {', '.join(SIGNAL_COUNTERS)}"
        ) from None
    if rate_window_s < 1:
        raise ValueError(f"rate window must be >= 1 s, got {rate_window_s}")
    sel = _matchers(labels or {})
    return " or ".join(f"sum(rate({n}{sel}[{int(rate_window_s)}s]))" for n in names)


def series_from_range_result(
    result: Sequence[Mapping[str, Any]], step_s: float, *, signal: str, source: str = "prometheus"
) -> DemandSeries:
    """A ``query_range`` result (list of ``{"metric", "values"}``) -> series.

    Several result series (should the query not aggregate) are summed per
    timestamp; values arrive as strings and may be ``NaN`` (a missing sample),
    which :func:`forecasting.series.regularize` treats as a gap.
    """
    if not result:
        raise ValueError(f"{source}: the range query returned no series")
    totals: dict[float, float] = {}
    for item in result:
        try:
            pairs = item["values"]
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{source}: malformed range result item {item!r}") from exc
        for pair in pairs:
            try:
                ts, raw = float(pair[0]), float(pair[1])
            except (TypeError, ValueError, IndexError) as exc:
                raise ValueError(f"{source}: malformed sample {pair!r}") from exc
            totals[ts] = totals.get(ts, 0.0) + raw if np.isfinite(raw) else totals.get(ts, np.nan)
    times = np.array(sorted(totals))
    values = np.array([totals[t] for t in times])
    return regularize(times, values, step_s, signal=signal, source=source, start_s=float(times[0]))
