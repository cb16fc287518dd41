"""vLLM /metrics exposition: names, types, labels, buckets, golden bytes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine.metrics import (
    ITL_BUCKETS_V1,
    METRICS_CONTENT_TYPE,
    REQUEST_LATENCY_BUCKETS_V1,
    TTFT_BUCKETS_V1,
    Histogram,
    MetricsSnapshot,
    render_metrics,
)

DATA = Path(__file__).parent / "data"


def snapshot() -> MetricsSnapshot:
    ttft, itl, e2e, queue = (
        Histogram(TTFT_BUCKETS_V1),
        Histogram(ITL_BUCKETS_V1),
        Histogram(REQUEST_LATENCY_BUCKETS_V1),
        Histogram(REQUEST_LATENCY_BUCKETS_V1),
    )
    for v in (0.03, 0.3, 12.0):
        ttft.observe(v)
    itl.observe_arithmetic(0.02, 0.001, 10, 2)
    itl.observe(3.0)
    for v in (0.9, 70.0, 100.0):
        e2e.observe(v)
    for v in (0.0, 0.4, 65.0):
        queue.observe(v)
    return MetricsSnapshot(
        num_requests_running=2,
        num_requests_waiting=5,
        kv_cache_usage=0.25,
        num_preemptions=1,
        prompt_tokens=300,
        generation_tokens=21,
        request_success=(("stop", 1), ("length", 2), ("abort", 0)),
        time_to_first_token=ttft.snapshot(),
        inter_token_latency=itl.snapshot(),
        e2e_request_latency=e2e.snapshot(),
        request_queue_time=queue.snapshot(),
    )


@pytest.mark.parametrize(("version", "created"), [("v1", 1700000000.0), ("v0", None)])
def test_golden_metrics_text(version: str, created: float | None) -> None:
    """The exposition is byte-for-byte the reviewed golden file."""
    text = render_metrics(
        snapshot(), model_name="meta-llama/Meta-Llama-3-8B-Instruct", version=version,  # type: ignore[arg-type]
        created=created,
    )  # fmt: skip
    golden = DATA / f"metrics_{version}.txt"
    if os.environ.get("PRESCALER_UPDATE_GOLDEN"):
        golden.write_bytes(text)
    assert text == golden.read_bytes()


def test_v1_families_labels_and_buckets() -> None:
    """V1: model_name and engine labels, kv_cache_usage_perc, ITL and queue histograms."""
    text = render_metrics(snapshot(), model_name="m", version="v1").decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert {n: f.type for n, f in fams.items()} == {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:num_preemptions": "counter",
        "vllm:prompt_tokens": "counter",
        "vllm:generation_tokens": "counter",
        "vllm:request_success": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:request_queue_time_seconds": "histogram",
    }
    for fam in fams.values():
        for s in fam.samples:
            assert s.labels["model_name"] == "m" and s.labels["engine"] == "0"

    def les(name: str) -> list[float]:
        return [float(s.labels["le"]) for s in fams[name].samples if s.name.endswith("_bucket")]

    assert les("vllm:time_to_first_token_seconds")[:-1] == list(TTFT_BUCKETS_V1)
    assert les("vllm:time_to_first_token_seconds")[-2] == 2560.0
    assert les("vllm:inter_token_latency_seconds")[:-1] == list(ITL_BUCKETS_V1)
    assert les("vllm:e2e_request_latency_seconds")[-2] == 7680.0
    assert les("vllm:request_queue_time_seconds")[:-1] == list(REQUEST_LATENCY_BUCKETS_V1)
    ttft = {s.labels["le"]: s.value for s in fams["vllm:time_to_first_token_seconds"].samples
            if s.name.endswith("_bucket")}  # fmt: skip
    assert ttft["0.04"] == 1 and ttft["0.5"] == 2 and ttft["+Inf"] == 3
    success = {s.labels["finished_reason"]: s.value for s in fams["vllm:request_success"].samples}
    assert success == {"stop": 1.0, "length": 2.0, "abort": 0.0}
    assert fams["vllm:kv_cache_usage_perc"].samples[0].value == 0.25


def test_v0_names_labels_and_short_buckets() -> None:
    """V0: only model_name; gpu_cache_usage_perc and TPOT; TTFT buckets stop at 10."""
    text = render_metrics(snapshot(), model_name="m", version="v0").decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert "vllm:gpu_cache_usage_perc" in fams and "vllm:kv_cache_usage_perc" not in fams
    assert "vllm:time_per_output_token_seconds" in fams
    assert "vllm:inter_token_latency_seconds" not in fams
    assert "vllm:request_queue_time_seconds" not in fams
    for fam in fams.values():
        for s in fam.samples:
            assert "engine" not in s.labels
    ttft_les = [s.labels["le"] for s in fams["vllm:time_to_first_token_seconds"].samples
                if s.name.endswith("_bucket")]  # fmt: skip
    assert ttft_les[-2:] == ["10.0", "+Inf"]
    tpot = {s.labels["le"]: s.value for s in fams["vllm:time_per_output_token_seconds"].samples
            if s.name.endswith("_bucket")}  # fmt: skip
    assert list(tpot)[-2:] == ["2.5", "+Inf"]
    assert tpot["2.5"] == 20 and tpot["+Inf"] == 21


def test_unknown_version_is_refused() -> None:
    """Only v1 and v0 exist."""
    with pytest.raises(ValueError, match="metrics version"):
        render_metrics(snapshot(), model_name="m", version="v2")  # type: ignore[arg-type]


def test_content_type_is_prometheus_text_004() -> None:
    """vLLM answers /metrics with the text format 0.0.4 content type."""
    assert METRICS_CONTENT_TYPE.startswith("text/plain; version=0.0.4")


def test_histogram_bounds_must_increase() -> None:
    """Unordered bucket bounds are refused."""
    with pytest.raises(ValueError, match="strictly increasing"):
        Histogram([1.0, 0.5])
