"""PrometheusSource against a REAL Prometheus scraping vLLM-shaped targets."""

from __future__ import annotations

import concurrent.futures
import math
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from decision.reading import Reading
from decision.settings import LabelMatcher, parse_selector
from scaler.sources.gateway_batch import BATCH_SIZE
from scaler.sources.model import Selection, SourceError
from scaler.sources.prometheus import PrometheusSource, merge_pages, pack_page, range_pages
from scaler.sources.promql import SIGNALS
from tests.scaler.conftest import Engine, FakeVllm, PrometheusProxy
from tests.support.emulator import running_emulators
from tests.support.prometheus import PrometheusServer, Target, running_prometheus

pytestmark = pytest.mark.integration


class Fleet:
    def __init__(self) -> None:
        self.a = FakeVllm(
            model="llama",
            engines=[
                Engine(waiting=4, running=2, kv=0.5, per_second={"success": 2.0, "prompt": 200.0}),
                Engine(
                    waiting=1, running=3, kv=0.7, per_second={"success": 1.0, "generation": 30.0}
                ),
            ],
        ).start()
        self.b = FakeVllm(
            model="llama", generation="v0", engines=[Engine(waiting=2, running=1, kv=0.3)]
        ).start()
        self.c = FakeVllm(model="mistral", engines=[Engine(waiting=9, running=8, kv=0.9)]).start()

    def targets(self) -> list[Target]:
        return [
            Target(self.a.address, {"namespace": "llm"}),
            Target(self.b.address, {"namespace": "llm"}),
            Target(self.c.address, {"namespace": "other"}),
        ]

    def stop(self) -> None:
        for r in (self.a, self.b, self.c):
            r.stop()


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    fleet = Fleet()
    yield fleet
    fleet.stop()


@pytest.fixture(scope="module")
def prom(fleet: Fleet) -> Iterator[PrometheusServer]:
    with running_prometheus(fleet.targets()) as server:
        server.wait_for_targets_up(3)
        # enough history that a 5 s rate window at "now - 2 s" lies after the first scrape
        server.wait_for("rate(vllm:request_success_total[5s]) > 0", min_series=1)
        time.sleep(8)
        yield server


def sel(text: str, model: str | None = None) -> Selection:
    matchers = list(parse_selector(text))
    if model:
        matchers.append(LabelMatcher("model_name", "=", model))
    return Selection(tuple(matchers))


def now_grid() -> float:
    return float(int(time.time()) - 2)


async def test_reads_each_selection_from_one_grouped_query_per_signal(
    prom: PrometheusServer,
) -> None:
    """Sums over engines and replicas, both metric generations, per selection."""
    proxy = PrometheusProxy(prom.url)
    source = PrometheusSource(proxy.url, rate_window_s=5)
    try:
        llama, other, everything = (
            sel('namespace="llm"', "llama"),
            sel('namespace="other"'),
            sel(""),
        )
        readings = await source.read([llama, other, everything], now_grid())
        assert len(proxy.queries) == len(SIGNALS)
        r = readings[llama]
        assert (r.ready_replicas, r.waiting, r.running) == (2, 7.0, 6.0)
        assert r.kv_usage == pytest.approx((0.5 + 0.7 + 0.3) / 3)
        assert r.completion_rate_rps == pytest.approx(3.0, rel=0.25)
        assert r.arrival_rate_rps == pytest.approx(3.0, rel=0.25)
        assert r.prompt_tokens_per_s == pytest.approx(200.0, rel=0.25)
        assert r.generation_tokens_per_s == pytest.approx(30.0, rel=0.25)
        assert r.preemptions_per_s == 0.0
        assert (readings[other].ready_replicas, readings[other].waiting) == (1, 9.0)
        assert readings[everything].ready_replicas == 3
        assert readings[everything].waiting == 16.0
    finally:
        await source.close()
        proxy.stop()


async def test_query_count_is_independent_of_the_number_of_objects(prom: PrometheusServer) -> None:
    proxy = PrometheusProxy(prom.url)
    source = PrometheusSource(proxy.url, rate_window_s=5)
    try:
        await source.read([sel('namespace="llm"')], now_grid())
        one = len(proxy.queries)
        many = [sel(f'namespace="ns-{i}"', f"model-{i}") for i in range(300)]
        readings = await source.read(many, now_grid())
        assert len(proxy.queries) - one == one == len(SIGNALS)
        assert source.queries_sent == 2 * len(SIGNALS)
        assert all(r.ready_replicas == 0 for r in readings.values())
    finally:
        await source.close()
        proxy.stop()


