"""Read vLLM signals for many ScaledObjects from one Prometheus.

Each query runs in a thread executor under a timeout (requests is
synchronous), so the event loop never blocks; a refresh sends
``len(promql.SIGNALS)`` queries whatever the number of ScaledObjects. Queries
are evaluated at an explicit ``time`` so two scaler replicas, or a restarted
one backfilling with ``query_range`` on the same step, see the same numbers.
``gatewayRateQuery`` texts are read beside them in batches
(``scaler.sources.gateway_batch``); a text that fails, is empty or answers
NaN leaves ``gateway_rate_rps`` unknown, never zero demand, and never fails
the refresh. Range reads (backfill, catch-up) read the same batches on the
same grid, each time read like an instant answer, so a backfilled tracker
is fed the demand a live one was.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import logging
import math
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np
import requests
from prometheus_api_client.exceptions import PrometheusApiClientException
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from decision.reading import Reading
from scaler.sources.gateway_batch import (
    GatewayBatches,
    GatewayGroup,
    is_scalar_answer,
    read_gateways,
)
from scaler.sources.grouping import HISTORY_SIGNALS, split_history, split_instant, split_range
from scaler.sources.model import History, Selection, SourceError, SourceSpec
from scaler.sources.promql import DEFAULT_RATE_WINDOW_S, build_plan

log = logging.getLogger(__name__)

QUERY_THREADS = 3
MAX_RANGE_POINTS = 10_000
"""Points per series in one query_range page: under Prometheus's limit of
11,000 (its API refuses more, "exceeded maximum resolution")."""


def range_pages(
    start_s: float, end_s: float, step_s: float, max_points: int
) -> list[tuple[float, float, float]]:
    """``(start, end, step)`` of each query_range page covering the grid
    ``start_s, start_s + step_s, .. <= end_s`` with at most ``max_points``
    points each, oldest first (one page when it fits)."""
    if max_points < 1:
        raise ValueError(f"max_points must be >= 1, got {max_points}")
    points = int(round((end_s - start_s) / step_s, 9)) + 1
    pages = []
    for first in range(0, points, max_points):
        last = min(first + max_points, points) - 1
        pages.append((start_s + first * step_s, start_s + last * step_s, step_s))
    return pages


class PackedValues:
    """One series' ``[time, value]`` samples as a float64 array (8 bytes a
    number), iterated as the ``[t, v]`` pairs of an answer's ``values``.

    Why: a parsed page holds each sample as a list, a float and a string
    (well over 100 bytes); a long history read in pages kept every page that
    way until the last arrived. The values equal ``float`` of the strings, as
    every reader of an answer parses them.
    """

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def __iter__(self) -> Iterator[list[float]]:
        return iter(self.array.tolist())

    def __len__(self) -> int:
        return int(self.array.shape[0])


def pack_values(values: Iterable[Sequence[Any]], signal: str) -> PackedValues:
    """A series' ``values`` of one page packed (``PackedValues``); a sample
    that is not ``[time, number]`` is a ``SourceError`` naming the signal."""
    samples = values if isinstance(values, list) else list(values)
    try:
        if any(len(sample) != 2 for sample in samples):
            raise ValueError("a sample is not [time, value]")
        # Column by column: numpy parses the value strings itself, at half
        # the cost of a Python float and tuple per sample (a three-day page
        # of a batch is over a million samples).
        times = np.fromiter(
            (float(sample[0]) for sample in samples), dtype=float, count=len(samples)
        )
        texts = [sample[1] for sample in samples]
        if None in texts:  # numpy would read it as NaN, float() refuses it
            raise ValueError("a value is null")
        numbers = np.array(texts, dtype=float)
    except (TypeError, ValueError) as exc:
        raise SourceError(f"{signal}: malformed range samples ({exc})"[:300]) from exc
    return PackedValues(np.column_stack([times, numbers]).reshape(-1, 2))


def pack_page(answer: Sequence[Mapping[str, Any]], signal: str) -> list[dict[str, Any]]:
    """One page's answer for ``signal`` with each series' values packed."""
    packed = []
    for series in answer:
        if not isinstance(series, Mapping):
            raise SourceError(f"{signal}: malformed series {series!r}"[:300])
        packed.append(
            {
                "metric": series.get("metric", {}),
                "values": pack_values(series.get("values", ()), signal),
            }
        )
    return packed


def merge_pages(pages: Sequence[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One query_range answer from its pages' packed answers (``pack_page``):
    each series' values concatenated in page order (a series missing from a
    page has no samples there)."""
    metrics: dict[tuple[tuple[str, str], ...], Any] = {}
    parts: dict[tuple[tuple[str, str], ...], list[np.ndarray]] = {}
    for page in pages:
        for series in page:
            key = tuple(sorted(series.get("metric", {}).items()))
            metrics.setdefault(key, series.get("metric", {}))
            parts.setdefault(key, []).append(series["values"].array)
    return [
        {"metric": metrics[key], "values": PackedValues(np.concatenate(arrays))}
        for key, arrays in parts.items()
    ]


