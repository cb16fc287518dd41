"""Parse a vLLM ``/metrics`` page into the few series the scaler needs (pure).

We work on sample names (``vllm:prompt_tokens_total``), not
``prometheus_client``'s family names, so V0 and V1 text read the same.
Garbage raises ``ValueError``, and so does a valid page that does not even
declare ``vllm:num_requests_running``: a wrong URL is never read as "idle".
Rates between two scrapes are only taken from the same process (see
:func:`page_rates`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
SLEEP_STATE = "vllm:engine_sleep_state"
CACHE_CONFIG = "vllm:cache_config_info"
SUCCESS = "vllm:request_success_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
PROMPT_BY_SOURCE = "vllm:prompt_tokens_by_source_total"
GENERATION_TOKENS = "vllm:generation_tokens_total"
PREEMPTIONS = "vllm:num_preemptions_total"
ADMISSION_REJECTIONS = "vllm:admission_rejections_total"

GAUGES = (
    WAITING,
    RUNNING,
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    WAITING_BY_REASON,
    SLEEP_STATE,
)
COUNTERS = (
    SUCCESS,
    PROMPT_TOKENS,
    GENERATION_TOKENS,
    PREEMPTIONS,
    PROMPT_BY_SOURCE,
    ADMISSION_REJECTIONS,
)
WANTED = frozenset(GAUGES + COUNTERS)
START_TIME = "process_start_time_seconds"
#: Finished reasons that are not a served request (vLLM >= 0.2x: ``error`` is
#: a retryable internal failure, always answered 500).
FAILED_REASONS = frozenset({"error"})

Labels = tuple[tuple[str, str], ...]
SeriesKey = tuple[str, Labels]


@dataclass(frozen=True)
class Page:
    """The wanted samples of one scrape, keyed by (sample name, sorted labels),
    and the serving process' start time when the page has it.

    ``fresh``: vLLM's families are declared but ``vllm:num_requests_running``
    has no sample yet: vLLM with several API servers serves /metrics from a
    multiprocess registry that has no sample (and no process start time)
    before the engine's first step. A present, idle replica: rejecting it
    once blinded the scaler to a whole fleet. ``kv_cache_tokens``: the KV
    cache's size (``num_gpu_blocks x block_size`` of
    ``vllm:cache_config_info``, summed over engines) when the page says it.
    """

    values: Mapping[SeriesKey, float]
    start_time_s: float | None = None
    fresh: bool = False
    kv_cache_tokens: float | None = None


def parse_vllm_text(text: str) -> Page:
    """Keep only the scaler's samples; ``ValueError`` when ``text`` is not vLLM metrics."""
    values: dict[SeriesKey, float] = {}
    start_time: float | None = None
    declared = False
    kv_tokens: float | None = None
    try:
        for family in text_string_to_metric_families(text):
            if family.name == RUNNING:
                declared = True
            for sample in family.samples:
                if sample.name == START_TIME and not sample.labels:
                    start = float(sample.value)
                    start_time = start if math.isfinite(start) else None
                elif sample.name == CACHE_CONFIG:
                    size = _kv_tokens(sample.labels)
                    if size is not None:
                        kv_tokens = (kv_tokens or 0.0) + size
                elif sample.name in WANTED:
                    value = float(sample.value)
                    if not math.isfinite(value) or value < 0:
                        raise ValueError(f"{sample.name} is {sample.value!r}")
                    key = (sample.name, tuple(sorted(sample.labels.items())))
                    values[key] = value
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise ValueError(f"not valid vLLM metrics text: {exc}") from exc
    has_running = any(name == RUNNING for name, _ in values)
    if not has_running and not declared:
        raise ValueError(f"no {RUNNING} family: not a vLLM /metrics page")
    return Page(values, start_time, fresh=not has_running, kv_cache_tokens=kv_tokens)


def _kv_tokens(labels: Mapping[str, str]) -> float | None:
    """``num_gpu_blocks x block_size`` from cache_config_info's labels (strings;
    ``None`` before the engine profiled its memory)."""
    try:
        blocks = float(labels.get("num_gpu_blocks", ""))
        block_size = float(labels.get("block_size", ""))
    except ValueError:
        return None
    size = blocks * block_size
    return size if math.isfinite(size) and size > 0 else None


def page_rates(previous: Page, current: Page, dt_s: float) -> dict[SeriesKey, float] | None:
    """Per-series change per second: counter rates and the signed slope of
    waiting/running; ``None`` when the two pages cannot be compared: no rate
    this interval, never ``value / dt``.

    Both pages must come from one process (equal
    ``process_start_time_seconds``, no counter dropping): a restart, or a
    load-balanced URL answering from another pod, once read as tens of
    thousands of requests per second. A counter that first appears after a
    fresh page starts from zero (a multiprocess registry writes a counter
    only once it is incremented)."""
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
                if not previous.fresh:
                    continue
                before = 0.0  # a fresh process' counters start at zero
            if value < before:
                return None  # a reset or another process: unknowable this interval
            out[key] = (value - before) / dt_s
        elif name in (WAITING, RUNNING, WAITING_BY_REASON):
            out[key] = (value - (before or 0.0)) / dt_s
    return out


def select(values: Mapping[SeriesKey, float], name: str, accept: object) -> Iterable[float]:
    """Values of sample ``name`` whose labels ``accept(labels_dict)`` returns true for."""
    for (sample, labels), value in values.items():
        if sample == name and accept(dict(labels)):  # type: ignore[operator]
            yield value


def select_labelled(
    values: Mapping[SeriesKey, float], name: str, accept: object
) -> Iterable[tuple[dict[str, str], float]]:
    """Like ``select`` but with each series' labels (for ``reason``/``source`` splits)."""
    for (sample, labels), value in values.items():
        if sample == name:
            as_dict = dict(labels)
            if accept(as_dict):  # type: ignore[operator]
                yield as_dict, value
