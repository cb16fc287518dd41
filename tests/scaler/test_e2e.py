"""End to end: emulated vLLM fleet -> real Prometheus -> ScalerState -> gRPC
service -> KEDA-faithful client with the HPA arithmetic.

Load the fleet until requests wait: the answer KEDA sees rises. Remove the
load: it falls only after ``scaleDownStabilizationSeconds``. Prometheus also
scrapes the scaler's own /metrics, so the exported series are checked where
Grafana would read them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping

import aiohttp
import pytest

from decision.policy import Decision
from scaler.server import start_server
from scaler.sources.prometheus import PrometheusSource
from scaler.state import ScalerState
from tests.scaler.keda_client import (
    HpaBehavior,
    HpaModel,
    KedaClient,
    ScaledObjectLoop,
    ScalingPolicy,
    ScalingRules,
    ref,
)
from tests.scaler.test_state_backfill import RecordingTelemetry
from tests.support.emulator import running_emulators
from tests.support.prometheus import Target, running_prometheus

pytestmark = pytest.mark.integration

STABILIZATION_S = 6.0
# The HPA itself should not add its own scale-down window here: the point is
# that the scaler's answer holds for scaleDownStabilizationSeconds.
FAST_HPA = HpaBehavior(
    scale_up=ScalingRules(0, (ScalingPolicy("Percent", 1000, 1),)),
    scale_down=ScalingRules(0, (ScalingPolicy("Percent", 100, 1),)),
)


def assert_held_for_stabilization(decisions: Mapping[float, Decision], fell_seen_s: float) -> None:
    """The answer fell only once no recommendation in the last
    ``scaleDownStabilizationSeconds`` of data asked for as many replicas.

    Timed by the decisions' own grid times (the data's time), not by when the
    test removed the load: the data lags the load by the scrape, the rate
    window and the query delay, and how much it has already fallen when the
    load is cancelled varies, so a bound from the cancel is not the rule.
    ``fell_seen_s`` is when KEDA saw the lower answer (wall clock, like the
    grid times)."""
    times = sorted(decisions)
    peak = max(decisions[t].replicas for t in times)
    peak_at = min(t for t in times if decisions[t].replicas == peak)
    fell_at = next(t for t in times if t > peak_at and decisions[t].replicas < peak)
    asked_at = max(
        t for t in times if t < fell_at and decisions[t].proposals.get("recommendation", 0) >= peak
    )
    assert fell_at - asked_at >= STABILIZATION_S, (asked_at, fell_at)
    # between them every decision was fresh (a stale one re-asks what it
    # holds) and asked for fewer, yet answered at least the peak: a hold
    held = [decisions[t] for t in times if asked_at < t < fell_at]
    assert held and all(d.replicas >= peak for d in held), held
    assert {d.reason for d in held} <= {"scale_down_hold", "partial_hold"}, held
    # KEDA got the lower answer only after the decision that made it
    assert fell_seen_s >= fell_at, (fell_seen_s, fell_at)


async def stream_one(session: aiohttp.ClientSession, url: str) -> None:
    body = {"model": "llama", "prompt": "tell me a long story", "max_tokens": 3000, "stream": True}
    async with session.post(f"{url}/v1/completions", json=body) as response:
        async for _ in response.content.iter_any():
            pass


async def test_answer_rises_under_load_and_falls_after_stabilization() -> None:
    telemetry = RecordingTelemetry()
    metrics = await telemetry.serve("127.0.0.1", 0)
    with running_emulators(2, max_num_seqs=1, served_model_name="llama") as urls:
        targets = [Target(u.removeprefix("http://"), {"namespace": "llm"}) for u in urls]
        targets.append(Target(f"127.0.0.1:{metrics.port}", {"job_kind": "scaler"}))
        with running_prometheus(targets) as prom:
            await asyncio.to_thread(prom.wait_for, "vllm:num_requests_waiting", min_series=2)
            state = ScalerState(
                telemetry=telemetry,
                refresh_interval_s=1.0,
                forecast_step_s=1.0,
                refit_interval_s=30.0,
                fit_window_s=60.0,
                query_delay_s=1.0,
                source_factory=lambda spec: PrometheusSource(spec.address, rate_window_s=4),
            )
            await state.start()
            server = await start_server(state, telemetry, host="127.0.0.1", port=0)
            client = KedaClient(f"127.0.0.1:{server.port}")
            so = ref(
                "so",
                "llm",
                {
                    "scalerAddress": f"127.0.0.1:{server.port}",
                    "prometheusAddress": prom.url,
                    "model": "llama",
                    "forecast": "off",
                    "targetWaitingPerReplica": "3",
                    "maxReplicas": "10",
                    "scaleDownStabilizationSeconds": str(STABILIZATION_S),
                },
            )
            keda = ScaledObjectLoop(client, so, hpa=HpaModel(behavior=FAST_HPA), hpa_sync_s=1.0)
            # (monotonic, metric value, active, HPA replicas, wall clock)
            polls: list[tuple[float, float, bool, int, float]] = []

            async def poll_forever() -> None:
                while True:
                    now = time.monotonic()
                    seen = len(keda.history)
                    replicas = await keda.step(now)
                    if len(keda.history) > seen:  # an UNAVAILABLE poll (warming up) adds none
                        value, active = keda.history[-1][1], keda.history[-1][2]
                        polls.append((now, value, active, replicas, time.time()))
                    await asyncio.sleep(0.5)

            poller = asyncio.create_task(poll_forever())
            session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
            load: list[asyncio.Task[None]] = []
            try:
                await asyncio.sleep(3)
                idle = polls[-1][1]
                assert idle == 0 and not polls[-1][2]
                load = [asyncio.create_task(stream_one(session, urls[i % 2])) for i in range(14)]
                deadline = time.monotonic() + 25
                while not polls or polls[-1][1] < 3:
                    assert time.monotonic() < deadline, polls[-5:]
                    await asyncio.sleep(0.2)
                await asyncio.sleep(3)
                peak = max(p[1] for p in polls)
                assert peak >= 4  # 12 waiting / 3 per replica
                assert polls[-1][2] and polls[-1][3] >= 3  # KEDA active, HPA followed
                for task in load:
                    task.cancel()
                cancelled_at = time.monotonic()
                deadline = cancelled_at + STABILIZATION_S + 20
                while True:
                    after = [p for p in polls if p[0] > cancelled_at]
                    if after and after[-1][1] < peak:
                        break
                    assert time.monotonic() < deadline, polls[-5:]
                    await asyncio.sleep(0.2)
                fell_seen_s = next(p[4] for p in polls if p[0] > cancelled_at and p[1] < peak)
                # the answer is published just before its decision is recorded
                while not any(d.replicas < peak for d in telemetry.decisions.values()):
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.05)
                assert_held_for_stabilization(telemetry.decisions, fell_seen_s)
                assert state.decision("llm", "so").reason in (
                    "scale_down_hold",
                    "idle",
                    "queue",
                    "kv_cache",
                )
                # The scaler's own metrics, scraped by Prometheus like Grafana reads them.
                await asyncio.to_thread(
                    prom.wait_for, 'prescaler_desired_replicas{scaledobject="so"}', min_series=1
                )
                up = await asyncio.to_thread(prom.query, "prescaler_source_up")
                assert up and all(item["value"][1] == "1" for item in up)
                reasons = await asyncio.to_thread(
                    prom.query, 'prescaler_decisions_total{reason="queue"}'
                )
                assert reasons and float(reasons[0]["value"][1]) > 0
            finally:
                poller.cancel()
                for task in load:
                    task.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.gather(poller, *load, return_exceptions=True)
                await session.close()
                await client.close()
                await server.server.stop(0)
                await state.stop()
    await metrics.stop()
