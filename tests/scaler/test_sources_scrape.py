"""Direct scrape (metricsUrls) and Kubernetes discovery against local servers."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from decision.settings import LabelMatcher
from scaler.sources.kube import KubernetesSource, PodDiscovery, pod_info
from scaler.sources.model import Selection, SourceError
from scaler.sources.scrape import ScrapeSource
from tests.scaler.conftest import Engine, FakeVllm, ThreadedApp


def api_for_host(host: str) -> Any:
    """A ``CoreV1Api`` talking plain HTTP to ``host`` (the fake API server)."""
    import kubernetes

    configuration = kubernetes.client.Configuration()
    configuration.host = host
    return kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(configuration))


async def test_scrape_sums_replicas_and_engines(fake_vllm: Callable[..., FakeVllm]) -> None:
    a = fake_vllm(
        engines=[Engine(waiting=2, running=1, kv=0.2), Engine(waiting=3, running=1, kv=0.4)]
    )
    b = fake_vllm(generation="v0", engines=[Engine(waiting=1, running=5, kv=0.9)])
    source = ScrapeSource(timeout_s=2)
    try:
        selection = Selection(urls=(a.url, b.url))
        reading = (await source.read([selection], 10.0))[selection]
        assert (reading.ready_replicas, reading.waiting, reading.running) == (2, 6.0, 7.0)
        assert reading.kv_usage == pytest.approx(0.5)
        assert reading.arrival_rate_rps is None
        a.engines[0].success += 6
        a.engines[1].waiting += 4
        reading = (await source.read([selection], 12.0))[selection]
        assert reading.completion_rate_rps == pytest.approx(3.0)
        assert reading.arrival_rate_rps == pytest.approx(3.0 + 2.0)
    finally:
        await source.close()


async def test_each_url_is_scraped_once_for_all_objects(fake_vllm: Callable[..., FakeVllm]) -> None:
    a = fake_vllm(model="llama", engines=[Engine(waiting=3)])
    source = ScrapeSource(timeout_s=2)
    try:
        selections = [
            Selection((LabelMatcher("model_name", "=", "llama"),), urls=(a.url,)),
            Selection((LabelMatcher("model_name", "=", "other"),), urls=(a.url,)),
        ]
        readings = await source.read(selections, 1.0)
        assert source.scrapes_sent == 1
        assert readings[selections[0]].waiting == 3
        # a listed URL with no series for the selection is missing data, not idle
        assert selections[1] not in readings
    finally:
        await source.close()


@pytest.mark.parametrize("mode", ["refuse", "garbage", "nan", "slow", "down"])
async def test_a_bad_target_fails_only_its_objects(
    fake_vllm: Callable[..., FakeVllm], mode: str
) -> None:
    """Refused, garbage, NaN, too slow or closed: that replica alone is unknown.

    A fleet with one bad URL reads as incomplete (waiting NaN, the readable
    replica's running and KV usage kept, no rates: the policy may rise, never
    fall); a fleet of only bad URLs gets no reading (hold); others unaffected.
    """
    good = fake_vllm(engines=[Engine(waiting=1, running=2, kv=0.3)])
    bad = fake_vllm(mode=mode if mode != "down" else "ok", delay_s=4.0)
    bad_url = bad.url
    if mode == "down":
        bad.stop()
    # The good replica must answer within the timeout even on a loaded CI
    # machine (0.5 s once lost it there); the slow one never can.
    source = ScrapeSource(timeout_s=1.5)
    try:
        mine, theirs = Selection(urls=(good.url, bad_url)), Selection(urls=(good.url,))
        only_bad = Selection(urls=(bad_url,))
        readings = await asyncio.wait_for(source.read([mine, theirs, only_bad], 1.0), timeout=5.0)
        partial = readings[mine]
        assert math.isnan(partial.waiting) and partial.running == 2.0
        assert partial.ready_replicas == 1 and partial.kv_usage == pytest.approx(0.3)
        assert partial.arrival_rate_rps is None
        assert only_bad not in readings
        assert readings[theirs].waiting == 1
    finally:
        await source.close()


# ---------------------------------------------------------------- Kubernetes


def pod(
    name: str,
    port: int,
    *,
    ready: bool = True,
    created: str = "2026-01-01T00:00:00Z",
    ready_at: str = "2026-01-01T00:02:30Z",
    ip: str = "127.0.0.1",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "llm",
            "creationTimestamp": created,
            "labels": labels or {"app": "vllm"},
        },
        "spec": {
            "containers": [{"name": "vllm", "ports": [{"name": "http", "containerPort": port}]}]
        },
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastTransitionTime": ready_at,
                }
            ],
        },
    }


class FakeApiServer:
    """Serves /api/v1/namespaces/NS/pods?labelSelector=...; records the calls."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.calls: list[tuple[str, str]] = []
        self.fail = False
        app = web.Application()
        app.router.add_get("/api/v1/namespaces/{ns}/pods", self._list)
        self.server = ThreadedApp(app)

    async def _list(self, request: web.Request) -> web.Response:
        namespace = request.match_info["ns"]
        selector = request.query.get("labelSelector", "")
        self.calls.append((namespace, selector))
        if self.fail:
            return web.Response(status=500, text="etcd is sad")
        key, _, value = selector.partition("=")
        items = [
            p
            for p in self.pods
            if p["metadata"]["namespace"] == namespace and p["metadata"]["labels"].get(key) == value
        ]
        return web.Response(
            text=json.dumps({"kind": "PodList", "apiVersion": "v1", "items": items}),
            content_type="application/json",
        )


