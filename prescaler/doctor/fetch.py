"""``prescaler doctor``'s I/O: Prometheus' HTTP API and the scaler's ``/metrics``.

Never the scaler's gRPC: it registers the object on every call, so a file
that differs from what KEDA sends would retune or replace the live tracker.

Thin and synchronous (a command run by hand): every call has a timeout, and
a failure becomes :class:`FetchError` with one line naming what failed, which
the checks turn into a finding rather than a traceback.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from simulations.fleet_prometheus import PrometheusError, prometheus_api

__all__ = [
    "FetchError",
    "PromClient",
    "Sample",
    "parse_exposition",
    "read_url",
]


class FetchError(RuntimeError):
    """Something the doctor reads could not be read; the message says what and why."""


@dataclass(frozen=True)
class Sample:
    labels: Mapping[str, str]
    value: float


def read_url(url: str, timeout_s: float) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return str(resp.read().decode("utf-8", errors="replace"))
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", errors="replace")[:300]
        raise FetchError(f"{url}: HTTP {exc.code}: {detail}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise FetchError(f"{url}: {reason}") from exc


class PromClient:
    """Prometheus' HTTP API (instant and range queries, targets)."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _get(self, path: str, **params: str) -> Any:
        try:
            return prometheus_api(self.url, path, params, self.timeout_s)
        except PrometheusError as exc:
            raise FetchError(str(exc)) from exc

    def query(self, expr: str, at_s: float | None = None) -> list[Sample]:
        """An instant query's vector (a scalar answer is one sample without labels)."""
        params = {"query": expr}
        if at_s is not None:
            params["time"] = f"{at_s:.3f}"
        data = self._get("query", **params)
        if data.get("resultType") == "scalar":
            return [Sample({}, float(data["result"][1]))]
        return [Sample(r["metric"], float(r["value"][1])) for r in data.get("result", [])]

    def query_range(
        self, expr: str, start_s: float, end_s: float, step_s: float
    ) -> list[tuple[Mapping[str, str], list[tuple[float, float]]]]:
        data = self._get(
            "query_range",
            query=expr,
            start=f"{start_s:.3f}",
            end=f"{end_s:.3f}",
            step=f"{step_s:g}",
        )
        return [
            (r["metric"], [(float(t), float(v)) for t, v in r.get("values", [])])
            for r in data.get("result", [])
        ]

    def targets(self) -> list[Mapping[str, Any]]:
        return list(self._get("targets", state="active").get("activeTargets", []))


def parse_exposition(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(sample name, labels, value) of a Prometheus text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out.append((s.name, dict(s.labels), float(s.value)))
    except ValueError as exc:
        raise FetchError(f"not a Prometheus exposition: {exc}") from exc
    return out
