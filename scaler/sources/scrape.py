"""Direct scrape of vLLM ``/metrics`` (the ``metricsUrls`` metadata key).

For clusters without Prometheus, or when its scrape interval is too coarse.
Every distinct URL is scraped once per refresh however many ScaledObjects
list it (aiohttp, one timeout for all). Rates come from successive scrapes
of the same URL (only between pages of the same process: see
``scaler.sources.vllm_text``). A ScaledObject whose URLs did not all answer
with vLLM metrics *for its selection* gets no reading this time: the state
holds its last good data rather than reading a dead replica, or a URL that
serves another model, as an idle one.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from scaler.sources.model import History, Reading, Selection, SourceSpec, usable
from scaler.sources.vllm_text import Page, page_rates, parse_vllm_text, select

MAX_PAGE_BYTES = 8 * 1024 * 1024
FORGET_AFTER_S = 600.0


@dataclass(frozen=True)
class TargetState:
    """The last good scrape of one URL and the per-series rates it gave."""

    time_s: float
    page: Page
    rates: dict[tuple[str, tuple[tuple[str, str], ...]], float] | None


class ScrapeError(RuntimeError):
    """One URL did not give a vLLM page."""


class ScrapeSource:
    """Scrapes each distinct URL once per refresh; aggregates per selection."""

    def __init__(self, *, timeout_s: float = 2.0, spec: SourceSpec | None = None) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.spec = spec or SourceSpec("scrape")
        self.timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None
        self._targets: dict[str, TargetState] = {}
        self.scrapes_sent = 0

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                connector=aiohttp.TCPConnector(limit=64, force_close=False),
            )
        return self._session

    async def _scrape(self, url: str) -> Page:
        self.scrapes_sent += 1
        try:
            async with self._client().get(url, headers={"Accept": "text/plain"}) as response:
                if response.status != 200:
                    raise ScrapeError(f"{url}: HTTP {response.status}")
                body = await response.content.read(MAX_PAGE_BYTES + 1)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ScrapeError(f"{url}: {exc!r}") from exc
        if len(body) > MAX_PAGE_BYTES:
            raise ScrapeError(f"{url}: page larger than {MAX_PAGE_BYTES} bytes")
        try:
            return parse_vllm_text(body.decode("utf-8", errors="strict"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ScrapeError(f"{url}: {exc}") from exc

    def known(self, url: str) -> bool:
        """Whether ``url`` gave a vLLM page within the last ``FORGET_AFTER_S``."""
        return url in self._targets

    async def scrape_urls(self, urls: Sequence[str], at_s: float) -> dict[str, TargetState]:
        """Scrape ``urls`` concurrently; the URLs that answered, with their state."""
        unique = list(dict.fromkeys(urls))
        pages = await asyncio.gather(*(self._scrape(u) for u in unique), return_exceptions=True)
        good: dict[str, TargetState] = {}
        for url, page in zip(unique, pages, strict=True):
            if not isinstance(page, Page):
                continue
            before = self._targets.get(url)
            rates = page_rates(before.page, page, at_s - before.time_s) if before else None
            if before and at_s <= before.time_s:
                rates = before.rates
            state = TargetState(at_s, page, rates)
            self._targets[url] = state
            good[url] = state
        for url in [u for u, t in self._targets.items() if at_s - t.time_s > FORGET_AFTER_S]:
            del self._targets[url]  # pods long gone: keep memory bounded
        return good

    async def read(self, selections: Sequence[Selection], at_s: float) -> dict[Selection, Reading]:
        urls = [u for s in selections for u in s.urls]
        good = await self.scrape_urls(urls, at_s)
        out: dict[Selection, Reading] = {}
        for selection in dict.fromkeys(selections):
            if all(u in good for u in selection.urls):
                reading = aggregate(selection, [good[u] for u in selection.urls], at_s)
                if reading is not None:
                    out[selection] = reading
        return out

    async def read_range(
        self, selections: Sequence[Selection], start_s: float, end_s: float, step_s: float
    ) -> dict[Selection, list[Reading]]:
        return {}  # a direct scrape keeps no history

    async def read_history(
        self, selections: Sequence[Selection], start_s: float, end_s: float, step_s: float
    ) -> dict[Selection, History]:
        return {}  # no history: forecasts start once enough live bins exist

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def aggregate(
    selection: Selection,
    targets: Sequence[TargetState],
    at_s: float,
    *,
    ready: Sequence[bool] | None = None,
    incomplete: bool = False,
) -> Reading | None:
    """Sum one selection's series over its replicas (and over ``engine``).

    ``ready[i]`` says whether ``targets[i]`` counts as a ready replica (all do
    by default; Kubernetes passes pod readiness: a Running-but-not-Ready pod's
    queue is real demand, but it is no serving capacity). ``None`` when a
    target has no series for the selection (a wrong URL or model is missing
    data, not an idle replica). ``incomplete`` (a replica known to exist could
    not be read) makes waiting NaN and rates unknown: the policy may then
    raise the answer but never lower it (``running`` stays the readable
    replicas' sum, a lower bound). No targets at all is an empty fleet: zero
    demand.
    """
    accept = selection.matches
    counted = ready if ready is not None else [True] * len(targets)
    replicas = 0
    waiting = running = 0.0
    kv_values: list[float] = []
    rate_sums: dict[str, float] = {}
    rates_known = bool(targets) and not incomplete
    for target, is_ready in zip(targets, counted, strict=True):
        values = target.page.values
        running_here = list(select(values, "vllm:num_requests_running", accept))
        if not running_here:
            return None  # this URL serves another model (or none): not "idle"
        replicas += int(is_ready)
        running += sum(running_here)
        waiting += sum(select(values, "vllm:num_requests_waiting", accept))
        kv_here = list(select(values, "vllm:kv_cache_usage_perc", accept)) or list(
            select(values, "vllm:gpu_cache_usage_perc", accept)
        )
        kv_values.extend(kv_here)
        if target.rates is None:
            rates_known = False
            continue
        for name in (
            "vllm:request_success_total",
            "vllm:prompt_tokens_total",
            "vllm:generation_tokens_total",
            "vllm:num_preemptions_total",
            "vllm:num_requests_waiting",
            "vllm:num_requests_running",
        ):
            for value in select(target.rates, name, accept):
                rate_sums[name] = rate_sums.get(name, 0.0) + value

    def rate(name: str) -> float | None:
        if not targets and not incomplete:
            return 0.0
        if not rates_known:
            return None
        return max(0.0, rate_sums.get(name, 0.0))

    completions = rate("vllm:request_success_total")
    arrival = None
    if completions is not None:
        growth = rate_sums.get("vllm:num_requests_waiting", 0.0) + rate_sums.get(
            "vllm:num_requests_running", 0.0
        )
        arrival = max(0.0, completions + growth)
    kv = sum(kv_values) / len(kv_values) if kv_values else None
    if kv is not None and not math.isfinite(kv):
        kv = None
    reading = Reading(
        time_s=at_s,
        ready_replicas=replicas,
        waiting=math.nan if incomplete else max(0.0, waiting),
        running=max(0.0, running),  # incomplete: a lower bound (traffic seen is traffic)
        kv_usage=kv,
        arrival_rate_rps=arrival,
        completion_rate_rps=completions,
        prompt_tokens_per_s=rate("vllm:prompt_tokens_total"),
        generation_tokens_per_s=rate("vllm:generation_tokens_total"),
        preemptions_per_s=rate("vllm:num_preemptions_total"),
    )
    return reading if usable(reading) else None
