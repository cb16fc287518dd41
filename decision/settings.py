"""ScaledObject trigger metadata, parsed and validated once into typed settings.

Everything KEDA hands over as ``scalerMetadata`` is user input: it is
validated here, at the edge, with an error naming the key at fault, so
nothing downstream (PromQL, Kubernetes calls, the policy) sees an unchecked
value. Keys are camelCase as docs/contracts.md lists them; KEDA's own keys
are ignored, and ``<ourKey>FromEnv`` (KEDA substitutes the container's
environment value) is read as ``<ourKey>`` (an error if both are given).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from decision.methods import FORECAST_METHODS
from decision.selectors import LabelMatcher, parse_selector, re2_problem, validate_pod_selector

__all__ = [
    "FORECAST_METHODS",
    "KEDA_KEYS",
    "METADATA_KEYS",
    "LabelMatcher",
    "ScalerSettings",
    "SettingsError",
    "metadata_value",
    "parse_selector",
    "parse_settings",
    "re2_problem",
    "validate_pod_selector",
]


class SettingsError(ValueError):
    """Bad trigger metadata; ``key`` is the metadata key at fault."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.detail = message


# Label matchers and pod selectors live in decision.selectors (a parser of their
# own); re-exported here, where the rest of the scaler has always found them.


# --------------------------------------------------------------------------
# The settings
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ScalerSettings:
    """Typed trigger metadata. Field docs give units and why each default.

    Exactly one data source is set: ``prometheus_address``, ``metrics_urls``
    or ``pod_selector``.
    """

    prometheus_address: str | None = None
    """Base URL of Prometheus (``http://prometheus:9090``)."""
    metrics_urls: tuple[str, ...] = ()
    """vLLM ``/metrics`` URLs scraped directly (no Prometheus needed)."""
    pod_selector: str | None = None
    """Kubernetes label selector of the vLLM pods (discovery + scrape)."""
    namespace: str | None = None
    """Namespace of ``pod_selector``; None means the ScaledObject's own."""
    selector: tuple[LabelMatcher, ...] = ()
    """Extra PromQL label matchers narrowing the vLLM series."""
    model: str | None = None
    """vLLM ``model_name`` label to keep (None: all models at the source)."""
    profile: str | None = None
    """engine profile giving per-replica capacity (None: learned/explicit)."""
    capacity_tokens_per_second: float | None = None
    """Sustainable tokens/s (prompt + generation) of one replica."""
    target_waiting_per_replica: float = 3.0
    """Queue length per replica the fleet is sized for; 3 is today's seeds'
    ``sum(vllm:num_requests_waiting) > 3`` threshold."""
    target_kv_cache_usage: float = 0.8
    """KV-cache fraction per replica to stay under; above ~0.9 vLLM starts
    preempting, so 0.8 leaves room for one burst of long prompts."""
    lead_time_seconds: float | None = None
    """Node + pod start + model load time; None means ``auto`` (measured)."""
    forecast: str = "auto"
    """``auto`` (the default forecaster), ``off``, or a forecasting method."""
    forecast_quantile: float = 0.9
    """Upper quantile sized for: 0.9 covers most bursts without paying for
    the worst 10 % of forecast errors all day."""
    seasonal_peak_days: int = 3
    """Past days whose peak demand over the coming lead time (the same hours
    of the day) the forecast also sizes for, at ``forecast_quantile`` across
    the days; 0 turns it off. A forecaster's median blurs an event that comes
    at a slightly different minute each day (a 09:00 ramp, working
    sessions, a nightly batch) into a low bump; the days' own peaks size the
    event's whole fleet a lead time ahead. Three is the fit window's days."""
    seasonal_wander_seconds: float = 1800.0
    """How far a recurring event moves from day to day: the days' peak and
    request count are read over the lead-time window widened by this much
    on each side, so an event that came later yesterday than it comes today
    still wakes the fleet a lead time ahead. Half an hour covers a session
    people start at about the same time; 0 reads the window itself."""
    seasonal_size_wander_seconds: float = 0.0
    """When above ``seasonal_wander_seconds``: an event the days' hours say
    is due is sized for at least the days' peaks over the window widened by
    this much on each side, not only that hour's (``decision.seasonal``).
    Headroom for sessions whose size is drawn afresh each day; 0 is off."""
    min_replicas: int = 0
    max_replicas: int = 100
    """Bounds of the answer; defaults are KEDA's minReplicaCount/maxReplicaCount."""
    count_starting_replicas: bool = True
    """Replicas asked for and still starting count before the queue term asks
    for more (``decision.policy``); false gives KEDA's plain queue trigger,
    which asks again at every poll while a start-up's backlog grows."""
    scale_down_stabilization_seconds: float = 300.0
    """Window over which the highest recommendation wins on scale-in,
    matching the HPA's default scale-down stabilization (300 s)."""
    stale_after_seconds: float = 60.0
    """Data older than this is stale: hold, never scale in (two KEDA polls)."""
    fallback_after_seconds: float = 300.0
    """After this long without fresh data answer ``fallback_replicas``."""
    fallback_replicas: int | None = None
    """Answer after ``fallback_after_seconds``; None keeps holding the last."""
    prewarm: bool = False
    """Pre-warm GPU nodes with placeholder (balloon) pods; off by default."""
    prewarm_deployment: str = "prescaler-balloon"
    """Name of the balloon Deployment (manifests/) in the ScaledObject's namespace."""
    node_lead_time_seconds: float = 180.0
    """GPU node provisioning time the balloons buy back (Karpenter: 45 s to minutes)."""
    gateway_rate_query: str | None = None
    """PromQL for the requests per second arriving in front of vLLM (the
    gateway's or ingress controller's count); it exists at zero replicas, so
    it is what wakes a fleet scaled to zero. Needs ``prometheus_address``."""
    extra: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False, repr=False)
    """Ignored keys (KEDA's own, unknown ``...FromEnv``), kept for debugging."""