@pytest.fixture
def api_server() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    yield server
    server.server.stop()


def test_pod_info_reads_ready_port_and_startup_time() -> None:
    info = pod_info(pod("a", 8001))
    assert info.ready and info.metrics_url == "http://127.0.0.1:8001/metrics"
    assert info.startup_s == 150.0
    not_ready = pod_info(pod("b", 8000, ready=False))
    assert not not_ready.ready and not_ready.running  # scraped, not counted
    terminating = pod("c", 8000)
    terminating["metadata"]["deletionTimestamp"] = "2026-01-01T00:05:00Z"
    assert not pod_info(terminating).ready and not pod_info(terminating).running
    assert not pod_info(pod("d", 8000, ip="")).running
    assert pod_info({"metadata": {}, "spec": {}, "status": {}}).port == 8000


async def test_discovery_scrapes_ready_pods_and_measures_lead_time(
    api_server: FakeApiServer, fake_vllm: Callable[..., FakeVllm]
) -> None:
    a = fake_vllm(engines=[Engine(waiting=4, running=1)])
    b = fake_vllm(engines=[Engine(waiting=2, running=2)])
    api_server.pods = [
        pod("a", a.server.port, ready_at="2026-01-01T00:01:40Z"),  # type: ignore[union-attr]
        pod("b", b.server.port, ready_at="2026-01-01T00:03:00Z"),  # type: ignore[union-attr]
        pod("starting", 1, ready=False),
        pod("other-app", 1, labels={"app": "web"}),
    ]
    discovery = PodDiscovery(lambda: api_for_host(api_server.server.url), discovery_interval_s=60)
    source = KubernetesSource(discovery, ScrapeSource(timeout_s=2))
    try:
        selection = Selection(namespace="llm", pod_selector="app=vllm")
        reading = (await source.read([selection], 5.0))[selection]
        assert (reading.ready_replicas, reading.waiting, reading.running) == (2, 6.0, 3.0)
        assert sorted(reading.lead_time_samples_s) == [100.0, 180.0]
        await source.read([selection], 6.0)
        assert api_server.calls == [("llm", "app=vllm")]  # cached within the interval
    finally:
        await source.close()