class PrometheusSource:
    """All selections served by the Prometheus at ``address``."""

    def __init__(
        self,
        address: str,
        *,
        timeout_s: float = 3.0,
        rate_window_s: float = DEFAULT_RATE_WINDOW_S,
        executor: concurrent.futures.Executor | None = None,
        max_range_points: int = MAX_RANGE_POINTS,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.spec = SourceSpec("prometheus", address)
        self.address = address.rstrip("/")
        self.timeout_s = timeout_s
        self.rate_window_s = rate_window_s
        self.max_range_points = max_range_points
        self._own_executor = executor is None
        # Few threads on purpose: each query's HTTP and JSON work is Python
        # holding the GIL, and every thread that wants the GIL at once is one
        # more switch interval an RPC waits (12 at once gave 10-40 ms spikes
        # in KEDA's latency every refresh). Three finish a refresh's 17
        # queries in six rounds, well inside ``timeout_s`` for a healthy
        # Prometheus.
        self._executor = executor or concurrent.futures.ThreadPoolExecutor(
            max_workers=QUERY_THREADS, thread_name_prefix="prometheus"
        )
        # No retries: a failed refresh is retried by the next one, and a
        # backoff would blow the timeout. Certificates are not checked, as
        # prometheus-api-client's ``disable_ssl`` did before.
        self._session = requests.Session()
        self._session.verify = False
        self._session.mount(self.address, HTTPAdapter(max_retries=Retry(total=0)))
        self._lock = threading.Lock()
        self._failing_gateways: set[str] = set()
        self._gateways = GatewayBatches()
        self.queries_sent = 0
        """How many HTTP queries this source has sent (the bench checks it)."""

    def _post(self, path: str, form: Mapping[str, str]) -> Any:
        """The ``result`` of one API query (``query`` or ``query_range``)
        sent with its parameters in a POST body.

        Why not prometheus-api-client: it puts them in the URL even by POST,
        and a batch of gateway texts (``gateway_batch``) is longer than the
        8 KB a URL may be in common proxies. Errors read as that client's
        did: ``PrometheusApiClientException("HTTP Status Code <n> (...)")``."""
        url = f"{self.address}/api/v1/{path}"
        response = self._session.post(url, data=form, timeout=self.timeout_s)
        if response.status_code != 200:
            raise PrometheusApiClientException(
                f"HTTP Status Code {response.status_code} ({response.content!r})"
            )
        return response.json()["data"]["result"]

    def _count(self, n: int) -> None:
        with self._lock:
            self.queries_sent += n

    async def _run_all(self, calls: dict[str, Any]) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        self._count(len(calls))
        futures = {name: loop.run_in_executor(self._executor, call) for name, call in calls.items()}
        try:
            async with asyncio.timeout(self.timeout_s):
                results = await asyncio.gather(*futures.values())
        except TimeoutError as exc:
            raise SourceError(f"Prometheus {self.address} slower than {self.timeout_s}s") from exc
        except SourceError:
            raise
        except Exception as exc:  # requests, JSON, HTTP status: all mean "down"
            raise SourceError(f"Prometheus {self.address}: {exc!r}"[:500]) from exc
        finally:
            for future in futures.values():
                if not future.done():
                    future.cancel()
        for name, result in zip(futures, results, strict=True):
            if not isinstance(result, list):
                raise SourceError(f"Prometheus {self.address}: {name} answered {result!r}"[:300])
        return dict(zip(futures, results, strict=True))

    async def read(self, selections: Sequence[Selection], at_s: float) -> dict[Selection, Reading]:
        if not selections:
            return {}
        plan = build_plan(selections, self.rate_window_s)
        params = {"time": f"{at_s:.3f}"}
        calls = {
            signal: functools.partial(self._post, "query", {"query": query, **params})
            for signal, query in plan.queries.items()
        }
        queries = sorted({s.gateway_query for s in selections if s.gateway_query})
        # The gateway queries run beside the vLLM ones, not after them, so a
        # refresh waits one timeout at most, not two.
        gateway = asyncio.ensure_future(self._gateway_rates(queries, params)) if queries else None
        try:
            answers = await self._run_all(calls)
        except BaseException:
            if gateway is not None:
                gateway.cancel()
                await asyncio.gather(gateway, return_exceptions=True)
            raise
        readings = split_instant(plan, answers, selections, at_s)
        if gateway is None:
            return readings
        rates, timed_out = await gateway
        # The vLLM queries answered, so a gateway batch that did not was slow
        # itself: it is split from the next refresh on.
        self._gateways.timed_out(timed_out)
        return {
            selection: dataclasses.replace(
                reading, gateway_rate_rps=rates.get(selection.gateway_query)
            )
            if selection.gateway_query
            else reading
            for selection, reading in readings.items()
        }

    async def _gateway_rates(
        self, queries: Sequence[str], params: dict[str, str]
    ) -> tuple[dict[str, float | None], list[GatewayGroup]]:
        """Each gateway query's requests per second (None where it failed or
        missed the timeout: those that answered in time keep their answers),
        and the batches that missed the timeout."""
        loop = asyncio.get_running_loop()

        def fetch(text: str) -> asyncio.Future[Any]:
            self._count(1)
            call = functools.partial(self._post, "query", {"query": text, **params})
            return loop.run_in_executor(self._executor, call)

        got = await read_gateways(
            self._gateways, queries, fetch, deadline=loop.time() + self.timeout_s, live=True
        )
        rates: dict[str, float | None] = {}
        for query in queries:
            rate, problem = gateway_rate(got.answers[query])
            rates[query] = rate
            if problem is None:
                self._failing_gateways.discard(query)
            elif query not in self._failing_gateways:
                self._failing_gateways.add(query)
                log.warning(
                    "gatewayRateQuery %r on %s: %s; the gateway's rate is unknown "
                    "(the vLLM signals decide) until it answers",
                    query,
                    self.address,
                    problem,
                )
        return rates, got.timed_out

    async def read_range(
        self, selections: Sequence[Selection], start_s: float, end_s: float, step_s: float
    ) -> dict[Selection, list[Reading]]:
        if not selections or end_s < start_s:
            return {}
        plan = build_plan(selections, self.rate_window_s, narrow=True)
        answers = await self._range(plan.queries, start_s, end_s, step_s)
        readings = split_range(plan, answers, selections)
        rates = await self._gateway_ranges(selections, start_s, end_s, step_s)
        if not rates:
            return readings
        return {
            selection: [
                dataclasses.replace(
                    r, gateway_rate_rps=rates[selection.gateway_query].get(r.time_s)
                )
                for r in series
            ]
            if selection.gateway_query
            else series
            for selection, series in readings.items()
        }

    async def read_history(
        self, selections: Sequence[Selection], start_s: float, end_s: float, step_s: float
    ) -> dict[Selection, History]:
        if not selections or end_s < start_s:
            return {}
        plan = build_plan(selections, self.rate_window_s, narrow=True)
        queries = {signal: plan.queries[signal] for signal in HISTORY_SIGNALS}
        answers = await self._range(queries, start_s, end_s, step_s)
        histories = split_history(plan, answers, selections)
        rates = await self._gateway_ranges(selections, start_s, end_s, step_s)
        if not rates:
            return histories
        return {
            selection: with_gateway_demand(history, rates[selection.gateway_query])
            if selection.gateway_query
            else history
            for selection, history in histories.items()
        }

    async def _gateway_ranges(
        self, selections: Sequence[Selection], start_s: float, end_s: float, step_s: float
    ) -> dict[str, dict[float, float]]:
        """Each distinct gateway query's known rates by evaluation time over
        the range, in the live refresh's batches, paged like the vLLM
        signals, one batch at a time. A batch that times out is split at
        once, down to single texts. A text that fails (refused, or timed out
        alone) is unknown over the whole range (logged with its text), never
        zero: vLLM's arrivals stand in, as in a live refresh."""
        queries = sorted({s.gateway_query for s in selections if s.gateway_query})
        if not queries:
            return {}
        one_at_a_time = asyncio.Lock()  # as the vLLM signals' pages: bounded memory

        async def fetch(text: str) -> Any:
            async with one_at_a_time:
                name = "gatewayRateQuery"
                return (await self._range({name: text}, start_s, end_s, step_s))[name]

        # A timed-out batch is split down to single texts inside the read;
        # its timeouts are not fed to ``self._gateways.timed_out``, which
        # sizes the live refreshes' batches by their instant queries.
        got = await read_gateways(self._gateways, queries, fetch, deadline=None, live=False)
        rates: dict[str, dict[float, float]] = {}
        for query in queries:
            answer = got.answers[query]
            if isinstance(answer, BaseException):
                log.warning(
                    "gatewayRateQuery %r on %s from %.0f to %.0f: %s; the gateway's rate "
                    "is unknown there (vLLM's arrivals stand in)",
                    query,
                    self.address,
                    start_s,
                    end_s,
                    answer,
                )
                answer = []
            rates[query] = gateway_rates_by_time(cast("Sequence[Mapping[str, Any]]", answer))
        return rates

    async def _range(
        self, queries: dict[str, str], start_s: float, end_s: float, step_s: float
    ) -> dict[str, Any]:
        if step_s <= 0:
            raise ValueError(f"step_s must be > 0, got {step_s}")
        # Prometheus refuses a range of more than 11,000 points per series
        # (a three-day fit window at 15 s is 17,280), so a long range is read
        # in pages of ``max_range_points`` on the same grid, oldest first.
        pages = range_pages(start_s, end_s, step_s, self.max_range_points)
        # Each answer is packed by the thread that read it, so what stays is
        # 8 bytes a number, and at most one parsed answer per query thread
        # exists at a time, not every signal's of the page.
        answers = []
        for page in pages:
            answers.append(await self._run_all(self._range_calls(queries, *page)))
        return {signal: merge_pages([a[signal] for a in answers]) for signal in queries}

    def _range_calls(
        self, queries: dict[str, str], start_s: float, end_s: float, step_s: float
    ) -> dict[str, Any]:
        # start/end/step as exact decimal strings: the grid must equal the
        # live one.
        params = {"start": f"{start_s:.3f}", "end": f"{end_s:.3f}", "step": f"{step_s:g}"}
        return {
            signal: functools.partial(self._packed_range, signal, {"query": query, **params})
            for signal, query in queries.items()
        }

    def _packed_range(self, signal: str, form: Mapping[str, str]) -> list[dict[str, Any]]:
        """One query_range page's answer, packed (``pack_page``)."""
        return pack_page(self._post("query_range", form), signal)

    async def close(self) -> None:
        self._session.close()
        if self._own_executor:
            self._executor.shutdown(wait=False, cancel_futures=True)


def gateway_rate(answer: object) -> tuple[float | None, str | None]:
    """(requests per second, None) from one instant query's answer (a
    vector's sum, or a scalar's ``[time, value]``), or (None, what is
    wrong): an error, an empty vector (no gateway series is not "no
    requests"), NaN, Inf or a negative sum are all unknown."""
    if isinstance(answer, BaseException):
        return None, f"the query failed ({answer!r})"[:300]
    if not isinstance(answer, list) or not answer:
        return None, "the answer is empty"
    if is_scalar_answer(answer):
        answer = [{"value": answer}]  # a scalar: one sample
    total = 0.0
    for item in answer:
        try:
            total += float(item["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            return None, f"cannot read a value from {item!r}"[:300]
    if not math.isfinite(total) or total < 0:
        return None, f"the rate is {total!r}"
    return total, None


def gateway_rates_by_time(answer: Sequence[Mapping[str, Any]]) -> dict[float, float]:
    """The known rates of one gateway query_range answer by evaluation time.

    At each time the instant vector is the series with a sample there, read
    by ``gateway_rate`` as a live refresh reads its instant answer: a time
    with no series, a NaN or a negative sum is unknown and left out.
    """
    vectors: dict[float, list[dict[str, Any]]] = {}
    try:
        for series in answer:
            for pair in series.get("values", ()):
                vectors.setdefault(round(float(pair[0]), 3), []).append({"value": pair})
    except (AttributeError, IndexError, TypeError, ValueError) as exc:
        log.warning("a gatewayRateQuery range answer is malformed (%r): its rate is unknown", exc)
        return {}
    rates: dict[float, float] = {}
    for t, vector in vectors.items():
        rate, _problem = gateway_rate(vector)
        if rate is not None:
            rates[t] = rate
    return rates


def with_gateway_demand(history: History, rates: Mapping[float, float]) -> History:
    """``history`` with the demand a live refresh feeds the tracker for an
    object with ``gatewayRateQuery``: the gateway's rate where it is known
    and vLLM gave a reading (its queue is known); a gap where the fleet was
    at zero and the gateway's rate is unknown (an empty fleet's zero says
    nothing of the gateway, as ``decision.tracker`` bins it live); else
    vLLM's arrivals (NaN stays a gap, never zero)."""
    gateway = np.array([rates.get(t, math.nan) for t in history.times.tolist()], dtype=float)
    fed = np.isfinite(gateway) & np.isfinite(history.waiting)
    unknown_at_zero = ~np.isfinite(gateway) & (history.ready == 0)
    demand = np.where(fed, gateway, history.requests_per_s)
    return dataclasses.replace(history, requests_per_s=np.where(unknown_at_zero, math.nan, demand))
