"""The emulated Prometheus: what an autoscaler can know about the fleet, and when.

A policy in production never reads a replica: it reads the last scrape of
each vLLM ``/metrics``. So queries here see scraped counter totals (a
vanished pod's counts stay, as they do until Prometheus marks it stale),
rates are PromQL's ``rate(x[W])`` without the edge extrapolation, arrivals
are read as ``scaler.sources`` reads them, and ``gateway_requests_total``
exists at zero replicas. While Prometheus is down (:meth:`PrometheusView.set_up`)
queries raise :class:`PrometheusDown` and :meth:`PrometheusView.reading` is None.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from decision.reading import Reading

__all__ = [
    "COUNTERS",
    "GATEWAY_COUNTER",
    "GAUGES",
    "PrometheusDown",
    "PrometheusView",
    "ScrapeSample",
]

GAUGES: tuple[str, ...] = (
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
)
"""Gauges the view aggregates (``vllm:gpu_cache_usage_perc`` is an alias of the last)."""

COUNTERS: tuple[str, ...] = (
    "vllm:request_success_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:num_preemptions_total",
)
"""Counters whose fleet totals each sample carries."""

GATEWAY_COUNTER = "gateway_requests_total"
"""Requests that reached the gateway in front of vLLM (a simulator series, one
series for the whole fleet, present at zero replicas)."""

_ALIASES = {"vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc"}


class PrometheusDown(RuntimeError):
    """A query while the emulated Prometheus is down."""


@dataclass(frozen=True, slots=True)
class ScrapeSample:
    """One scrape of every Ready replica at ``time_s``.

    ``targets`` is how many replicas answered; ``sums``/``maxes`` follow
    :data:`GAUGES`; ``counters`` follow :data:`COUNTERS` (fleet totals,
    monotone); ``gateway_requests`` the :data:`GATEWAY_COUNTER` total;
    ``ttft_cumulative`` the fleet's TTFT histogram as cumulative counts at
    ``engine.metrics.TTFT_BUCKETS_V1`` then ``+Inf`` (empty: not supplied).
    """

    time_s: float
    targets: int
    sums: tuple[float, float, float]
    maxes: tuple[float, float, float]
    counters: tuple[float, float, float, float]
    gateway_requests: float = 0.0
    ttft_cumulative: tuple[float, ...] = ()


class PrometheusView:
    """Samples kept for one rate window, and the queries policies run on them."""

    def __init__(self, scrape_interval_s: float = 15.0, rate_window_s: float = 120.0) -> None:
        if not (math.isfinite(scrape_interval_s) and scrape_interval_s > 0):
            raise ValueError(f"scrape_interval_s must be finite and > 0, got {scrape_interval_s}")
        if not (math.isfinite(rate_window_s) and rate_window_s >= 2 * scrape_interval_s):
            raise ValueError(
                f"rate_window_s must be finite and >= 2 scrape intervals "
                f"({2 * scrape_interval_s:g} s), got {rate_window_s}"
            )
        self.scrape_interval_s = float(scrape_interval_s)
        self.rate_window_s = float(rate_window_s)
        self._retain_s = self.rate_window_s
        self._samples: deque[ScrapeSample] = deque()
        self._up = True

    @property
    def up(self) -> bool:
        """Whether Prometheus is running (scraping and answering queries)."""
        return self._up

    def set_up(self, up: bool) -> None:
        """Prometheus goes down (False) or comes back (True); see the module docstring."""
        self._up = bool(up)

    def _check_up(self) -> None:
        if not self._up:
            raise PrometheusDown("Prometheus is down: the query failed")

    def retain(self, window_s: float) -> None:
        """Keep samples for ``window_s`` too (a query's own rate window);
        the view's own rates still use ``rate_window_s``."""
        if not (math.isfinite(window_s) and window_s > 0):
            raise ValueError(f"window_s must be finite and > 0, got {window_s!r}")
        self._retain_s = max(self._retain_s, float(window_s))

    @property
    def latest(self) -> ScrapeSample | None:
        return self._samples[-1] if self._samples else None

    def record(self, sample: ScrapeSample) -> None:
        """Add a scrape (none while Prometheus is down); drop samples older
        than one window before it."""
        if not self._up:
            return
        samples = self._samples
        if samples and sample.time_s < samples[-1].time_s:
            raise ValueError("scrapes must come in time order")
        samples.append(sample)
        horizon = sample.time_s - self._retain_s - 1e-9
        while len(samples) > 2 and samples[1].time_s <= horizon:
            samples.popleft()

    # ------------------------------------------------------------- queries
    def _window(self, window_s: float | None = None) -> tuple[ScrapeSample, ScrapeSample] | None:
        self._check_up()
        samples = self._samples
        if len(samples) < 2:
            return None
        last = samples[-1]
        start = last.time_s - (self.rate_window_s if window_s is None else window_s) - 1e-9
        first = next((s for s in samples if s.time_s >= start), last)
        if first is last:
            return None
        return first, last

    def rate(self, counter: str) -> float | None:
        """``sum(rate(counter[W]))``; None before two samples exist in the window."""
        k = COUNTERS.index(counter)
        window = self._window()
        if window is None:
            return None
        first, last = window
        return max(0.0, last.counters[k] - first.counters[k]) / (last.time_s - first.time_s)

    def counter_rate(self, counter: str, window_s: float) -> float | None:
        """``sum(rate(counter[window_s]))`` for a vLLM counter or the gateway's;
        None before two samples exist in the window (call :meth:`retain` first
        for a window longer than ``rate_window_s``)."""
        window = self._window(window_s)
        if window is None:
            return None
        first, last = window
        if counter == GATEWAY_COUNTER:
            increase = last.gateway_requests - first.gateway_requests
        else:
            k = COUNTERS.index(counter)
            increase = last.counters[k] - first.counters[k]
        return max(0.0, increase) / (last.time_s - first.time_s)

    def ttft_bucket_rates(self, window_s: float) -> tuple[float, ...] | None:
        """Per-second increase of each cumulative TTFT bucket over ``window_s``
        (``TTFT_BUCKETS_V1`` then ``+Inf``); None before two samples or when
        the simulation supplies no histogram."""
        window = self._window(window_s)
        if window is None:
            return None
        first, last = window
        if not last.ttft_cumulative or len(first.ttft_cumulative) != len(last.ttft_cumulative):
            return None
        span = last.time_s - first.time_s
        return tuple(
            max(0.0, b - a) / span
            for a, b in zip(first.ttft_cumulative, last.ttft_cumulative, strict=True)
        )

    def in_system_delta(self) -> float | None:
        """``delta(waiting[W]) + delta(running[W])`` summed over the fleet."""
        window = self._window()
        if window is None:
            return None
        first, last = window
        return (last.sums[0] + last.sums[1]) - (first.sums[0] + first.sums[1])

    def arrival_rate(self) -> float | None:
        """Arrivals as ``scaler.sources`` reads them: completions + delta / W."""
        completions = self.rate("vllm:request_success_total")
        delta = self.in_system_delta()
        if completions is None or delta is None:
            return None
        return max(0.0, completions + delta / self.rate_window_s)

    def gauge(self, metric: str, aggregation: str) -> float | None:
        """``sum``/``avg``/``max``/``count`` of a vLLM gauge at the last scrape
        (None: no targets, an empty vector)."""
        self._check_up()
        metric = _ALIASES.get(metric, metric)
        k = GAUGES.index(metric)
        last = self.latest
        if last is None or last.targets == 0:
            return None
        if aggregation == "sum":
            return last.sums[k]
        if aggregation == "avg":
            return last.sums[k] / last.targets
        if aggregation == "max":
            return last.maxes[k]
        if aggregation == "count":
            return float(last.targets)
        raise ValueError(f"unsupported aggregation {aggregation!r}")

    def query(self, aggregation: str, metric: str, rate_window_s: float | None = None) -> float:
        """A KEDA prometheus trigger's value: ``agg(metric)`` or ``sum(rate(metric[w]))``.

        An empty result reads as 0, like KEDA's prometheus scaler with its
        default ``ignoreNullValues: true``. The rate uses this view's window
        (the query's own window is accepted; samples are only kept for one).
        """
        if metric in COUNTERS or rate_window_s is not None:
            if metric not in COUNTERS:
                raise ValueError(f"rate() of {metric!r} is not modelled")
            if aggregation not in ("sum", "avg", "max"):
                raise ValueError(f"unsupported aggregation {aggregation!r}")
            value = self.rate(metric)
        else:
            value = self.gauge(metric, aggregation)
        return 0.0 if value is None else value

    def reading(self, lead_time_samples_s: tuple[float, ...] = ()) -> Reading | None:
        """What ``scaler.sources`` would hand the tracker now (None before the
        first scrape, and while Prometheus is down: the read failed)."""
        last = self.latest
        if last is None or not self._up:
            return None
        targets = last.targets
        return Reading(
            time_s=last.time_s,
            ready_replicas=targets,
            waiting=last.sums[0],
            running=last.sums[1],
            kv_usage=last.sums[2] / targets if targets else None,
            arrival_rate_rps=self.arrival_rate(),
            prompt_tokens_per_s=self.rate("vllm:prompt_tokens_total"),
            generation_tokens_per_s=self.rate("vllm:generation_tokens_total"),
            preemptions_per_s=self.rate("vllm:num_preemptions_total"),
            completion_rate_rps=self.rate("vllm:request_success_total"),
            lead_time_samples_s=lead_time_samples_s,
        )
