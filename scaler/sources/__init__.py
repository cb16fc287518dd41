"""The only part of prescaler that talks to the outside world.

``prometheus`` reads one query per signal per refresh for all ScaledObjects
that share a Prometheus (``promql`` builds them, ``grouping`` splits the
answers); ``scrape`` reads vLLM ``/metrics`` directly (``metricsUrls``);
``kube`` discovers Running pods (``podSelector``) and their measured start-up
times. Every source answers ``Reading``s for ``Selection``s, one read per
backend per refresh. A Prometheus selection is confined to the
ScaledObject's own namespace (``namespace="<its namespace>"`` is added unless
``selector`` names it; reaching further needs ``--allow-cross-namespace``:
:func:`foreign_namespace_key`); direct scrapes carry no such label.
"""

from __future__ import annotations

from collections.abc import Callable

from decision.settings import LabelMatcher, ScalerSettings
from scaler.sources.model import (
    History,
    MetricSource,
    Selection,
    SourceError,
    SourceSpec,
)
from scaler.sources.promql import DEFAULT_RATE_WINDOW_S, format_window

__all__ = [
    "DEFAULT_RATE_WINDOW_S",
    "History",
    "MetricSource",
    "Selection",
    "SourceError",
    "SourceFactory",
    "SourceSpec",
    "default_source_factory",
    "foreign_namespace_key",
    "selection_for",
]

SourceFactory = Callable[[SourceSpec], MetricSource]


def selection_for(settings: ScalerSettings, namespace: str) -> tuple[SourceSpec, Selection]:
    """Which source serves ``settings`` and which series are its own.

    ``namespace`` is the ScaledObject's: the default for ``podSelector``, and
    the ``namespace`` matcher of a Prometheus selection unless ``selector``
    names ``namespace`` itself (see the module docstring).
    """
    matchers = list(settings.selector)
    if settings.model is not None:
        matchers.append(LabelMatcher("model_name", "=", settings.model))
    if settings.prometheus_address is not None:
        spec = SourceSpec("prometheus", settings.prometheus_address.rstrip("/"))
        if namespace and not any(m.name == "namespace" for m in settings.selector):
            matchers.insert(0, LabelMatcher("namespace", "=", namespace))
        gateway = settings.gateway_rate_query or ""
        return spec, Selection(matchers=tuple(matchers), gateway_query=gateway)
    if settings.metrics_urls:
        return SourceSpec("scrape"), Selection(matchers=tuple(matchers), urls=settings.metrics_urls)
    if settings.pod_selector:
        return SourceSpec("kubernetes"), Selection(
            matchers=tuple(matchers),
            namespace=settings.namespace or namespace,
            pod_selector=settings.pod_selector,
        )
    raise ValueError("settings name no data source (prometheusAddress, metricsUrls, podSelector)")


def foreign_namespace_key(settings: ScalerSettings, namespace: str) -> str | None:
    """The metadata key that reaches outside ``namespace`` (the ScaledObject's), if any.

    A ScaledObject's metadata is written by whoever may create ScaledObjects
    in its namespace; without this check, that tenant could read (and scale
    on) every other tenant's series behind a shared Prometheus or cluster.
    Only ``namespace="<its own>"`` is allowed in ``selector``: a regex or a
    negation can match other namespaces. ``gatewayRateQuery`` is free PromQL
    whose answer comes back through ``prescaler_demand`` and the logs, and a
    gateway's series usually live in the ingress controller's namespace, so
    it always needs the operator's consent.
    """
    if settings.gateway_rate_query is not None:
        return "gatewayRateQuery"
    if settings.pod_selector and settings.namespace not in (None, namespace):
        return "namespace"
    if settings.prometheus_address is not None:
        for m in settings.selector:
            if m.name == "namespace" and not (m.op == "=" and m.value == namespace):
                return "selector"
    return None


def default_source_factory(
    *, timeout_s: float = 3.0, rate_window_s: float = DEFAULT_RATE_WINDOW_S
) -> SourceFactory:
    """Real backends: Prometheus via prometheus-api-client, aiohttp scrapes, the
    ``kubernetes`` client (configured in-cluster or from kubeconfig).

    ``rate_window_s`` is the PromQL ``rate()`` window (``prescaler serve
    --rate-window-seconds``); at least ~4 scrape intervals of the vLLM targets.
    """
    format_window(rate_window_s)  # a bad window fails here, not at the first query

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
