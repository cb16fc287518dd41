"""scaler.telemetry: exact exposition (golden), forget(), the HTTP endpoint, ForecastLedger."""

from __future__ import annotations

import math
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from decision.policy import Decision
from scaler.telemetry import CONTENT_TYPE, ForecastLedger, ScalerTelemetry

GOLDEN = (Path(__file__).parent / "data" / "telemetry_golden.txt").read_text()


def populated() -> ScalerTelemetry:
    t = ScalerTelemetry()
    t.record_decision("llm", "llama", Decision(1.0, 5, "queue", {}), 4)
    t.record_decision("llm", "llama", Decision(2.0, 5, "queue", {}), 4)
    t.record_decision("llm", "llama", Decision(3.0, 6, "forecast", {}), 4)
    t.record_demand("llm", "llama", "waiting", 12)
    t.record_demand("llm", "llama", "requests_per_s", 2.5)
    t.record_forecast("llm", "llama", "requests_per_s", 0.9, 240.0, 4.25)
    t.record_forecast("llm", "llama", "requests_per_s", 0.5, 240, 3.0)
    t.record_forecast_error("llm", "llama", "requests_per_s", 240.0, 0.125)
    t.record_coverage("llm", "llama", "requests_per_s", 0.9, 0.875)
    t.record_lead_time("llm", "llama", 240)
    t.set_source_up("prometheus http://prometheus:9090", True)
    t.set_source_up("scrape http://10.0.0.1:8000/metrics", False)
    t.observe_rpc("GetMetrics", 0.0002)
    t.observe_rpc("GetMetrics", 0.002)
    return t


def test_exposition_golden() -> None:
    """Names, labels, types and formatting are a contract: byte for byte."""
    assert populated().render().decode() == GOLDEN


def test_the_two_processes_parts_add_up_to_the_golden_exposition() -> None:
    """``prescaler serve``'s decider renders the loop's series, the serving
    process the gRPC latency after them: together, the same text as one process."""
    loop, rpc = populated(), populated()
    loop.part, rpc.part = "loop", "rpc"
    assert (loop.render() + rpc.render()).decode() == GOLDEN
    with pytest.raises(ValueError, match="part"):
        ScalerTelemetry(part="front")


def test_exposition_parses_and_never_uses_the_global_registry() -> None:
    t = populated()
    names = {f.name for f in text_string_to_metric_families(t.render().decode())}
    assert names == {
        "prescaler_desired_replicas", "prescaler_ready_replicas", "prescaler_demand",
        "prescaler_forecast", "prescaler_forecast_abs_percentage_error",
        "prescaler_forecast_coverage", "prescaler_lead_time_seconds", "prescaler_decisions",
        "prescaler_source_up", "prescaler_grpc_request_duration_seconds",
    }  # fmt: skip
    assert (
        REGISTRY.get_sample_value(
            "prescaler_desired_replicas", {"namespace": "llm", "scaledobject": "llama"}
        )
        is None
    )
    shared = CollectorRegistry()
    ScalerTelemetry(shared)
    assert b"prescaler_desired_replicas" in __import__("prometheus_client").generate_latest(shared)


def test_forget_drops_one_scaledobject() -> None:
    t = populated()
    t.record_decision("llm", "mistral", Decision(1.0, 2, "kv_cache", {}), 2)
    t.forget("llm", "llama")
    text = t.render().decode()
    assert 'scaledobject="llama"' not in text
    assert 'prescaler_desired_replicas{namespace="llm",scaledobject="mistral"} 2.0' in text
    assert "prescaler_source_up" in text and "GetMetrics" in text  # shared series stay


async def test_metrics_endpoint_serves_the_exposition() -> None:
    t = populated()
    server = await t.serve("127.0.0.1", 0)
    try:
        assert server.port > 0
        url = f"http://127.0.0.1:{server.port}/metrics"
        async with aiohttp.ClientSession() as session, session.get(url) as resp:
            assert resp.status == 200
            assert resp.headers["Content-Type"] == CONTENT_TYPE
            assert (await resp.text()) == GOLDEN
    finally:
        await server.stop()


def test_ledger_settles_matured_forecasts() -> None:
    """APE and coverage from forecasts whose target time has come."""
    ledger = ForecastLedger(window=10, max_lateness_s=30)
    ledger.add("requests_per_s", 60, 0.9, made_at_s=0, median=8, upper=12)
    ledger.add("requests_per_s", 60, 0.9, made_at_s=10, median=10, upper=11)
    assert ledger.settle("requests_per_s", 30, 10.0) == []  # nothing matured yet
    settled = ledger.settle("requests_per_s", 60, 10.0)
    assert [(s.made_at_s, s.abs_pct_error, s.covered) for s in settled] == [(0, 0.2, True)]
    settled = ledger.settle("requests_per_s", 75, 12.0)
    assert [(s.made_at_s, s.covered) for s in settled] == [(10, False)]
    assert ledger.mean_ape("requests_per_s", 60) == pytest.approx((0.2 + 2 / 12) / 2)
    assert ledger.coverage("requests_per_s", 0.9) == 0.5
    assert ledger.keys() == [("requests_per_s", 60.0, 0.9)]


def test_ledger_edge_cases() -> None:
    ledger = ForecastLedger(window=2, max_lateness_s=30)
    ledger.add("r", 10, 0.9, 0, 1, 2)
    assert ledger.settle("r", 100, 1.0) == []  # matured long ago (data gap): dropped
    ledger.add("r", 10, 0.9, 100, 1, 2)
    (zero,) = ledger.settle("r", 110, 0.0)
    assert math.isnan(zero.abs_pct_error) and zero.covered  # APE undefined at 0
    assert math.isnan(ledger.mean_ape("r", 10))
    assert ledger.coverage("r", 0.9) == 1.0
    assert math.isnan(ForecastLedger().coverage("x", 0.9))
    with pytest.raises(ValueError):
        ForecastLedger(window=0)


def test_record_refresh_equals_the_separate_calls() -> None:
    """The one-lock refresh path exposes exactly what the separate calls do."""
    decision = Decision(10.0, 5, "forecast", {"forecast": 5.0}, data_stale=False)
    demand = [("requests_per_s", 2.5), ("kv_cache_usage", 0.4)]
    forecasts = [("requests_per_s", 0.5, 150.0, 3.0), ("requests_per_s", 0.9, 150.0, 4.5)]
    one, separate = ScalerTelemetry(), ScalerTelemetry()
    one.record_refresh("llm", "so", decision, 3, 150.0, demand, forecasts)
    separate.record_decision("llm", "so", decision, 3)
    separate.record_lead_time("llm", "so", 150.0)
    for signal, value in demand:
        separate.record_demand("llm", "so", signal, value)
    for signal, q, h, v in forecasts:
        separate.record_forecast("llm", "so", signal, q, h, v)
    assert one.render() == separate.render()
    assert b'prescaler_forecast{horizon_seconds="150"' in one.render()
