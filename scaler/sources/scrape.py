"""Direct scrape of vLLM ``/metrics`` (the ``metricsUrls`` metadata key).

For clusters without Prometheus, or when its scrape interval is too coarse.
Every distinct URL is scraped once per refresh however many ScaledObjects
list it (aiohttp, one timeout for all). Rates come from successive scrapes
of the same URL (only between pages of the same process: see
``scaler.sources.vllm_text``). A URL that does not answer with vLLM metrics
*for its selection* (down, garbage, another model) makes only that replica
unknown: the reading is *incomplete* (waiting NaN, rates unknown, running a
lower bound), so the policy may raise the answer but never lower it, and
never reads a dead replica or a URL serving another model as an idle one.
A ScaledObject none of whose URLs could be read gets no reading this time:
the state holds its last good data. A replica that is still starting (its
page declares vLLM's families but has no samples yet) is present and idle.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from decision.reading import Reading, usable
from scaler.sources.model import History, Selection, SourceSpec
from scaler.sources.vllm_text import (
    ADMISSION_REJECTIONS,
    FAILED_REASONS,
    GENERATION_TOKENS,
    PREEMPTIONS,
    PROMPT_BY_SOURCE,
    PROMPT_TOKENS,
    RUNNING,
    SLEEP_STATE,
    SUCCESS,
    WAITING,
    WAITING_BY_REASON,
    Page,
    SeriesKey,
    page_rates,
    parse_vllm_text,
    select,
    select_labelled,
)

MAX_PAGE_BYTES = 8 * 1024 * 1024
FORGET_AFTER_S = 600.0


@dataclass(frozen=True)
class TargetState:
    """The last good scrape of one URL and the per-series rates it gave."""

    time_s: float
    page: Page
    rates: dict[SeriesKey, float] | None


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
            urls = list(dict.fromkeys(selection.urls))
            answered = [good[u] for u in urls if u in good]
            if urls and not answered:
                continue  # nothing of this fleet could be read: no reading (hold)
            lost = len(answered) < len(urls)
            reading = aggregate(selection, answered, at_s, incomplete=lost)
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
    """Sum one selection's series over its replicas (and over ``engine``),
    as ``decision.reading.Reading``'s fields say (the capacity-limited queue,
    the arrival balance).

    ``ready[i]`` says whether ``targets[i]`` counts as a ready replica (all do
    by default; Kubernetes passes pod readiness: a Running-but-not-Ready pod's
    queue is demand, not capacity); a replica whose engines all sleep is no
    capacity either, and a fresh page is a present, idle replica. A target
    with series of another model only (a wrong URL or ``model``) is missing
    data, like ``incomplete``: waiting NaN, rates unknown, ``running`` a lower
    bound. ``None`` when no target could be read; no targets at all is an
    empty fleet: zero demand.
    """
    accept = selection.matches
    counted = ready if ready is not None else [True] * len(targets)
    replicas = 0
    waiting = running = 0.0
    read = 0
    kv_values: list[float] = []
    kv_sizes: list[float] = []
    rate_sums: dict[str, float] = {}
    rates_known = bool(targets) and not incomplete
    for target, is_ready in zip(targets, counted, strict=True):
        page = target.page
        values = page.values
        running_here = list(select(values, RUNNING, accept))
        if not running_here and not page.fresh:
            incomplete = True  # this URL serves another model (or none): not "idle"
            rates_known = False
            continue
        read += 1
        if page.kv_cache_tokens is not None:
            kv_sizes.append(page.kv_cache_tokens)
        awake = list(
            select(values, SLEEP_STATE, lambda labels: labels.get("sleep_state") == "awake"
                   and accept(labels))
        )  # fmt: skip
        asleep = bool(awake) and not any(v > 0 for v in awake)
        replicas += int(is_ready and not asleep)
        running += sum(running_here)
        capacity = [
            v
            for labels, v in select_labelled(values, WAITING_BY_REASON, accept)
            if labels.get("reason") == "capacity"
        ]
        waiting += sum(capacity) if capacity else sum(select(values, WAITING, accept))
        kv_here = list(select(values, "vllm:kv_cache_usage_perc", accept)) or list(
            select(values, "vllm:gpu_cache_usage_perc", accept)
        )
        kv_values.extend(kv_here)
        if target.rates is None:
            rates_known = False
            continue
        _add_rates(rate_sums, target.rates, accept)
    if targets and not read:
        return None

    def rate(name: str) -> float | None:
        if not targets and not incomplete:
            return 0.0
        if not rates_known:
            return None
        return max(0.0, rate_sums.get(name, 0.0))

    def optional(name: str) -> float | None:
        """A rate of a family older vLLM versions lack: ``None`` when absent."""
        return rate(name) if name in rate_sums or not targets else None

    completions = rate("completions")
    arrival = None
    if completions is not None:
        arrival = max(
            0.0,
            rate_sums.get("finished", 0.0)
            + rate_sums.get(WAITING, 0.0)
            + rate_sums.get(RUNNING, 0.0)
            + rate_sums.get(ADMISSION_REJECTIONS, 0.0),
        )
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
        prompt_tokens_per_s=rate(PROMPT_TOKENS),
        generation_tokens_per_s=rate(GENERATION_TOKENS),
        preemptions_per_s=rate(PREEMPTIONS),
        rejections_per_s=optional(ADMISSION_REJECTIONS),
        computed_prompt_tokens_per_s=optional("computed_prompt"),
        kv_cache_tokens=sum(kv_sizes) / len(kv_sizes) if kv_sizes else None,
    )
    return reading if usable(reading) else None


def _add_rates(sums: dict[str, float], rates: Mapping[SeriesKey, float], accept: Any) -> None:
    """Add one target's per-series rates into ``sums`` under the aggregate's keys.

    ``finished``: every finish; ``completions``: finishes that served the
    request (not ``error``); the waiting slope is the whole queue's (capacity
    and deferred), as deferred requests are in the system too;
    ``computed_prompt``: prompt tokens prefilled here (not cache hits).
    """
    for name in (PROMPT_TOKENS, GENERATION_TOKENS, PREEMPTIONS, WAITING, RUNNING):
        for value in select(rates, name, accept):
            sums[name] = sums.get(name, 0.0) + value
    for labels, value in select_labelled(rates, SUCCESS, accept):
        sums["finished"] = sums.get("finished", 0.0) + value
        if labels.get("finished_reason") not in FAILED_REASONS:
            sums["completions"] = sums.get("completions", 0.0) + value
    for value in select(rates, ADMISSION_REJECTIONS, accept):
        sums[ADMISSION_REJECTIONS] = sums.get(ADMISSION_REJECTIONS, 0.0) + value
    for labels, value in select_labelled(rates, PROMPT_BY_SOURCE, accept):
        if labels.get("source") == "local_compute":
            sums["computed_prompt"] = sums.get("computed_prompt", 0.0) + value