async def test_gateway_query_is_read_with_the_vllm_signals_and_a_failure_is_unknown(
    prom: PrometheusServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A selection's gatewayRateQuery is read beside the vLLM signals; its
    sum is ``gateway_rate_rps``. A query Prometheus refuses, or one with no
    series, leaves it unknown (None, never 0), logs once per failure streak,
    and the vLLM signals are still read. The two texts that can be wrapped
    share one query; the unbalanced one is sent alone."""
    rate = 'sum(rate(vllm:request_success_total{namespace="llm"}[5s]))'
    good = Selection(sel('namespace="llm"', "llama").matchers, gateway_query=rate)
    broken = Selection(sel('namespace="other"').matchers, gateway_query="sum(rate(")
    absent = Selection(sel("").matchers, gateway_query="sum(rate(gateway_requests_total[1m]))")
    source = PrometheusSource(prom.url, rate_window_s=5)
    try:
        for _ in range(2):
            readings = await source.read([good, broken, absent, good], now_grid())
        assert source.queries_sent == 2 * (len(SIGNALS) + 2)
        assert readings[good].gateway_rate_rps == pytest.approx(3.0, rel=0.25)
        assert readings[good].waiting == 7.0
        assert readings[broken].gateway_rate_rps is None
        assert readings[broken].waiting == 9.0
        assert readings[absent].gateway_rate_rps is None
        warned = [r.getMessage() for r in caplog.records if "gatewayRateQuery" in r.getMessage()]
        assert len(warned) == 2  # one per failing query, not one per refresh
        assert any("sum(rate(" in w and "failed" in w for w in warned)
        assert any("empty" in w for w in warned)
    finally:
        await source.close()


async def test_a_slow_gateway_query_leaves_the_others_answers(prom: PrometheusServer) -> None:
    """Gateway queries run beside the vLLM ones. A slow text makes its batch
    miss the timeout once (both texts unknown, the vLLM signals read); the
    next refresh reads them apart, and the text that answers in time keeps
    its rate. The slowness is injected in front of the real Prometheus
    client for any query holding the slow text."""
    slow_text = 'sum(rate(vllm:request_success_total{namespace="llm"}[6s]))'
    fast_text = 'sum(rate(vllm:request_success_total{namespace="llm"}[5s]))'
    fast = Selection(sel('namespace="llm"', "llama").matchers, gateway_query=fast_text)
    slow = Selection(sel('namespace="other"').matchers, gateway_query=slow_text)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(SIGNALS) + 2)
    source = PrometheusSource(prom.url, rate_window_s=5, timeout_s=2.0, executor=pool)
    real_post = source._post

    def post(path: str, form: Mapping[str, str]) -> Any:
        if slow_text in form["query"]:
            time.sleep(2.5)
        return real_post(path, form)

    source._post = post  # type: ignore[method-assign]
    try:
        together = await source.read([fast, slow], now_grid())
        assert together[fast].gateway_rate_rps is None
        assert together[slow].gateway_rate_rps is None
        assert (together[fast].waiting, together[slow].waiting) == (7.0, 9.0)
        readings = await source.read([fast, slow], now_grid())
        assert readings[fast].gateway_rate_rps == pytest.approx(3.0, rel=0.25)
        assert readings[slow].gateway_rate_rps is None
        assert (readings[fast].waiting, readings[slow].waiting) == (7.0, 9.0)
    finally:
        await source.close()
        pool.shutdown(wait=True)


def _objects_with_gateway_texts(n: int) -> tuple[list[Selection], list[float | None]]:
    """``n + 2`` objects, each with its own gateway text, and the rate each
    should read: text ``i < n`` answers 7 + i (the fleet's seven waiting
    requests in namespace llm, plus i), then a scalar text (9, namespace
    other's waiting) and a text Prometheus refuses (unknown)."""
    texts = [f'sum(vllm:num_requests_waiting{{namespace="llm"}}) + {i}' for i in range(n)]
    texts += ['scalar(sum(vllm:num_requests_waiting{namespace="other"}))']
    texts += ["sum(no_such_function(up))"]  # one closed piece, refused
    objects = [
        Selection(sel(f'namespace="ns-{i}"').matchers, gateway_query=text)
        for i, text in enumerate(texts)
    ]
    return objects, [*(7.0 + i for i in range(n)), 9.0, None]


async def test_many_gateway_texts_share_few_queries_and_a_bad_one_costs_only_itself(
    prom: PrometheusServer,
) -> None:
    """120 distinct texts, a scalar one and one Prometheus refuses: each
    object gets its own text's value in the first refresh (the refused batch
    is bisected at once), the bad text's object alone is unknown, and from
    the next refresh on the texts cost ceil(121 / BATCH_SIZE) queries plus
    the bad one retried alone."""
    objects, want = _objects_with_gateway_texts(120)
    proxy = PrometheusProxy(prom.url)
    source = PrometheusSource(proxy.url, rate_window_s=5)
    try:
        for refresh in ("first", "next"):
            before = len(proxy.queries)
            readings = await source.read(objects, now_grid())
            sent = len(proxy.queries) - before
            print(f"{refresh} refresh, {len(objects)} gateway texts: {sent} queries")
            assert [readings[o].gateway_rate_rps for o in objects] == want
            assert all(readings[o].ready_replicas == 0 for o in objects)
        assert sent == len(SIGNALS) + math.ceil(121 / BATCH_SIZE) + 1
        assert source.queries_sent == len(proxy.queries)
    finally:
        await source.close()
        proxy.stop()


async def test_range_reads_batch_the_gateway_texts_like_instant_reads(
    prom: PrometheusServer,
) -> None:
    """A backfill's range read sends the texts in the same batches (one
    query per batch and page) and each evaluation time gets its own text's
    value; a refused text is unknown over the range, costing only itself."""
    objects, want = _objects_with_gateway_texts(60)
    proxy = PrometheusProxy(prom.url)
    source = PrometheusSource(proxy.url, rate_window_s=5)
    try:
        end = now_grid()
        await source.read_range(objects, end - 2, end, 1.0)  # isolates the bad text
        before = len(proxy.queries)
        ranges = await source.read_range(objects, end - 2, end, 1.0)
        assert len(proxy.queries) - before == len(SIGNALS) + math.ceil(61 / BATCH_SIZE) + 1
        for o, rate in zip(objects, want, strict=True):
            assert [r.time_s for r in ranges[o]] == [end - 2, end - 1, end]
            assert [r.gateway_rate_rps for r in ranges[o]] == [rate] * 3
    finally:
        await source.close()
        proxy.stop()


async def test_a_backfills_timed_out_gateway_batch_is_split_so_only_the_slow_text_is_lost(
    prom: PrometheusServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A range read whose gateway batch times out splits it at once: each
    text that answers keeps its history, the slow text alone is unknown
    over the range (logged by its text). The range read's timeouts do not
    shrink the live batches: the next refresh sends all texts in one
    query. The slowness is a proxy in front of the real Prometheus holding
    any query with the slow text past the timeout."""
    objects, want = _objects_with_gateway_texts(3)
    objects, want = objects[:3], want[:3]  # three texts that answer 7, 8, 9
    # The last in the batch's order, so the first split leaves it alone:
    # two timeouts in all (the batch, then the text), half a second each.
    slow_text = objects[2].gateway_query
    assert slow_text is not None
    proxy = PrometheusProxy(prom.url)
    proxy.slow_if, proxy.delay_s = slow_text, 0.8
    source = PrometheusSource(proxy.url, rate_window_s=5, timeout_s=0.5)
    try:
        end = now_grid()
        ranges = await source.read_range(objects, end - 2, end, 1.0)
        for o, rate in zip(objects, [*want[:2], None], strict=True):
            assert [r.gateway_rate_rps for r in ranges[o]] == [rate] * 3
        warned = [r.getMessage() for r in caplog.records if "gatewayRateQuery" in r.getMessage()]
        assert len(warned) == 1
        assert slow_text in warned[0]
        proxy.slow_if = None
        before = len(proxy.queries)
        readings = await source.read(objects, now_grid())
        assert len(proxy.queries) - before == len(SIGNALS) + 1
        assert [readings[o].gateway_rate_rps for o in objects] == want
    finally:
        await source.close()
        proxy.stop()


async def test_range_read_equals_instant_reads_at_the_same_times(prom: PrometheusServer) -> None:
    """Backfill sees exactly what a scaler running all along saw (statelessness)."""
    source = PrometheusSource(prom.url, rate_window_s=5)
    try:
        llama = sel('namespace="llm"', "llama")
        end = now_grid()
        history = (await source.read_range([llama], end - 4, end, 1.0))[llama]
        assert [r.time_s for r in history] == [end - 4, end - 3, end - 2, end - 1, end]
        for reading in history:
            instant = (await source.read([llama], reading.time_s))[llama]
            assert instant == reading
        arrays = (await source.read_history([llama], end - 4, end, 2.0))[llama]
        assert arrays.times.tolist() == [end - 4, end - 2, end]
        by_time = {r.time_s: r for r in history}
        for t, rate in zip(arrays.times, arrays.requests_per_s, strict=True):
            assert rate == by_time[t].arrival_rate_rps
    finally:
        await source.close()


async def test_a_range_longer_than_a_page_reads_in_pages_as_one(prom: PrometheusServer) -> None:
    """A backfill longer than Prometheus's points-per-query limit (three days
    at 15 s) is read in pages on the same grid: the same readings as one query."""
    paged = PrometheusSource(prom.url, rate_window_s=5, max_range_points=3)
    whole = PrometheusSource(prom.url, rate_window_s=5)
    try:
        llama = sel('namespace="llm"', "llama")
        # The module's Prometheus may be fresh (this test run alone): wait,
        # bounded, until it has scraped at every point of the 8 s range.
        deadline = time.monotonic() + 20
        while True:
            end = now_grid()
            health = prom.api(
                "query_range", query="count(up)", start=str(end - 7), end=str(end), step="1"
            )["result"]
            if health and len(health[0]["values"]) == 8:
                break
            assert time.monotonic() < deadline, f"no 8 s of scrapes before {end}: {health}"
            time.sleep(0.5)
        got = (await paged.read_range([llama], end - 7, end, 1.0))[llama]
        assert got == (await whole.read_range([llama], end - 7, end, 1.0))[llama]
        assert [r.time_s for r in got] == [end - 7 + k for k in range(8)]
        assert paged.queries_sent == 3 * len(SIGNALS)  # pages of 3, 3 and 2 points
        arrays = (await paged.read_history([llama], end - 6, end, 2.0))[llama]
        assert arrays.times.tolist() == [end - 6, end - 4, end - 2, end]
    finally:
        await paged.close()
        await whole.close()


@given(
    start=st.integers(0, 10_000),
    points=st.integers(1, 500),
    step=st.sampled_from([1.0, 5.0, 15.0, 60.0]),
    max_points=st.integers(1, 40),
)
def test_pages_cover_the_grid_once_within_the_limit(
    start: int, points: int, step: float, max_points: int
) -> None:
    pages = range_pages(float(start), start + (points - 1) * step, step, max_points)
    grid = [a + k * s for a, b, s in pages for k in range(round((b - a) / s) + 1)]
    assert grid == [start + k * step for k in range(points)]
    assert all(round((b - a) / s) + 1 <= max_points for a, b, s in pages)


def test_pages_are_packed_to_floats_and_merged_in_order() -> None:
    a, b = {"pod": "a"}, {"pod": "b"}
    first: list[dict[str, Any]] = [
        {"metric": a, "values": [[1.0, "2"], [2.0, "NaN"]]},
        {"metric": b, "values": []},
    ]
    second: list[dict[str, Any]] = [
        {"metric": a, "values": [[3.0, "+Inf"]]},
        {"metric": b, "values": [[3.0, "5.5"]]},
    ]
    merged = merge_pages([pack_page(first, "waiting"), pack_page(second, "waiting")])
    assert [m["metric"] for m in merged] == [a, b]
    times, values = zip(*merged[0]["values"], strict=True)
    assert times == (1.0, 2.0, 3.0)
    assert values[0] == 2.0 and math.isnan(values[1]) and values[2] == math.inf
    assert list(merged[1]["values"]) == [[3.0, 5.5]]
    with pytest.raises(SourceError, match="waiting"):
        bad: list[dict[str, Any]] = [{"metric": a, "values": [[1.0, "many"]]}]
        pack_page(bad, "waiting")


def test_failing_scrapes_read_as_missing_never_as_idle() -> None:
    """Against a real Prometheus: when a replica's scrape fails
    (``up == 0``) its vLLM series go stale at once. The ``lost`` query still
    sees it, so the reading is partial (waiting NaN), and with every replica
    failing there is no reading at all, instead of "0 replicas, 0 waiting"."""
    import asyncio
    import math

    a = FakeVllm(model="llama", engines=[Engine(waiting=4, running=2, kv=0.5)]).start()
    b = FakeVllm(model="llama", engines=[Engine(waiting=6, running=2, kv=0.7)]).start()
    try:
        targets = [Target(r.address, {"namespace": "llm"}) for r in (a, b)]
        with running_prometheus(targets) as server:
            server.wait_for_targets_up(2)
            server.wait_for("vllm:num_requests_running", min_series=2)
            llama, idle = sel('namespace="llm"', "llama"), sel('namespace="idle"')

            def read() -> dict[Selection, object]:
                async def go() -> dict[Selection, object]:
                    source = PrometheusSource(server.url, rate_window_s=5)
                    try:
                        return await source.read([llama, idle], time.time())  # type: ignore[return-value]
                    finally:
                        await source.close()

                return asyncio.run(go())

            whole = read()[llama]
            assert (whole.ready_replicas, whole.waiting) == (2, 10.0)  # type: ignore[attr-defined]
            b.mode = "refuse"
            server.wait_for("up == 0", min_series=1)
            time.sleep(0.5)
            readings = read()
            partial = readings[llama]
            assert partial.ready_replicas == 1  # type: ignore[attr-defined]
            assert math.isnan(partial.waiting)  # type: ignore[attr-defined]
            assert partial.kv_usage == 0.5  # type: ignore[attr-defined]
            # a namespace with no vLLM at all is still an empty fleet: zero
            assert readings[idle].waiting == 0.0  # type: ignore[attr-defined]
            a.mode = "refuse"
            server.wait_for("up == 0", min_series=2)
            time.sleep(0.5)
            assert llama not in read()
    finally:
        a.stop()
        b.stop()


def test_real_emulators_of_both_generations_are_read() -> None:
    """The engine emulator (V1 and V0 text) through a real Prometheus."""
    import asyncio

    with (
        running_emulators(2, metrics_version="v1", served_model_name="m1") as v1,
        running_emulators(1, metrics_version="v0", served_model_name="m1") as v0,
    ):
        targets = [Target(u.removeprefix("http://")) for u in v1 + v0]
        with running_prometheus(targets) as server:
            server.wait_for_targets_up(3)
            server.wait_for("vllm:num_requests_running", min_series=3)
            time.sleep(1.0)  # the evaluation time below must follow every first scrape
            source = PrometheusSource(server.url, rate_window_s=5)

            async def read() -> Mapping[Selection, object]:
                try:
                    return await source.read([sel("", "m1")], time.time() - 0.5)
                finally:
                    await source.close()

            reading = asyncio.run(read())[sel("", "m1")]
            assert reading.ready_replicas == 3  # type: ignore[attr-defined]
            assert reading.kv_usage == 0.0  # type: ignore[attr-defined]
            assert reading.waiting == 0.0  # type: ignore[attr-defined]


def test_missing_prometheus_fails_under_ci_and_skips_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under CI=true a missing binary is a failure, never a silent skip."""
    from tests.support import prometheus as helper

    monkeypatch.setattr(helper.shutil, "which", lambda _name: None)
    monkeypatch.setattr(helper, "DEFAULT_BINARY", "/nonexistent/prometheus")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        helper.prometheus_binary()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        helper.prometheus_binary()


async def test_waiting_is_the_capacity_queue_where_vllm_splits_it() -> None:
    """A vLLM 0.32 replica with 3 requests waiting for capacity and 5 deferred
    (LoRA budget, KV transfer) beside an old replica with 2 waiting and no
    split: waiting is 3 + 2. Deferred requests do not ask for replicas; a
    replica without the split counts its whole queue."""
    from aiohttp import web

    from tests.scaler.conftest import ThreadedApp

    labels = 'engine="0",model_name="llama"'
    page = "\n".join([
        "# TYPE vllm:num_requests_running gauge",
        f"vllm:num_requests_running{{{labels}}} 4.0",
        "# TYPE vllm:num_requests_waiting gauge",
        f"vllm:num_requests_waiting{{{labels}}} 8.0",
        "# TYPE vllm:num_requests_waiting_by_reason gauge",
        f'vllm:num_requests_waiting_by_reason{{{labels},reason="capacity"}} 3.0',
        f'vllm:num_requests_waiting_by_reason{{{labels},reason="deferred"}} 5.0',
        "# TYPE vllm:kv_cache_usage_perc gauge",
        f"vllm:kv_cache_usage_perc{{{labels}}} 0.5",
        "",
    ])  # fmt: skip

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(text=page)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    new = ThreadedApp(app)
    old = FakeVllm(model="llama", generation="v0", engines=[Engine(waiting=2, running=1)]).start()
    try:
        targets = [Target(a.address, {"namespace": "llm"}) for a in (new, old)]
        with running_prometheus(targets) as server:
            server.wait_for_targets_up(2)
            server.wait_for("vllm:num_requests_waiting_by_reason", min_series=2)
            server.wait_for("vllm:num_requests_waiting", min_series=2)
            source = PrometheusSource(server.url, timeout_s=5, rate_window_s=5)
            try:
                selection = sel('namespace="llm"', "llama")
                reading = (await source.read([selection], time.time()))[selection]
            finally:
                await source.close()
        assert (reading.waiting, reading.running, reading.ready_replicas) == (5.0, 5.0, 2)
    finally:
        new.stop()
        old.stop()


class _Vllm033:
    """A vLLM 0.33 replica's page, rendered by the engine emulator's own
    exposition code (``engine.metrics``, shaped like a real vLLM 0.32/0.33 page),
    with counters that grow at fixed rates from the moment it starts."""

    def __init__(
        self,
        *,
        sleep_state: str = "awake",
        num_gpu_blocks: int = 1000,
        waiting: int = 0,
        running: int = 0,
        per_second: Mapping[str, float] | None = None,
    ) -> None:
        from aiohttp import web

        from tests.scaler.conftest import ThreadedApp

        self.sleep_state, self.num_gpu_blocks = sleep_state, num_gpu_blocks
        self.waiting, self.running = waiting, running
        self.per_second = dict(per_second or {})
        self.started = time.monotonic()

        async def metrics(_request: web.Request) -> web.Response:
            return web.Response(text=self.render())

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        self.server = ThreadedApp(app)

    def count(self, what: str) -> int:
        return int(self.per_second.get(what, 0.0) * (time.monotonic() - self.started))

    def render(self) -> str:
        from engine.metrics import (
            ITL_BUCKETS_V1,
            REQUEST_LATENCY_BUCKETS_V1,
            TTFT_BUCKETS_V1,
            Histogram,
            HistogramSnapshot,
            MetricsSnapshot,
            ServerInfo,
            render_metrics,
            request_token_buckets,
        )

        def empty(bounds: tuple[float, ...]) -> HistogramSnapshot:
            return Histogram(bounds).snapshot()

        snap = MetricsSnapshot(
            num_requests_running=self.running,
            num_requests_waiting=self.waiting,
            kv_cache_usage=0.25,
            num_preemptions=0,
            prompt_tokens=self.count("prompt"),
            generation_tokens=self.count("generation"),
            request_success=(("stop", self.count("stop")), ("error", self.count("error"))),
            time_to_first_token=empty(TTFT_BUCKETS_V1),
            inter_token_latency=empty(ITL_BUCKETS_V1),
            e2e_request_latency=empty(REQUEST_LATENCY_BUCKETS_V1),
            request_queue_time=empty(REQUEST_LATENCY_BUCKETS_V1),
            request_prompt_tokens=empty(request_token_buckets(512)),
            request_generation_tokens=empty(request_token_buckets(512)),
        )
        server = ServerInfo(
            admission_rejections=(("max_num_queued_reqs", self.count("rejected")),),
            sleep_state=self.sleep_state,
            block_size=16,
            num_gpu_blocks=self.num_gpu_blocks,
        )
        return render_metrics(snap, model_name="llama", version="v0.32", server=server).decode()

    @property
    def url(self) -> str:
        return f"{self.server.url}/metrics"

    def stop(self) -> None:
        self.server.stop()


async def _via_prometheus_and_scraped(
    scraped: Selection, targets: list[Target], ready_query: str, settle_s: float
) -> tuple[Reading, Reading]:
    """The same fleet read through a real Prometheus (once ``ready_query`` has a
    series and ``settle_s`` more of scrapes) and by direct scrape: (via, direct)."""
    from scaler.sources.scrape import ScrapeSource

    scrape = ScrapeSource(timeout_s=5)
    await scrape.read([scraped], time.time())  # the scrape's first counters
    with running_prometheus(targets) as server:
        server.wait_for_targets_up(len(targets))
        server.wait_for(ready_query, min_series=1)
        time.sleep(settle_s)
        promql = sel('namespace="llm"', "llama")
        source = PrometheusSource(server.url, timeout_s=5, rate_window_s=5)
        try:
            via_prometheus = (await source.read([promql], time.time() - 0.5))[promql]
        finally:
            await source.close()
    direct = (await scrape.read([scraped], time.time()))[scraped]
    await scrape.close()
    return via_prometheus, direct


async def test_newer_vllm_families_read_the_same_through_prometheus_as_scraped() -> None:
    """The same vLLM 0.33 fleet read through a real Prometheus and scraped
    directly gives the same reading: a sleeping replica
    (``vllm:engine_sleep_state{sleep_state="awake"} 0``) is present but not
    ready; ``finished_reason="error"`` finishes are arrivals, not completions;
    admission rejections (``vllm:admission_rejections_total``) are arrivals
    and ``rejections_per_s``; computed prompt tokens are
    ``prompt_tokens_by_source_total{source="local_compute"}``; the KV cache
    size is ``num_gpu_blocks x block_size`` from ``vllm:cache_config_info``'s
    labels, averaged over replicas (vLLM 0.33 metric names, vllm/v1/metrics/loggers.py)."""
    awake = _Vllm033(
        num_gpu_blocks=1000, waiting=3, running=2,
        per_second={"stop": 20.0, "error": 5.0, "rejected": 10.0, "prompt": 2000.0,
                    "generation": 300.0},
    )  # fmt: skip
    asleep = _Vllm033(sleep_state="weights_offloaded", num_gpu_blocks=2000)
    replicas = (awake, asleep)
    try:
        scraped = Selection(
            (LabelMatcher("model_name", "=", "llama"),), urls=tuple(r.url for r in replicas)
        )
        targets = [Target(r.server.address, {"namespace": "llm"}) for r in replicas]
        via_prometheus, direct = await _via_prometheus_and_scraped(
            scraped,
            targets,
            "rate(vllm:admission_rejections_total[5s]) > 0",
            6.0,  # a full 5 s rate window of scrapes
        )
    finally:
        for replica in replicas:
            replica.stop()
    for reading in (via_prometheus, direct):
        assert (reading.ready_replicas, reading.waiting, reading.running) == (1, 3.0, 2.0)
        assert reading.kv_usage == 0.25
        assert reading.kv_cache_tokens == (1000 * 16 + 2000 * 16) / 2
        assert reading.completion_rate_rps == pytest.approx(20.0, rel=0.2)
        assert reading.rejections_per_s == pytest.approx(10.0, rel=0.2)
        assert reading.arrival_rate_rps == pytest.approx(20.0 + 5.0 + 10.0, rel=0.2)
        assert reading.computed_prompt_tokens_per_s == pytest.approx(2000.0, rel=0.2)
        assert reading.prompt_tokens_per_s == pytest.approx(2000.0, rel=0.2)
        assert reading.generation_tokens_per_s == pytest.approx(300.0, rel=0.2)
        assert reading.preemptions_per_s == 0.0


async def test_older_vllm_without_the_newer_families_reads_them_as_unknown() -> None:
    """A vLLM 0.12 fleet (no rejections, sleep state, cache config or
    by-source split) through Prometheus: every replica is ready, the arrival
    balance still works, and the newer signals are unknown (``None``), never
    zero, exactly as the direct scrape reports them."""
    old = FakeVllm(
        model="llama", engines=[Engine(waiting=2, running=1, per_second={"success": 4.0})]
    ).start()
    try:
        scraped = Selection((LabelMatcher("model_name", "=", "llama"),), urls=(old.url,))
        via_prometheus, direct = await _via_prometheus_and_scraped(
            scraped,
            [Target(old.address, {"namespace": "llm"})],
            "rate(vllm:request_success_total[5s]) > 0",
            3.0,
        )
    finally:
        old.stop()
    for reading in (via_prometheus, direct):
        assert (reading.ready_replicas, reading.waiting) == (1, 2.0)
        assert reading.arrival_rate_rps == pytest.approx(4.0, rel=0.3)
        assert reading.rejections_per_s is None
        assert reading.computed_prompt_tokens_per_s is None
        assert reading.kv_cache_tokens is None
