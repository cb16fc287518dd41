"""The only part of prescaler that talks to the outside world.

- ``prometheus``: one query per signal per refresh for all ScaledObjects that
  share a Prometheus (``promql`` builds them, ``grouping`` splits the answers).
- ``scrape``: direct scrape of vLLM ``/metrics`` (``metricsUrls``).
- ``kube``: Kubernetes discovery of Ready pods (``podSelector``), scraped
  directly, plus measured pod start-up durations for ``leadTimeSeconds: auto``.

Every source answers ``Reading``s (``model``) for ``Selection``s; the state
groups ScaledObjects by ``SourceSpec`` so each backend is read once per refresh.
"""

from __future__ import annotations

from collections.abc import Callable

from scaler.settings import LabelMatcher, ScalerSettings
from scaler.sources.model import (
    History,
    MetricSource,
    Reading,
    Selection,
    SourceError,
    SourceSpec,
)

__all__ = [
    "History",
    "MetricSource",
    "Reading",
    "Selection",
    "SourceError",
    "SourceFactory",
    "SourceSpec",
    "default_source_factory",
    "selection_for",
]

SourceFactory = Callable[[SourceSpec], MetricSource]


def selection_for(settings: ScalerSettings, namespace: str) -> tuple[SourceSpec, Selection]:
    """Which source serves ``settings`` and which series are its own.

    ``namespace`` is the ScaledObject's, the default for ``podSelector``.
    """
    matchers = list(settings.selector)
    if settings.model is not None:
        matchers.append(LabelMatcher("model_name", "=", settings.model))
    if settings.prometheus_address is not None:
        spec = SourceSpec("prometheus", settings.prometheus_address.rstrip("/"))
        return spec, Selection(matchers=tuple(matchers))
    if settings.metrics_urls:
        return SourceSpec("scrape"), Selection(matchers=tuple(matchers), urls=settings.metrics_urls)
    if settings.pod_selector:
        return SourceSpec("kubernetes"), Selection(
            matchers=tuple(matchers),
            namespace=settings.namespace or namespace,
            pod_selector=settings.pod_selector,
        )
    raise ValueError("settings name no data source (prometheusAddress, metricsUrls, podSelector)")


def default_source_factory(*, timeout_s: float = 3.0, rate_window_s: float = 60.0) -> SourceFactory:
    """Real backends: Prometheus via prometheus-api-client, aiohttp scrapes, the
    ``kubernetes`` client (configured in-cluster or from kubeconfig)."""

    def factory(spec: SourceSpec) -> MetricSource:
        if spec.kind == "prometheus":
            from scaler.sources.prometheus import PrometheusSource

            return PrometheusSource(spec.address, timeout_s=timeout_s, rate_window_s=rate_window_s)
        if spec.kind == "scrape":
            from scaler.sources.scrape import ScrapeSource

            return ScrapeSource(timeout_s=min(timeout_s, 2.0), spec=spec)
        from scaler.sources.kube import KubernetesSource

        return KubernetesSource(spec=spec)

    return factory
