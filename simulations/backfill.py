"""The demand history a live scaler would have backfilled before a simulated window.

``prescaler serve`` fits its forecaster on the last hours of Prometheus
history on its first poll, so a window that starts inside a trace (``simulate
--start``, ``tune``'s trials and held-back re-runs) hands the tracker the
history before it; a window at the trace's start has none, as a fresh
deployment has none. :func:`scraped_history` gives it as the emulated
Prometheus would have scraped it (lagging demand as live, nothing from inside
the window). Pure: the caller passes the requests in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from decision.tracker_data import DEFAULT_FIT_WINDOW_S
from simulations.scrape import PrometheusView, ScrapeSample

if TYPE_CHECKING:
    from simulations.traffic import Workload

__all__ = ["BACKFILL_S", "DemandHistory", "scraped_history"]

BACKFILL_S = DEFAULT_FIT_WINDOW_S + 3600.0
"""History offered to the tracker: the live scaler's fit window (three days,
two full daily cycles for the forecaster's seasonal terms) plus an hour,
more than its refit and stabilization margins; the tracker keeps what its
ring holds."""


@dataclass(frozen=True)
class DemandHistory:
    """Bin-end times on the simulation clock (the window starts at 0, so all are
    <= 0), with the request and token rates of the bin that ends there."""

    times_s: np.ndarray
    requests_per_s: np.ndarray
    tokens_per_s: np.ndarray

    def __post_init__(self) -> None:
        t = np.asarray(self.times_s, dtype=np.float64)
        r = np.asarray(self.requests_per_s, dtype=np.float64)
        k = np.asarray(self.tokens_per_s, dtype=np.float64)
        if not (t.ndim == r.ndim == k.ndim == 1 and t.size == r.size == k.size):
            raise ValueError("history arrays must be 1-D and of one length")
        if t.size and (np.any(np.diff(t) <= 0) or t[-1] > 0):
            raise ValueError("history times must increase and end at or before 0")
        if not (np.all(np.isfinite(r)) and np.all(np.isfinite(k))):
            raise ValueError("history rates must be finite")
        if np.any(r < 0) or np.any(k < 0):
            raise ValueError("history rates must be >= 0")
        object.__setattr__(self, "times_s", t)
        object.__setattr__(self, "requests_per_s", r)
        object.__setattr__(self, "tokens_per_s", k)

    def __len__(self) -> int:
        return int(self.times_s.size)


def scraped_history(
    prior: Workload,
    *,
    scrape_interval_s: float,
    rate_window_s: float,
    bin_s: float,
) -> DemandHistory | None:
    """What the emulated Prometheus scraped over ``prior`` (the requests before
    the window, ending where it starts), read as the live trigger reads it at
    each ``bin_s`` bin end; ``None`` when ``prior`` holds no time.

    The hours before are taken as served by a fleet that kept up: each request
    finishes at its arrival (vLLM's lag is seconds against a rate window of
    minutes), nothing waits, and a bin end with under two scrapes in its rate
    window is left out."""
    view = PrometheusView(scrape_interval_s, rate_window_s)
    if not (math.isfinite(bin_s) and bin_s > 0):
        raise ValueError(f"bin_s must be a finite number > 0, got {bin_s!r}")
    span = float(prior.duration_s)
    arrivals = prior.arrival_s - span  # all < 0
    prompt = np.concatenate([[0.0], np.cumsum(prior.prompt_tokens, dtype=np.float64)])
    output = np.concatenate([[0.0], np.cumsum(prior.output_tokens, dtype=np.float64)])
    scrapes = -scrape_interval_s * np.arange(int(span // scrape_interval_s), -1, -1)
    bins = int(span // bin_s)
    if bins == 0:
        return None
    ends = -bin_s * np.arange(bins - 1, -1, -1, dtype=np.float64)
    # a scrape at t counts the requests that arrived before t
    counted = np.searchsorted(arrivals, scrapes, side="left")
    times: list[float] = []
    requests: list[float] = []
    tokens: list[float] = []
    k = 0
    for end in ends.tolist():
        while k < scrapes.size and scrapes[k] <= end + 1e-9:
            n = int(counted[k])
            view.record(
                ScrapeSample(
                    time_s=float(scrapes[k]),
                    targets=1,
                    sums=(0.0, 0.0, 0.0),
                    maxes=(0.0, 0.0, 0.0),
                    counters=(float(n), float(prompt[n]), float(output[n]), 0.0),
                )
            )
            k += 1
        reading = view.reading()
        if reading is None or reading.arrival_rate_rps is None:
            continue
        times.append(end)
        requests.append(reading.arrival_rate_rps)
        tokens.append(
            (reading.prompt_tokens_per_s or 0.0) + (reading.generation_tokens_per_s or 0.0)
        )
    if not times:
        return None
    return DemandHistory(np.asarray(times), np.asarray(requests), np.asarray(tokens))
