"""Kubernetes discovery: the pods of a label selector -> scrape URLs.

Only this module talks to the Kubernetes API (the synchronous official
client, in a thread executor). For each ``(namespace, podSelector)`` it lists
pods (cached for ``discovery_interval_s``), scrapes every Running pod with an
IP that is not being deleted, and measures creation -> Ready, the lead time
behind ``leadTimeSeconds: auto``. Only Ready pods are ready replicas, but a
Running, not-Ready pod's queue is summed in. A pod that cannot be scraped
makes only itself unknown: a Ready one (or one that served lately) makes the
reading incomplete, a starting one is ignored; no pod readable is no
reading, no pod at all an empty fleet.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from decision.reading import Reading
from scaler.sources.model import History, Selection, SourceError, SourceSpec
from scaler.sources.scrape import ScrapeSource, aggregate

DEFAULT_VLLM_PORT = 8000
_PORT_NAMES = ("metrics", "http", "http-metrics")


@dataclass(frozen=True)
class PodInfo:
    """What discovery needs from one pod (pure data)."""

    name: str
    ip: str
    ready: bool
    port: int
    created_s: float | None
    ready_s: float | None
    running: bool = False
    """Running with an IP and not being deleted: scraped, Ready or not."""

    @property
    def metrics_url(self) -> str:
        host = f"[{self.ip}]" if ":" in self.ip else self.ip
        return f"http://{host}:{self.port}/metrics"

    @property
    def startup_s(self) -> float | None:
        """Creation -> Ready, when both are known and the pod is Ready."""
        if not self.ready or self.created_s is None or self.ready_s is None:
            return None
        return max(0.0, self.ready_s - self.created_s)


def _timestamp(raw: Any) -> float | None:
    if not isinstance(raw, str) or not raw:
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def pod_info(pod: Mapping[str, Any]) -> PodInfo:
    """Parse one pod of a ``PodList`` JSON (as the API server sends it)."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    ready, ready_s = False, None
    for condition in status.get("conditions") or ():
        if condition.get("type") == "Ready":
            ready = condition.get("status") == "True"
            ready_s = _timestamp(condition.get("lastTransitionTime"))
    port = DEFAULT_VLLM_PORT
    ports = [p for c in spec.get("containers") or () for p in c.get("ports") or ()]
    named = [p for p in ports if p.get("name") in _PORT_NAMES]
    if named or ports:
        chosen = (named or ports)[0].get("containerPort")
        if isinstance(chosen, int) and 0 < chosen < 65536:
            port = chosen
    deleting = bool(meta.get("deletionTimestamp"))
    ip = status.get("podIP") or ""
    running = bool(ip) and not deleting and status.get("phase") == "Running"
    return PodInfo(
        name=str(meta.get("name", "")),
        ip=str(ip),
        ready=ready and running,
        port=port,
        created_s=_timestamp(meta.get("creationTimestamp")),
        ready_s=ready_s,
        running=running,
    )


def default_api_factory() -> Any:
    """A ``CoreV1Api`` from in-cluster config, else the local kubeconfig."""
    import kubernetes

    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()
    return kubernetes.client.CoreV1Api()


class PodDiscovery:
    """Lists pods of a selector through the Kubernetes API, with a short cache."""

    def __init__(
        self,
        api_factory: Callable[[], Any] = default_api_factory,
        *,
        timeout_s: float = 5.0,
        discovery_interval_s: float = 10.0,
        executor: concurrent.futures.Executor | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api_factory = api_factory
        self._api: Any = None
        self.timeout_s = timeout_s
        self.discovery_interval_s = discovery_interval_s
        self._executor = executor or concurrent.futures.ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="kube"
        )
        self._clock = clock
        self._cache: dict[tuple[str, str], tuple[float, list[PodInfo]]] = {}
        self.calls = 0

    def _list(self, namespace: str, selector: str) -> list[PodInfo]:
        if self._api is None:
            self._api = self._api_factory()
        self.calls += 1
        response = self._api.list_namespaced_pod(
            namespace,
            label_selector=selector,
            _preload_content=False,
            _request_timeout=self.timeout_s,
        )
        body = json.loads(response.data)
        return [pod_info(item) for item in body.get("items") or ()]

    async def pods(self, namespace: str, selector: str) -> list[PodInfo]:
        key = (namespace, selector)
        cached = self._cache.get(key)
        now = self._clock()
        if cached is not None and now - cached[0] < self.discovery_interval_s:
            return cached[1]
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout_s):
                pods = await loop.run_in_executor(self._executor, self._list, namespace, selector)
        except Exception as exc:
            raise SourceError(
                f"Kubernetes API: listing pods {selector!r} in {namespace}: {exc!r}"[:400]
            ) from exc
        self._cache[key] = (now, pods)
        return pods


class KubernetesSource:
    """Discovery + direct scrape; adds measured startup durations to readings."""

    def __init__(
        self,
        discovery: PodDiscovery | None = None,
        scraper: ScrapeSource | None = None,
        *,
        spec: SourceSpec | None = None,
    ) -> None:
        self.spec = spec or SourceSpec("kubernetes")
        self.discovery = discovery or PodDiscovery()
        self.scraper = scraper or ScrapeSource(spec=self.spec)

    async def read(self, selections: Sequence[Selection], at_s: float) -> dict[Selection, Reading]:
        groups = list(dict.fromkeys((s.namespace, s.pod_selector) for s in selections))
        answers = await asyncio.gather(
            *(self.discovery.pods(ns, sel) for ns, sel in groups), return_exceptions=True
        )
        pods_of: dict[tuple[str, str], list[PodInfo]] = {}
        for group, answer in zip(groups, answers, strict=True):
            if isinstance(answer, list):
                pods_of[group] = answer
        if groups and not pods_of:
            first = next(a for a in answers if isinstance(a, BaseException))
            raise SourceError(str(first))
        urls = [p.metrics_url for group in groups for p in pods_of.get(group, ()) if p.running]
        good = await self.scraper.scrape_urls(urls, at_s)
        out: dict[Selection, Reading] = {}
        for selection in selections:
            pods = pods_of.get((selection.namespace, selection.pod_selector))
            if pods is None:
                continue
            scraped = [p for p in pods if p.running and p.metrics_url in good]
            failed = [p for p in pods if p.running and p.metrics_url not in good]
            if failed and not scraped:
                continue  # nothing of this fleet could be read: no reading (hold)
            # a Ready pod that did not answer, or a not-Ready one that answered
            # before, holds a queue we cannot see now: only that part is unknown
            lost = any(p.ready or self.scraper.known(p.metrics_url) for p in failed)
            reading = aggregate(
                selection,
                [good[p.metrics_url] for p in scraped],
                at_s,
                ready=[p.ready for p in scraped],
                incomplete=lost,
            )
            if reading is None:
                continue
            samples = tuple(s for p in pods if (s := p.startup_s) is not None)
            out[selection] = replace(reading, lead_time_samples_s=samples)
        return out

    async def read_range(
        self, selections: Sequence[Selection], start_s: float, end_s: float, step_s: float
    ) -> dict[Selection, list[Reading]]:
        return {}

    async def read_history(
        self, selections: Sequence[Selection], start_s: float, end_s: float, step_s: float
    ) -> dict[Selection, History]:
        return {}  # no history: forecasts start once enough live bins exist

    async def close(self) -> None:
        await self.scraper.close()