async def test_discovery_failure_is_a_source_error(api_server: FakeApiServer) -> None:
    api_server.fail = True
    discovery = PodDiscovery(lambda: api_for_host(api_server.server.url), timeout_s=2)
    source = KubernetesSource(discovery, ScrapeSource(timeout_s=1))
    try:
        with pytest.raises(SourceError, match="Kubernetes API"):
            await source.read([Selection(namespace="llm", pod_selector="app=vllm")], 1.0)
    finally:
        await source.close()


async def test_not_ready_pods_that_serve_count_their_queue(
    api_server: FakeApiServer, fake_vllm: Callable[..., FakeVllm]
) -> None:
    """4 pods all NotReady (readiness timing out under load) used to
    read as an empty fleet -> decide said 0 'idle'. Their queue is real demand."""
    from decision.policy import Decision, ReplicaCapacity, decide
    from decision.settings import parse_settings
    from scaler.state import observation_from

    replicas = [fake_vllm(engines=[Engine(waiting=8, running=4)]) for _ in range(4)]
    api_server.pods = [
        pod(f"p{i}", r.server.port, ready=False)  # type: ignore[union-attr]
        for i, r in enumerate(replicas)
    ]
    discovery = PodDiscovery(lambda: api_for_host(api_server.server.url), discovery_interval_s=60)
    source = KubernetesSource(discovery, ScrapeSource(timeout_s=2))
    try:
        selection = Selection(namespace="llm", pod_selector="app=vllm")
        reading = (await source.read([selection], 600.0))[selection]
        assert (reading.ready_replicas, reading.waiting, reading.running) == (0, 32.0, 16.0)
        settings = parse_settings({"podSelector": "app=vllm", "forecast": "off"})
        decision = decide(
            observation_from(reading, 600.0),
            None,
            settings,
            [Decision(590.0, 10, "queue", {"recommendation": 10.0})],
            ReplicaCapacity.unknown(),
            now=600.0,
        )
        assert decision.replicas >= 10 and decision.reason != "idle"
    finally:
        await source.close()


async def test_a_not_ready_pod_that_served_before_makes_the_read_incomplete(
    api_server: FakeApiServer, fake_vllm: Callable[..., FakeVllm]
) -> None:
    """A pod that answered before and now neither answers nor is Ready (crash
    loop): its queue is unknown, so waiting is NaN (the policy holds); a pod
    that never answered (starting) is ignored; no pods at all is zero demand."""
    ok = fake_vllm(engines=[Engine(waiting=1, running=1, kv=0.5)])
    flaky = fake_vllm(engines=[Engine(waiting=5, running=2, kv=0.9)])
    port_ok, port_flaky = ok.server.port, flaky.server.port  # type: ignore[union-attr]
    api_server.pods = [pod("ok", port_ok), pod("flaky", port_flaky), pod("new", 1, ready=False)]
    discovery = PodDiscovery(lambda: api_for_host(api_server.server.url), discovery_interval_s=0)
    source = KubernetesSource(discovery, ScrapeSource(timeout_s=1))
    try:
        selection = Selection(namespace="llm", pod_selector="app=vllm")
        first = (await source.read([selection], 1.0))[selection]
        assert (first.ready_replicas, first.waiting) == (2, 6.0)  # "new" ignored
        flaky.stop()
        api_server.pods[1] = pod("flaky", port_flaky, ready=False)
        second = (await source.read([selection], 2.0))[selection]
        assert second.ready_replicas == 1 and math.isnan(second.waiting)
        assert second.arrival_rate_rps is None and second.kv_usage == 0.5
        api_server.pods = []
        empty = (await source.read([selection], 3.0))[selection]
        assert (empty.ready_replicas, empty.waiting, empty.arrival_rate_rps) == (0, 0.0, 0.0)
    finally:
        await source.close()


# ------------------------------------------------- fresh replicas (multiprocess)


