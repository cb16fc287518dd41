"""vLLM /metrics pages taken over a period of load, turned into per-window rates.

The profile fit needs, for stretches of time, the prompt and output tokens
computed, the mean number of running requests, and the mean TTFT and
inter-token latency: differences of vLLM's counters and histogram sums
between two pages (names: ``_SERIES``, from ``vllm/v1/metrics/loggers.py``).
Pure: the pages come in as text with the time they were taken
(``engine.metrics_reader`` fetches them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


class MetricsPageError(ValueError):
    """A page that is not vLLM's /metrics (which page, and what is missing)."""


@dataclass(frozen=True)
class MetricsPage:
    """One /metrics page and the time (seconds) it was taken."""

    t: float
    text: str


@dataclass(frozen=True)
class PageValues:
    """The figures of one page the fit uses, summed over engines and API servers."""

    prompt_tokens: float
    generation_tokens: float
    running: float
    waiting: float
    itl_sum: float
    itl_count: float
    ttft_sum: float
    ttft_count: float
    prompt_len_sum: float
    prompt_len_count: float
    gen_len_sum: float
    gen_len_count: float
    num_gpu_blocks: int | None
    block_size: int | None
    #: cumulative bucket counts (upper bound, count), summed over series; () when absent
    itl_buckets: tuple[tuple[float, float], ...] = ()
    ttft_buckets: tuple[tuple[float, float], ...] = ()


@dataclass(frozen=True)
class LoadWindow:
    """What happened between two pages: totals over ``duration_s`` and means."""

    duration_s: float
    prompt_tokens: float
    generation_tokens: float
    mean_running: float
    min_running: float
    max_running: float
    mean_waiting: float
    itl_mean_s: float | None
    itl_count: float
    ttft_mean_s: float | None
    ttft_count: float
    mean_prompt_tokens: float | None
    mean_generation_tokens: float | None
    #: the window's own cumulative bucket counts (differences of its two pages)
    itl_buckets: tuple[tuple[float, float], ...] = ()
    ttft_buckets: tuple[tuple[float, float], ...] = ()


_SERIES: dict[str, tuple[str, ...]] = {
    "prompt_tokens": ("vllm:prompt_tokens_total",),
    "generation_tokens": ("vllm:generation_tokens_total",),
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "itl_sum": (
        "vllm:inter_token_latency_seconds_sum",
        "vllm:time_per_output_token_seconds_sum",
    ),
    "itl_count": (
        "vllm:inter_token_latency_seconds_count",
        "vllm:time_per_output_token_seconds_count",
    ),
    "ttft_sum": ("vllm:time_to_first_token_seconds_sum",),
    "ttft_count": ("vllm:time_to_first_token_seconds_count",),
    "prompt_len_sum": ("vllm:request_prompt_tokens_sum",),
    "prompt_len_count": ("vllm:request_prompt_tokens_count",),
    "gen_len_sum": ("vllm:request_generation_tokens_sum",),
    "gen_len_count": ("vllm:request_generation_tokens_count",),
}
_REQUIRED = ("prompt_tokens", "generation_tokens", "itl_sum", "itl_count")
_BUCKETS: dict[str, tuple[str, ...]] = {
    "itl_buckets": (
        "vllm:inter_token_latency_seconds_bucket",
        "vllm:time_per_output_token_seconds_bucket",
    ),
    "ttft_buckets": ("vllm:time_to_first_token_seconds_bucket",),
}