# KEDA's own trigger keys: accepted and ignored.
KEDA_KEYS: frozenset[str] = frozenset(
    {
        "scalerAddress",
        "enableTLS",
        "tlsCertFile",  # deprecated by KEDA, still in its docs and forwarded
        "unsafeSsl",
        "caCert",
        "tlsClientCert",
        "tlsClientKey",
        "metricType",
    }
)


def _num(
    key: str,
    raw: str,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(key, f"expected a number, got {raw!r}") from None
    if not math.isfinite(value):
        raise SettingsError(key, f"expected a finite number, got {raw!r}")
    if lo is not None and (value < lo or (lo_open and value == lo)):
        raise SettingsError(key, f"must be {'>' if lo_open else '>='} {lo:g}, got {raw!r}")
    if hi is not None and (value > hi or (hi_open and value == hi)):
        raise SettingsError(key, f"must be {'<' if hi_open else '<='} {hi:g}, got {raw!r}")
    return value


def _int(key: str, raw: str, *, lo: int = 0, hi: int = 1_000_000) -> int:
    text = raw.strip()
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        raise SettingsError(key, f"expected an integer, got {raw!r}")
    value = int(text)
    if not lo <= value <= hi:
        raise SettingsError(key, f"must be between {lo} and {hi}, got {raw!r}")
    return value


_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def _bool(key: str, raw: str) -> bool:
    # Go's strconv.ParseBool, which KEDA uses for its own boolean keys.
    text = raw.strip()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise SettingsError(key, f"expected true or false, got {raw!r}")


def _url(key: str, raw: str) -> str:
    text = raw.strip()
    try:
        parts = urlsplit(text)
        port = parts.port  # raises ValueError on a bad port
    except ValueError as exc:
        raise SettingsError(key, f"invalid URL {raw!r}: {exc}") from None
    del port
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SettingsError(key, f"expected an http(s) URL with a host, got {raw!r}")
    if any(c.isspace() for c in text) or parts.fragment or "@" in parts.netloc:
        raise SettingsError(key, f"URL must not hold spaces, credentials or a fragment: {raw!r}")
    return text


_DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def _name(key: str, raw: str, pattern: re.Pattern[str] = _DNS1123) -> str:
    text = raw.strip()
    if not pattern.fullmatch(text):
        raise SettingsError(key, f"expected a Kubernetes name (lowercase DNS label), got {raw!r}")
    return text


def _nonempty(key: str, raw: str, limit: int = 512) -> str:
    text = raw.strip()
    if not text:
        raise SettingsError(key, "must not be empty")
    if len(text) > limit or any(ord(c) < 32 for c in text):
        raise SettingsError(key, f"must be printable and at most {limit} characters")
    return text


def _selector(key: str, raw: str) -> tuple[LabelMatcher, ...]:
    try:
        return parse_selector(raw)
    except ValueError as exc:
        raise SettingsError(key, f"invalid label matchers ({exc})") from None


def _pod_selector(key: str, raw: str) -> str:
    try:
        return validate_pod_selector(raw)
    except ValueError as exc:
        raise SettingsError(key, f"invalid Kubernetes label selector ({exc})") from None


def _metrics_urls(key: str, raw: str) -> tuple[str, ...]:
    urls = tuple(_url(key, part) for part in raw.split(",") if part.strip())
    if not urls:
        raise SettingsError(key, "expected at least one URL")
    if len(set(urls)) != len(urls):
        raise SettingsError(key, "duplicate URL")
    return urls


def _lead_time(key: str, raw: str) -> float | None:
    if raw.strip().lower() == "auto":
        return None
    return _num(key, raw, lo=0, hi=86_400)


def _forecast(key: str, raw: str) -> str:
    text = raw.strip()
    if text in ("auto", "off"):
        return text
    if text not in FORECAST_METHODS:
        raise SettingsError(
            key, f"expected auto, off or one of {', '.join(FORECAST_METHODS)}; got {raw!r}"
        )
    return text


def _gateway_query(key: str, raw: str) -> str:
    # Prometheus itself says whether it parses (a failing query is a logged
    # fallback at read time). A text that is one closed piece is read inside
    # a batch of such texts (each wrapped in label_replace, joined by or);
    # any other is sent alone, as written (scaler.sources.gateway_batch).
    # A YAML block scalar may break a long query over lines: whitespace to PromQL.
    return _nonempty(key, re.sub(r"[\t\r\n]+", " ", raw), limit=2048)


def _profile(key: str, raw: str) -> str:
    text = _nonempty(key, raw, limit=128)
    try:
        from engine.profiles import get_profile
    except ImportError:
        raise SettingsError(key, "engine profiles are not available in this build") from None
    try:
        get_profile(text)
    except (KeyError, ValueError) as exc:
        detail = exc.args[0] if exc.args else str(exc)
        raise SettingsError(key, f"unknown profile {raw!r} ({detail})") from None
    return text


# metadata key -> (field name, parser)
_PARSERS: dict[str, tuple[str, Callable[[str, str], Any]]] = {
    "prometheusAddress": ("prometheus_address", _url),
    "metricsUrls": ("metrics_urls", _metrics_urls),
    "podSelector": ("pod_selector", _pod_selector),
    "namespace": ("namespace", _name),
    "selector": ("selector", _selector),
    "model": ("model", _nonempty),
    "profile": ("profile", _profile),
    "capacityTokensPerSecond": (
        "capacity_tokens_per_second",
        lambda k, v: _num(k, v, lo=0, lo_open=True, hi=1e9),
    ),
    "targetWaitingPerReplica": (
        "target_waiting_per_replica",
        lambda k, v: _num(k, v, lo=0, lo_open=True, hi=1e6),
    ),
    "targetKvCacheUsage": (
        "target_kv_cache_usage",
        lambda k, v: _num(k, v, lo=0, lo_open=True, hi=1),
    ),
    "leadTimeSeconds": ("lead_time_seconds", _lead_time),
    "forecast": ("forecast", _forecast),
    "forecastQuantile": (
        "forecast_quantile",
        lambda k, v: _num(k, v, lo=0, hi=1, lo_open=True, hi_open=True),
    ),
    "seasonalPeakDays": ("seasonal_peak_days", lambda k, v: _int(k, v, lo=0, hi=14)),
    "seasonalWanderSeconds": (
        "seasonal_wander_seconds",
        lambda k, v: _num(k, v, lo=0, hi=21_600),
    ),
    "seasonalSizeWanderSeconds": (
        "seasonal_size_wander_seconds",
        lambda k, v: _num(k, v, lo=0, hi=43_200),
    ),
    "minReplicas": ("min_replicas", lambda k, v: _int(k, v, lo=0)),
    "maxReplicas": ("max_replicas", lambda k, v: _int(k, v, lo=1)),
    "scaleDownStabilizationSeconds": (
        "scale_down_stabilization_seconds",
        lambda k, v: _num(k, v, lo=0, hi=86_400),
    ),
    "staleAfterSeconds": (
        "stale_after_seconds",
        lambda k, v: _num(k, v, lo=0, lo_open=True, hi=86_400),
    ),
    "fallbackAfterSeconds": (
        "fallback_after_seconds",
        lambda k, v: _num(k, v, lo=0, lo_open=True, hi=7 * 86_400),
    ),
    "fallbackReplicas": ("fallback_replicas", lambda k, v: _int(k, v, lo=0)),
    "countStartingReplicas": ("count_starting_replicas", _bool),
    "prewarm": ("prewarm", _bool),
    "prewarmDeployment": ("prewarm_deployment", _name),
    "nodeLeadTimeSeconds": ("node_lead_time_seconds", lambda k, v: _num(k, v, lo=0, hi=86_400)),
    "gatewayRateQuery": ("gateway_rate_query", _gateway_query),
}

METADATA_KEYS: frozenset[str] = frozenset(_PARSERS)


def parse_settings(metadata: Mapping[str, str]) -> ScalerSettings:
    """Validate a trigger's metadata map into :class:`ScalerSettings`.

    Raises :class:`SettingsError` naming the first bad key (keys are checked
    in sorted order, so the same map always names the same key).
    """
    values: dict[str, Any] = {}
    extra: dict[str, str] = {}
    seen: dict[str, str] = {}  # our key -> the metadata key it came from
    for raw_key in sorted(metadata):
        raw_value = metadata[raw_key]
        if not isinstance(raw_key, str) or not isinstance(raw_value, str):
            raise SettingsError(str(raw_key), "metadata keys and values must be strings")
        key = raw_key
        if key.endswith("FromEnv") and key[: -len("FromEnv")] in _PARSERS:
            key = key[: -len("FromEnv")]
        elif key in KEDA_KEYS or key.endswith("FromEnv"):
            extra[raw_key] = raw_value
            continue
        if key not in _PARSERS:
            raise SettingsError(raw_key, _unknown_key(raw_key))
        if key in seen:
            raise SettingsError(raw_key, f"given twice (as {seen[key]} and {raw_key})")
        seen[key] = raw_key
        field_name, parser = _PARSERS[key]
        values[field_name] = parser(raw_key, raw_value)

    sources = [k for k in ("prometheusAddress", "metricsUrls", "podSelector") if k in seen]
    if len(sources) != 1:
        first = seen[sources[1]] if len(sources) > 1 else "prometheusAddress"
        raise SettingsError(
            first,
            "exactly one data source is required: prometheusAddress, metricsUrls or podSelector"
            + (f" (got {', '.join(sources)})" if sources else ""),
        )
    if "namespace" in seen and "podSelector" not in seen:
        raise SettingsError(seen["namespace"], "namespace is only used with podSelector")
    if "gatewayRateQuery" in seen and "prometheusAddress" not in seen:
        raise SettingsError(
            seen["gatewayRateQuery"], "gatewayRateQuery is read from prometheusAddress; give it"
        )
    if "profile" in seen and "capacityTokensPerSecond" in seen:
        raise SettingsError(
            seen["capacityTokensPerSecond"], "give either profile or capacityTokensPerSecond"
        )
    settings = ScalerSettings(**values, extra=extra)
    if settings.max_replicas < settings.min_replicas:
        raise SettingsError(
            seen.get("maxReplicas", "minReplicas"),
            f"maxReplicas ({settings.max_replicas}) < minReplicas ({settings.min_replicas})",
        )
    if settings.fallback_after_seconds < settings.stale_after_seconds:
        raise SettingsError(
            seen.get("fallbackAfterSeconds", "staleAfterSeconds"),
            "fallbackAfterSeconds must be >= staleAfterSeconds",
        )
    if settings.fallback_replicas is not None and not (
        settings.min_replicas <= settings.fallback_replicas <= settings.max_replicas
    ):
        raise SettingsError(
            seen["fallbackReplicas"],
            f"{settings.fallback_replicas} must lie within [minReplicas, maxReplicas] = "
            f"[{settings.min_replicas}, {settings.max_replicas}]",
        )
    return settings


def metadata_value(settings: ScalerSettings, key: str) -> str | None:
    """The metadata text that gives ``settings``' value of ``key`` (what a
    key left out of the metadata is in effect: its default), or None for a
    key with no value (a lead time measured live is ``auto``; a list or an
    unset optional has no one text)."""
    if key not in _PARSERS:
        raise KeyError(f"{key!r} is not a metadata key")
    value = getattr(settings, _PARSERS[key][0])
    if key == "leadTimeSeconds" and value is None:
        return "auto"
    if value is None or isinstance(value, tuple):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _unknown_key(key: str) -> str:
    """The error for a key nobody reads, with the nearest known key when one is
    close (a typo or a wrong case is the usual cause)."""
    by_lower = {k.lower(): k for k in [*_PARSERS, *sorted(KEDA_KEYS)]}
    near = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.6)
    hint = f"; did you mean {by_lower[near[0]]!r}?" if near else ""
    return f"unknown metadata key{hint} (docs/contracts.md, 'Trigger metadata keys', lists them)"
