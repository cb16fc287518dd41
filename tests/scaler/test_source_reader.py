"""scaler.source_reader: one grouped read per source, source health, and
each source's last failure in words (against real dead or failing endpoints)."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from decision.reading import Reading
from decision.settings import parse_settings
from decision.tracker_data import TrackerConfig
from scaler.registry import Entry, ObjectRegistry
from scaler.source_reader import SourceReader, describe_failure
from scaler.sources import History, Selection, SourceError, SourceSpec
from scaler.sources.prometheus import PrometheusSource
from tests.scaler.conftest import PrometheusProxy
from tests.scaler.test_state import FakeSource, meta, queue_of

PROM_A = SourceSpec("prometheus", "http://prom-a:9090")
PROM_B = SourceSpec("prometheus", "http://prom-b:9090")


@dataclass
class PartialSource:
    """Answers only the selections of model ``llama`` (others failed on their own)."""

    spec: SourceSpec
    closed: int = 0
    reads: list[int] = field(default_factory=list)

    async def read(self, selections: Sequence[Selection], at_s: float) -> dict[Selection, Reading]:
        self.reads.append(len(selections))
        reading = queue_of(waiting=3)
        return {
            s: reading(s, at_s)
            for s in selections
            if any(m.value == "llama" for m in s.matchers if m.name == "model_name")
        }

    async def read_range(
        self, selections: Sequence[Selection], start_s: float, end_s: float, step_s: float
    ) -> dict[Selection, list[Reading]]:
        return {}

    async def read_history(
        self, selections: Sequence[Selection], start_s: float, end_s: float, step_s: float
    ) -> dict[Selection, History]:
        return {}

    async def close(self) -> None:
        self.closed += 1


def entries(*specs: tuple[str, dict[str, str]]) -> list[Entry]:
    """Entries named ``name`` with metadata ``meta(**extra)``."""
    objects = ObjectRegistry(TrackerConfig(refresh_interval_s=1.0, refit_interval_s=60.0))
    for name, extra in specs:
        objects.register("ns", name, meta(**extra))
    return list(objects)


def closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


async def test_each_source_is_read_once_for_all_its_objects() -> None:
    a = FakeSource(PROM_A, queue_of(waiting=4))
    b = FakeSource(PROM_B, queue_of(waiting=8))
    made: list[SourceSpec] = []

    def factory(spec: SourceSpec) -> FakeSource:
        made.append(spec)
        return a if spec == PROM_A else b

    up: list[tuple[str, bool]] = []
    reader = SourceReader(factory, report_up=lambda label, ok: up.append((label, ok)))
    objs = entries(
        ("x", {"prometheusAddress": PROM_A.address, "model": "llama"}),
        ("y", {"prometheusAddress": PROM_A.address, "model": "llama"}),  # same selection
        ("z", {"prometheusAddress": PROM_A.address, "model": "mistral"}),
        ("w", {"prometheusAddress": PROM_B.address}),
    )
    readings = await reader.read(objs, 100.0)
    assert a.reads == [(2, 100.0)] and b.reads == [(1, 100.0)]  # deduplicated selections
    assert {k: r.waiting for k, r in readings.items()} == {
        ("ns", "x"): 4,
        ("ns", "y"): 4,
        ("ns", "z"): 4,
        ("ns", "w"): 8,
    }
    await reader.read(objs, 101.0)
    assert made == [PROM_A, PROM_B]  # one source per spec, kept
    assert sorted(set(up)) == [
        ("prometheus:http://prom-a:9090", True),
        ("prometheus:http://prom-b:9090", True),
    ]
    assert all(reader.problem(e) is None for e in objs)


async def test_a_failing_source_is_down_and_says_why_until_it_heals() -> None:
    a = FakeSource(PROM_A, queue_of(waiting=4), fail=True)
    b = FakeSource(PROM_B, queue_of(waiting=8))
    up: dict[str, bool] = {}
    reader = SourceReader(
        lambda spec: a if spec == PROM_A else b, report_up=lambda label, ok: up.update({label: ok})
    )
    x, w = entries(
        ("x", {"prometheusAddress": PROM_A.address}), ("w", {"prometheusAddress": PROM_B.address})
    )
    readings = await reader.read([x, w], 100.0)
    assert list(readings) == [w.key]  # the other source is read all the same
    assert up == {"prometheus:http://prom-a:9090": False, "prometheus:http://prom-b:9090": True}
    assert reader.problem(x) == "Prometheus http://prom-a:9090: down on purpose"
    assert reader.problem(w) is None
    a.fail = False
    assert list(await reader.read([x, w], 101.0)) == [x.key, w.key]
    assert up["prometheus:http://prom-a:9090"] is True
    assert reader.problem(x) is None


async def test_an_object_its_source_left_out_gets_no_reading_and_a_reason() -> None:
    source = PartialSource(PROM_A)
    up: list[bool] = []
    reader = SourceReader(lambda spec: source, report_up=lambda _label, ok: up.append(ok))
    kept, left = entries(
        ("kept", {"prometheusAddress": PROM_A.address, "model": "llama"}),
        ("left", {"prometheusAddress": PROM_A.address, "model": "mistral"}),
    )
    readings = await reader.read([kept, left], 100.0)
    assert list(readings) == [kept.key]
    assert up == [False]  # incomplete counts as down
    assert (
        reader.problem(left) == "Prometheus http://prom-a:9090 answered no series for this object"
    )
    assert reader.problem(kept) is None
    reader.forget(left.key)
    assert reader.problem(left) is None
    await reader.close()
    assert source.closed == 1


async def test_a_scrape_left_out_names_its_urls() -> None:
    objects = ObjectRegistry(TrackerConfig(refresh_interval_s=1.0, refit_interval_s=60.0))
    objects.register("ns", "s", parse_settings({"metricsUrls": "http://10.0.0.1:8000/metrics"}))
    (entry,) = list(objects)
    reader = SourceReader(lambda spec: PartialSource(spec))
    assert await reader.read([entry], 100.0) == {}
    assert reader.problem(entry) == (
        "direct scrape: no reading from http://10.0.0.1:8000/metrics"
        " (unreachable, or no series of its model)"
    )


async def failure_of(url: str, timeout_s: float = 5.0) -> str:
    spec = SourceSpec("prometheus", url)
    source = PrometheusSource(url, timeout_s=timeout_s, rate_window_s=5)
    try:
        with pytest.raises(SourceError) as caught:
            await source.read([Selection()], 100.0)
    finally:
        await source.close()
    return describe_failure(spec, caught.value)


async def test_a_refused_connection_is_said_so() -> None:
    url = closed_port_url()
    assert await failure_of(url) == f"Prometheus {url} unreachable: connection refused"


async def test_an_http_error_names_its_status() -> None:
    proxy = PrometheusProxy(closed_port_url())
    proxy.mode = "error"  # HTTP 500 without asking upstream
    try:
        assert await failure_of(proxy.url) == f"Prometheus {proxy.url} answered HTTP 500"
    finally:
        proxy.stop()


async def test_a_timeout_is_said_so() -> None:
    proxy = PrometheusProxy(closed_port_url())
    proxy.mode, proxy.delay_s = "slow", 5.0
    try:
        text = await failure_of(proxy.url, timeout_s=0.3)
    finally:
        proxy.stop()
    # the client's own read timeout or the source's deadline, whichever fires first
    assert text.startswith(f"Prometheus {proxy.url} timed out: "), text


def test_a_failed_dns_lookup_is_said_so() -> None:
    """The chain urllib3 and requests build for an unknown host (built here:
    a real lookup depends on the machine's resolver)."""
    lookup = socket.gaierror(-2, "Name or service not known")
    try:
        try:
            raise lookup
        except OSError as exc:
            raise ConnectionError("Failed to resolve 'prom.invalid'") from exc
    except ConnectionError as exc:
        wrapped = SourceError(f"Prometheus http://prom.invalid:9090: {exc!r}")
        wrapped.__cause__ = exc
    spec = SourceSpec("prometheus", "http://prom.invalid:9090")
    assert describe_failure(spec, wrapped) == (
        "Prometheus http://prom.invalid:9090 unreachable: DNS lookup failed"
        " (Name or service not known)"
    )


def test_other_failures_keep_their_own_words() -> None:
    assert describe_failure(SourceSpec("kubernetes"), SourceError("listing pods: forbidden")) == (
        "Kubernetes pod discovery: listing pods: forbidden"
    )
    spec = SourceSpec("prometheus", "http://p:9090")
    assert describe_failure(spec, SourceError("Prometheus http://p:9090: q answered 3")) == (
        "Prometheus http://p:9090: q answered 3"
    )
