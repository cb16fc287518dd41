"""Thin I/O: read a fleet's vLLM history from Prometheus for ``prescaler tune``.

Two HTTP calls per signal against Prometheus's documented HTTP API
(``/api/v1/query_range`` for the arrival rate, ``/api/v1/query`` for the
token histograms' bucket increases over the window), with the standard
library only. The PromQL and the conversion live in pure code:
:mod:`forecasting.prometheus_series` (the arrival rate, both metric
generations' counter spellings) and :mod:`simulations.fleet_trace`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from forecasting.prometheus_series import build_query, series_from_range_result
from simulations.fleet_trace import (
    GENERATION_HISTOGRAM,
    PROMPT_HISTOGRAM,
    FleetTrace,
    bucket_counts,
    build_fleet_trace,
    histogram_query,
)

__all__ = [
    "MAX_POINTS",
    "PrometheusError",
    "fetch_fleet_trace",
    "parse_since",
    "prometheus_api",
    "write_fleet_trace",
]

MAX_POINTS = 11_000
"""Prometheus refuses a range query of more than 11,000 points per series."""

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_since(text: str) -> float:
    """``7d``, ``36h``, ``90m``, ``3600s`` or plain seconds -> seconds (> 0)."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) * _UNITS[raw[-1]] if raw and raw[-1] in _UNITS else float(raw)
    except ValueError:
        raise ValueError(f"--since: expected e.g. 7d, 36h or 90m, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"--since must be > 0, got {text!r}")
    return value


class PrometheusError(ValueError):
    """Prometheus could not be reached or refused the query; the message says which."""


def prometheus_api(base: str, path: str, params: Mapping[str, str], timeout_s: float) -> Any:
    """The ``data`` of a GET on Prometheus' HTTP API ``/api/v1/<path>``."""
    url = f"{base.rstrip('/')}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            text = resp.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise PrometheusError(f"prometheus {base}: HTTP {exc.code} for {path}: {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise PrometheusError(f"prometheus {base}: cannot reach it ({exc})") from None
    try:
        body = json.loads(text)
    except json.JSONDecodeError:
        raise PrometheusError(f"prometheus {base}: not Prometheus' API (not JSON)") from None
    if body.get("status") != "success":
        raise PrometheusError(f"prometheus {base}: {body.get('error', body)}")
    return body["data"]


def _result(base: str, path: str, params: Mapping[str, str], timeout_s: float) -> Any:
    return prometheus_api(base, path, params, timeout_s)["result"]


def fetch_fleet_trace(
    url: str,
    labels: dict[str, str],
    *,
    since_s: float,
    end_s: float,
    step_s: float = 60.0,
    seed: int = 0,
    timeout_s: float = 30.0,
) -> FleetTrace:
    """The fleet's traffic over ``[end_s - since_s, end_s]`` as a :class:`FleetTrace`."""
    if since_s / step_s > MAX_POINTS:
        step_s = math.ceil(since_s / MAX_POINTS)
    start_s = end_s - since_s
    window_s = max(int(2 * step_s), 60)
    query = build_query("requests_per_s", labels, rate_window_s=window_s)
    result = _result(
        url,
        "query_range",
        {"query": query, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}", "step": f"{step_s:g}s"},
        timeout_s,
    )
    if not result:
        # no rate anywhere: no such series, or too few samples of them to
        # read a rate from (a fleet scraped for a moment); say which
        count = build_query("requests_per_s", labels, rate_window_s=int(since_s)).replace(
            "sum(rate(", "sum(count_over_time("
        )
        found = _result(url, "query", {"query": count, "time": f"{end_s:.3f}"}, timeout_s)
        samples = sum(float(item["value"][1]) for item in found)
        if samples > 0:
            raise ValueError(
                f"prometheus {url}: vLLM's request counters matching {labels or 'any'} hold "
                f"{samples:.0f} sample(s) in the last {since_s:g} s, too few to read a rate "
                f"from (two within {window_s} s): the history is too short; let the fleet "
                "serve a few minutes more"
            )
        raise ValueError(
            f"prometheus {url}: no vllm:request_success_total series match {labels or 'any'} "
            f"in the last {since_s:g} s"
        )
    series = series_from_range_result(result, step_s, signal="requests_per_s", source=url)
    rate = np.asarray(series.values, dtype=np.float64)
    hists = []
    for metric in (PROMPT_HISTOGRAM, GENERATION_HISTOGRAM):
        res = _result(
            url,
            "query",
            {"query": histogram_query(metric, labels, int(since_s)), "time": f"{end_s:.3f}"},
            timeout_s,
        )
        if not res:
            raise ValueError(f"prometheus {url}: no {metric}_bucket series match {labels or 'any'}")
        hists.append(bucket_counts(res))
    trace = build_fleet_trace(rate, float(series.step_s), hists[0], hists[1], seed=seed)
    return dataclasses.replace(trace, start_s=float(series.start_s))


def write_fleet_trace(trace: FleetTrace, directory: Path, stem: str) -> tuple[Path, Path]:
    """Write the count curve and the token file; (counts path, tokens path)."""
    directory.mkdir(parents=True, exist_ok=True)
    counts = directory / f"{stem}_per_minute.csv"
    tokens = directory / f"{stem}_tokens.csv"
    counts.write_text(trace.counts_csv)
    tokens.write_text(trace.tokens_csv)
    return counts, tokens