async def test_a_fresh_multiprocess_replica_does_not_blind_the_scaler() -> None:
    """A replica whose /metrics declares vLLM's families but has no samples yet
    (several API servers, no request served) is a present, idle replica: the
    scaler still sees the busy replica beside it and scales on its queue.
    Before: the page was rejected, the whole selection had no reading, and the
    scaler answered 1 replica while ~200 requests queued."""
    from decision.settings import parse_settings
    from engine.emulator import EmulatorServer, EmulatorSettings
    from scaler.state import ScalerState
    from scaler.telemetry import ScalerTelemetry

    busy_settings = EmulatorSettings(
        profile="llama-3-8b@g5.xlarge", served_model_name="llama", max_num_seqs=2,
        metrics_version="v0.32",
    )  # fmt: skip
    fresh_settings = EmulatorSettings(
        profile="llama-3-8b@g5.xlarge", served_model_name="llama", metrics_version="v0.32",
        api_server_count=2,
    )  # fmt: skip
    async with (
        EmulatorServer.running(busy_settings) as busy,
        EmulatorServer.running(fresh_settings) as fresh,
    ):
        for i in range(200):
            busy.driver.submit(f"r{i}", 100, 4000, "length")
        state = ScalerState(
            telemetry=ScalerTelemetry(),
            refresh_interval_s=0.3,
            forecast_step_s=0.3,
            refit_interval_s=5,
            fit_window_s=30,
            query_delay_s=0.0,
            source_factory=lambda spec: ScrapeSource(timeout_s=1.0, spec=spec),
        )
        urls = f"{busy.url}/metrics,{fresh.url}/metrics"
        settings = parse_settings(
            {"metricsUrls": urls, "model": "llama", "forecast": "off", "maxReplicas": "100"}
        )
        state.register("llm", "so", settings)
        await state.start()
        try:
            # 198 waiting at the default target of waiting per replica: far above 1
            deadline = asyncio.get_running_loop().time() + 30
            seen = []
            while (decision := state.decision("llm", "so")).replicas <= 10:
                seen.append((decision.replicas, decision.reason))
                assert asyncio.get_running_loop().time() < deadline, seen[-5:]
                await asyncio.sleep(0.1)
        finally:
            await state.stop()
    # The queue term drives the count. Under load two refreshes can pass
    # between polls, and a later reading one request lower is then held up
    # to the earlier one ("scale_down_hold"): still the queue's number.
    assert decision.proposals["queue"] > 10, decision
    assert decision.reason in {"queue", "scale_down_hold"}, decision


async def test_a_fresh_page_through_the_scrape_source() -> None:
    """The emulator with two API servers: before any request its scheduler gauges
    have no sample, and the source reads it as one ready, idle replica; after
    the first request it reads the served numbers."""
    from engine.emulator import EmulatorServer, EmulatorSettings

    settings = EmulatorSettings(
        profile="llama-3-8b@p5.48xlarge", served_model_name="m", metrics_version="v0.32",
        api_server_count=2,
    )  # fmt: skip
    source = ScrapeSource(timeout_s=2)
    async with EmulatorServer.running(settings) as server:
        url = server.url + "/metrics"
        selection = Selection((LabelMatcher("model_name", "=", "m"),), urls=(url,))
        try:
            first = (await source.read([selection], 1.0))[selection]
            assert (first.ready_replicas, first.waiting, first.running) == (1, 0.0, 0.0)
            async with aiohttp.ClientSession() as client:
                body = {"prompt": [1, 2, 3], "max_tokens": 2}
                async with client.post(server.url + "/v1/completions", json=body) as r:
                    assert r.status == 200
            second = (await source.read([selection], 3.0))[selection]
            assert second.ready_replicas == 1 and second.kv_usage is not None
            assert second.completion_rate_rps == pytest.approx(0.5)
            assert second.prompt_tokens_per_s == pytest.approx(1.5)
            assert second.computed_prompt_tokens_per_s == pytest.approx(1.5)
            assert second.kv_cache_tokens is not None and second.kv_cache_tokens > 0
        finally:
            await source.close()
