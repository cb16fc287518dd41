"""Parse a vLLM ``/metrics`` page into the few series the scaler needs (pure).

``prometheus_client.parser`` names counter *families* without ``_total`` but
keeps the sample name (``vllm:prompt_tokens_total``); we work on samples, so
both V0 and V1 text read the same. Garbage (HTML, truncated lines) raises
``ValueError``; a valid page without ``vllm:num_requests_running`` is not a
vLLM replica and is rejected too, so a wrong URL is never read as "idle".

Rates between two scrapes are only taken when both come from the same
process: ``process_start_time_seconds`` (prometheus_client's process
collector, which vLLM exposes) must be equal, and no counter may drop. A
restart, or a load-balanced URL answering from another pod, gives *no* rate
for that interval (``None``), never ``value / dt`` (which read a Service
alternating between two pods as tens of thousands of requests per second).
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
START_TIME = "process_start_time_seconds"

Labels = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, Labels]


@dataclass(frozen=True)
class Page:
    """The wanted samples of one scrape, keyed by (sample name, sorted labels),
    and the serving process' start time when the page has it."""

    values: Mapping[SeriesKey, float]
    start_time_s: float | None = None


def parse_vllm_text(text: str) -> Page:
    """Keep only the scaler's samples; ``ValueError`` when ``text`` is not vLLM metrics."""
    values: dict[SeriesKey, float] = {}
    start_time: float | None = None
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == START_TIME and not sample.labels:
                    start = float(sample.value)
                    start_time = start if math.isfinite(start) else None
                elif sample.name in WANTED:
                    value = float(sample.value)
                    if not math.isfinite(value) or value < 0:
                        raise ValueError(f"{sample.name} is {sample.value!r}")
                    key = (sample.name, tuple(sorted(sample.labels.items())))
                    values[key] = value
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise ValueError(f"not valid vLLM metrics text: {exc}") from exc
    if not any(name == "vllm:num_requests_running" for name, _ in values):
        raise ValueError("no vllm:num_requests_running sample: not a vLLM /metrics page")
    return Page(values, start_time)


def page_rates(previous: Page, current: Page, dt_s: float) -> dict[SeriesKey, float] | None:
    """Per-series change per second: counter rates and the signed slope of
    waiting/running; ``None`` when the two pages cannot be compared (another
    process, a counter drop, no time between them): no rate this interval."""
    if dt_s <= 0:
        return None
    if (
        previous.start_time_s is not None
        and current.start_time_s is not None
        and previous.start_time_s != current.start_time_s
    ):
        return None  # restarted, or another pod behind the same URL
    out: dict[SeriesKey, float] = {}
    for key, value in current.values.items():
        name = key[0]
        before = previous.values.get(key)
        if name in COUNTERS:
            if before is None:
                continue
            if value < before:
                return None  # a reset or another process: unknowable this interval
            out[key] = (value - before) / dt_s
        elif name in ("vllm:num_requests_waiting", "vllm:num_requests_running"):
            out[key] = (value - (before or 0.0)) / dt_s
    return out


def select(values: Mapping[SeriesKey, float], name: str, accept: object) -> Iterable[float]:
    """Values of sample ``name`` whose labels ``accept(labels_dict)`` returns true for."""
    for (sample, labels), value in values.items():
        if sample == name and accept(dict(labels)):  # type: ignore[operator]
            yield value
