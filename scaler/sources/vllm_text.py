"""Parse a vLLM ``/metrics`` page into the few series the scaler needs (pure).

``prometheus_client.parser`` names counter *families* without ``_total`` but
keeps the sample name (``vllm:prompt_tokens_total``); we work on samples, so
both V0 and V1 text read the same. Garbage (HTML, truncated lines) raises
``ValueError``; a valid page without ``vllm:num_requests_running`` is not a
vLLM replica and is rejected too, so a wrong URL is never read as "idle".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

GAUGES = (
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
)
COUNTERS = (
    "vllm:request_success_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:num_preemptions_total",
)
WANTED = frozenset(GAUGES + COUNTERS)

Labels = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, Labels]


@dataclass(frozen=True)
class Page:
    """The wanted samples of one scrape, keyed by (sample name, sorted labels)."""

    values: Mapping[SeriesKey, float]


def parse_vllm_text(text: str) -> Page:
    """Keep only the scaler's samples; ``ValueError`` when ``text`` is not vLLM metrics."""
    values: dict[SeriesKey, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in WANTED:
                    value = float(sample.value)
                    if not math.isfinite(value) or value < 0:
                        raise ValueError(f"{sample.name} is {sample.value!r}")
                    key = (sample.name, tuple(sorted(sample.labels.items())))
                    values[key] = value
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise ValueError(f"not valid vLLM metrics text: {exc}") from exc
    if not any(name == "vllm:num_requests_running" for name, _ in values):
        raise ValueError("no vllm:num_requests_running sample: not a vLLM /metrics page")
    return Page(values)


def page_rates(previous: Page, current: Page, dt_s: float) -> dict[SeriesKey, float]:
    """Per-series change per second: counter rates (a drop is a restart: the
    new value counts from zero) and the signed slope of waiting/running."""
    if dt_s <= 0:
        return {}
    out: dict[SeriesKey, float] = {}
    for key, value in current.values.items():
        name = key[0]
        before = previous.values.get(key)
        if name in COUNTERS:
            if before is None:
                continue
            out[key] = (value - before if value >= before else value) / dt_s
        elif name in ("vllm:num_requests_waiting", "vllm:num_requests_running"):
            out[key] = (value - (before or 0.0)) / dt_s
    return out


def select(values: Mapping[SeriesKey, float], name: str, accept: object) -> Iterable[float]:
    """Values of sample ``name`` whose labels ``accept(labels_dict)`` returns true for."""
    for (sample, labels), value in values.items():
        if sample == name and accept(dict(labels)):  # type: ignore[operator]
            yield value