def bucket_bounds(buckets: Sequence[tuple[float, float]], q: float) -> tuple[float, float] | None:
    """The (lower, upper) bounds of the bucket holding the q-quantile."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower = 0.0
    for upper, count in buckets:
        if count >= rank:
            return lower, upper
        lower = upper
    return None


def histogram_quantile(
    buckets: Sequence[tuple[float, float]], q: float
) -> tuple[float, float, float] | None:
    """The q-quantile by Prometheus' ``histogram_quantile`` interpolation, and its bucket.

    (value, lower, upper): linear interpolation inside the bucket holding the
    quantile's rank, as if its observations were spread evenly over it. It
    departs from Prometheus in two buckets, where it returns None: the first
    (Prometheus interpolates from 0) and the +Inf one (Prometheus returns the
    last finite bound). The fit wants closed buckets: there the value would be
    a guess, not a reading.
    """
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank and count > below:
            if lower <= 0.0 or upper == float("inf"):
                return None
            return lower + (upper - lower) * (rank - below) / (count - below), lower, upper
        lower, below = upper, count
    return None


def page_values(text: str, source: str = "page", model_name: str | None = None) -> PageValues:
    """The fit's figures from one page (samples of every engine summed).

    ``model_name`` keeps only samples with that label (a server may serve
    several). The first name of each ``_SERIES`` entry that has samples wins.
    """
    found: dict[str, float] = {}
    blocks: int | None = None
    block_size: int | None = None
    samples: dict[str, float] = {}
    bucket_counts: dict[str, dict[float, float]] = {}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as exc:
        raise MetricsPageError(f"{source}: not a Prometheus text page ({exc})") from None
    for family in families:
        for s in family.samples:
            if model_name is not None and s.labels.get("model_name", model_name) != model_name:
                continue
            if s.name == "vllm:cache_config_info":
                if s.labels.get("num_gpu_blocks", "None") not in ("None", ""):
                    blocks = int(s.labels["num_gpu_blocks"])
                if s.labels.get("block_size", "None") not in ("None", ""):
                    block_size = int(s.labels["block_size"])
                continue
            samples[s.name] = samples.get(s.name, 0.0) + float(s.value)
            if s.name.endswith("_bucket") and "le" in s.labels:
                per = bucket_counts.setdefault(s.name, {})
                le = float(s.labels["le"])
                per[le] = per.get(le, 0.0) + float(s.value)
    for key, names in _SERIES.items():
        for name in names:
            if name in samples:
                found[key] = samples[name]
                break
    missing = [_SERIES[k][0] for k in _REQUIRED if k not in found]
    if missing:
        raise MetricsPageError(f"{source}: no {', '.join(missing)} (is this a vLLM /metrics page?)")
    buckets: dict[str, tuple[tuple[float, float], ...]] = {}
    for key, names in _BUCKETS.items():
        for name in names:
            if name in bucket_counts:
                buckets[key] = tuple(sorted(bucket_counts[name].items()))
                break
    return PageValues(
        **{key: found.get(key, 0.0) for key in _SERIES},
        num_gpu_blocks=blocks,
        block_size=block_size,
        itl_buckets=buckets.get("itl_buckets", ()),
        ttft_buckets=buckets.get("ttft_buckets", ()),
    )


def _bucket_delta(
    a: tuple[tuple[float, float], ...], b: tuple[tuple[float, float], ...]
) -> tuple[tuple[float, float], ...]:
    """The observations between two pages' cumulative buckets (same bounds, or none)."""
    if not a or not b or [u for u, _ in a] != [u for u, _ in b]:
        return b if not a else ()
    return tuple((u, max(0.0, cb - ca)) for (u, ca), (_, cb) in zip(a, b, strict=True))


def load_windows(
    pages: Sequence[MetricsPage], *, min_window_s: float = 0.0, model_name: str | None = None
) -> tuple[list[LoadWindow], PageValues]:
    """Consecutive pages grouped into windows of at least ``min_window_s``; and the last page.

    Gauges (running, waiting) are averaged over the pages inside a window;
    counters and histogram sums are differences of its two ends. A counter
    that goes down (a restarted server) ends the analysis with an error.
    """
    if len(pages) < 2:
        raise MetricsPageError(f"need at least two /metrics pages, got {len(pages)}")
    ordered = sorted(pages, key=lambda p: p.t)
    values = [page_values(p.text, f"page at t={p.t}", model_name) for p in ordered]
    windows: list[LoadWindow] = []
    start = 0
    for end in range(1, len(ordered)):
        duration = ordered[end].t - ordered[start].t
        if duration < min_window_s and end < len(ordered) - 1:
            continue
        if duration <= 0:
            continue
        a, b = values[start], values[end]
        if b.generation_tokens < a.generation_tokens or b.prompt_tokens < a.prompt_tokens:
            raise MetricsPageError(
                f"page at t={ordered[end].t}: counters went down (the server restarted?)"
            )
        inside = values[start : end + 1]
        windows.append(
            LoadWindow(
                duration_s=duration,
                prompt_tokens=b.prompt_tokens - a.prompt_tokens,
                generation_tokens=b.generation_tokens - a.generation_tokens,
                mean_running=sum(v.running for v in inside) / len(inside),
                min_running=min(v.running for v in inside),
                max_running=max(v.running for v in inside),
                mean_waiting=sum(v.waiting for v in inside) / len(inside),
                itl_mean_s=_ratio(b.itl_sum - a.itl_sum, b.itl_count - a.itl_count),
                itl_count=b.itl_count - a.itl_count,
                ttft_mean_s=_ratio(b.ttft_sum - a.ttft_sum, b.ttft_count - a.ttft_count),
                ttft_count=b.ttft_count - a.ttft_count,
                mean_prompt_tokens=_ratio(
                    b.prompt_len_sum - a.prompt_len_sum, b.prompt_len_count - a.prompt_len_count
                ),
                mean_generation_tokens=_ratio(
                    b.gen_len_sum - a.gen_len_sum, b.gen_len_count - a.gen_len_count
                ),
                itl_buckets=_bucket_delta(a.itl_buckets, b.itl_buckets),
                ttft_buckets=_bucket_delta(a.ttft_buckets, b.ttft_buckets),
            )
        )
        start = end
    return windows, values[-1]


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None
