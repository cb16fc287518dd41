"""ScaledObject trigger metadata, parsed and validated once into typed settings.

KEDA hands the trigger's ``metadata`` map to every RPC as ``scalerMetadata``.
Everything in it is user input: it is validated here, at the edge, with an
error that names the offending key, so that nothing downstream (PromQL,
Kubernetes calls, the policy) ever sees an unchecked value. In particular the
``selector`` label matchers are parsed with a small real parser and re-emitted
with escaping, so metadata can never be pasted raw into a PromQL query.

Keys are camelCase, exactly as design.md's "Contracts" lists them. KEDA's own
keys (``scalerAddress``, TLS keys, ``metricType``) are accepted and ignored.
KEDA replaces the value of a key ending in ``FromEnv`` with the target
container's environment value but keeps the key name: ``<ourKey>FromEnv`` is
therefore read as ``<ourKey>`` (an error if both are given); any other
``...FromEnv`` key is ignored.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

# Imported here, at module import, not in the RPC path: ``forecasting`` pulls
# in pandas and statsmodels (~0.6 s), which must never run inside a gRPC
# handler on the event loop. METHODS is the one list of method names.
from forecasting import METHODS as FORECAST_METHODS

__all__ = [
    "FORECAST_METHODS",
    "KEDA_KEYS",
    "METADATA_KEYS",
    "LabelMatcher",
    "ScalerSettings",
    "SettingsError",
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


# --------------------------------------------------------------------------
# Label matchers (the ``selector`` key)
# --------------------------------------------------------------------------

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_OPS = ("=~", "!~", "!=", "=")  # longest first so "=~" is not read as "="
_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "r": "\r"}


# Constructs Python's re accepts but RE2 (Go regexp, what Prometheus runs)
# rejects with "invalid or unsupported Perl syntax", or reads differently.
_RE2_GROUP_PREFIXES: tuple[tuple[str, str], ...] = (
    ("(?<=", "lookbehind '(?<='"),
    ("(?<!", "negative lookbehind '(?<!'"),
    ("(?=", "lookahead '(?='"),
    ("(?!", "negative lookahead '(?!'"),
    ("(?P=", "backreference '(?P=name)'"),
    ("(?>", "atomic group '(?>'"),
    ("(?(", "conditional '(?('"),
    ("(?#", "comment '(?#'"),
)
_RE2_FLAGS = frozenset("ims")
_RE2_MAX_REPEAT = 1000  # Go regexp's limit on {n,m} counts
_RE_REPEAT = re.compile(r"\{([0-9]*)(,([0-9]*))?\}")
_RE_NAMED_GROUP = re.compile(r"\(\?P<([^>]*)>")
_RE_FLAGS_GROUP = re.compile(r"\(\?([A-Za-z]*)(?:-([A-Za-z]*))?[:)]")
_RE_OCTAL3 = re.compile(r"[0-7]{3}")
_ASCII_WORD = re.compile(r"[A-Za-z0-9_]+")


def re2_problem(pattern: str) -> str | None:
    """The first construct in ``pattern`` outside the RE2/Python common
    subset, described for an error message; None if there is none.

    A selector regex is pasted into PromQL, where Prometheus compiles it with
    Go's RE2-syntax engine, and is also run by Python's ``re`` for direct
    scrape and discovery. Python accepts lookaround, backreferences,
    possessive quantifiers, atomic groups and conditionals that make every
    Prometheus query fail with HTTP 400, so they are refused up front, as
    are a few that both accept but read differently (``[[:alpha:]]``,
    ``{,n}``). A lexical scan, not a parser: ``re.compile`` still validates
    the pattern afterwards.
    """
    i, n = 0, len(pattern)
    in_class = False
    class_body = 0  # index of a class's first member: a ']' there is literal
    while i < n:
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            if nxt in ("1", "2", "3", "4", "5", "6", "7", "8", "9"):
                # Python and Go agree only on three-digit octal escapes.
                if not _RE_OCTAL3.match(pattern, i + 1):
                    return f"backreference '\\{nxt}'"
            elif nxt in ("Z", "u", "U", "N"):
                return f"escape '\\{nxt}'"
            elif nxt == "b" and in_class:
                return "escape '\\b' inside a character class"
            elif nxt and not nxt.isascii():
                return f"escape of a non-ASCII character '\\{nxt}'"
            i += 2
            continue
        if in_class:
            if c == "]" and i > class_body:
                in_class = False
            elif c == "[":
                return "'[' inside a character class (write '\\[')"
            elif c in "-&~|" and pattern[i + 1 : i + 2] == c:
                return f"'{c}{c}' inside a character class"
            i += 1
            continue
        if c == "[":
            in_class = True
            i += 2 if pattern[i + 1 : i + 2] == "^" else 1
            class_body = i
            continue
        if c == "(" and pattern.startswith("(?", i):
            for prefix, what in _RE2_GROUP_PREFIXES:
                if pattern.startswith(prefix, i):
                    return what
            if m := _RE_NAMED_GROUP.match(pattern, i):
                if not _ASCII_WORD.fullmatch(m.group(1)):
                    return f"group name {m.group(1)!r} (RE2 allows only A-Z, a-z, 0-9 and _)"
                i = m.end()
                continue
            if m := _RE_FLAGS_GROUP.match(pattern, i):
                bad = sorted(set(m.group(1) + (m.group(2) or "")) - _RE2_FLAGS)
                if bad:
                    return f"inline flag '{bad[0]}' (RE2 knows i, m and s)"
                i = m.end()
                continue
            i += 2
            continue
        end = i + 1 if c in "*+?" else 0
        if c == "{" and (m := _RE_REPEAT.match(pattern, i)) and m.group(0) != "{}":
            low, _, high = m.groups()
            if not low:
                return f"repeat '{m.group(0)}' without a minimum (RE2 reads it as text)"
            if int(low) > _RE2_MAX_REPEAT or (high and int(high) > _RE2_MAX_REPEAT):
                return f"repeat count over {_RE2_MAX_REPEAT} in '{m.group(0)}'"
            end = m.end()
        if end:
            following = pattern[end : end + 1]
            if following == "+":
                return f"possessive quantifier '{pattern[end - 1]}+'"
            i = end + (1 if following == "?" else 0)  # a lazy '?' is fine
            continue
        i += 1
    return None


@dataclass(frozen=True)
class LabelMatcher:
    """One PromQL label matcher, e.g. ``model=~"llama.*"``.

    ``value`` is the unescaped value; :meth:`promql` re-escapes it, so the
    text emitted is always a single well-formed matcher.
    """

    name: str
    op: str
    value: str

    def __post_init__(self) -> None:
        if not _LABEL_NAME.fullmatch(self.name):
            raise ValueError(f"invalid label name {self.name!r}")
        if self.name.startswith("__"):
            raise ValueError(f"label name {self.name!r} is reserved (starts with '__')")
        if self.op not in _OPS:
            raise ValueError(f"invalid matcher operator {self.op!r}")
        if self.op in ("=~", "!~"):
            # Both engines read this value: Prometheus (Go regexp, RE2 syntax)
            # in the query, Python's re in matches(). Accept only the common
            # subset, checked first so Python never warns about RE2-isms.
            problem = re2_problem(self.value)
            if problem is not None:
                raise ValueError(
                    f"regular expression for {self.name} is not RE2 (Prometheus) syntax: {problem}"
                )
            try:
                re.compile(self.value)
            except re.error as exc:
                raise ValueError(f"invalid regular expression for {self.name}: {exc}") from None

    def promql(self) -> str:
        """The matcher as PromQL text, value escaped as a double-quoted string."""
        escaped = (
            self.value.replace("\\", "\\\\")
            .replace('"', '\\"')
            .replace("\n", "\\n")
            .replace("\r", "\\r")
            .replace("\t", "\\t")
        )
        return f'{self.name}{self.op}"{escaped}"'

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a label set satisfies this matcher (PromQL semantics:
        a missing label is the empty string; regexes are fully anchored).

        Used by direct scrape and discovery, where there is no Prometheus
        to apply the matcher.
        """
        actual = labels.get(self.name, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        hit = re.fullmatch(self.value, actual) is not None
        return hit if self.op == "=~" else not hit


def _parse_quoted(text: str, pos: int) -> tuple[str, int]:
    quote = text[pos]
    out: list[str] = []
    i = pos + 1
    while i < len(text):
        ch = text[i]
        if ch == quote:
            return "".join(out), i + 1
        if ch == "\\":
            if i + 1 >= len(text):
                break
            nxt = text[i + 1]
            if nxt not in _ESCAPES:
                raise ValueError(f"unsupported escape '\\{nxt}' at position {i}")
            out.append(_ESCAPES[nxt])
            i += 2
            continue
        if ch == "\n":
            raise ValueError(f"newline inside quoted value at position {i}")
        out.append(ch)
        i += 1
    raise ValueError(f"unterminated quoted value starting at position {pos}")


def parse_selector(text: str) -> tuple[LabelMatcher, ...]:
    """Parse ``name op "value"`` matchers separated by commas.

    Optional surrounding braces are allowed (``{app="vllm"}``); values must
    be quoted (double, single quotes); a trailing comma is allowed, like
    PromQL. Anything else (``}``, ``or``, an unquoted value) is an error, so
    an injection like ``a="x"}or vector(1)`` cannot get through.
    """
    s = text.strip()
    if s.startswith("{"):
        if not s.endswith("}"):
            raise ValueError("unbalanced '{'")
        s = s[1:-1]
    matchers: list[LabelMatcher] = []
    i, n = 0, len(s)

    def skip_ws(j: int) -> int:
        while j < n and s[j] in " \t":
            j += 1
        return j

    i = skip_ws(i)
    while i < n:
        m = _LABEL_NAME.match(s, i)
        if not m:
            raise ValueError(f"expected a label name at position {i}: {s[i : i + 12]!r}")
        name = m.group(0)
        i = skip_ws(m.end())
        op = next((o for o in _OPS if s.startswith(o, i)), None)
        if op is None:
            raise ValueError(f"expected one of = != =~ !~ after {name!r} at position {i}")
        i = skip_ws(i + len(op))
        if i >= n or s[i] not in "\"'":
            raise ValueError(f"expected a quoted value for {name!r} at position {i}")
        value, i = _parse_quoted(s, i)
        matchers.append(LabelMatcher(name, op, value))
        i = skip_ws(i)
        if i < n:
            if s[i] != ",":
                raise ValueError(f"expected ',' at position {i}: {s[i : i + 12]!r}")
            i = skip_ws(i + 1)
    return tuple(matchers)


# --------------------------------------------------------------------------
# Kubernetes label selectors (``podSelector``)
# --------------------------------------------------------------------------

_K8S_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_K8S_KEY = re.compile(
    rf"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_K8S_NAME}"
)
_K8S_VALUE = re.compile(rf"({_K8S_NAME})?")
_K8S_SET = re.compile(r"\s*(\S+?)\s+(in|notin)\s*\(([^()]*)\)\s*")
_K8S_EQ = re.compile(r"\s*([^=!\s]+)\s*(==|=|!=)\s*(\S*)\s*")
_K8S_EXISTS = re.compile(r"\s*(!?)\s*(\S+)\s*")


def _split_k8s_selector(text: str) -> list[str]:
    parts: list[str] = []
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ValueError("unbalanced ')'")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError("unbalanced '('")
    parts.append(text[start:])
    return parts


def validate_pod_selector(text: str) -> str:
    """Validate Kubernetes label-selector syntax (``a=b,c in (d,e),!f``).

    Returns the normalised text (whitespace trimmed) that is passed to the
    API's ``labelSelector`` query parameter.
    """
    if not text.strip():
        raise ValueError("empty selector")
    out: list[str] = []
    for part in _split_k8s_selector(text):
        if m := _K8S_SET.fullmatch(part):
            key, op, values = m.group(1), m.group(2), [v.strip() for v in m.group(3).split(",")]
            if not _K8S_KEY.fullmatch(key):
                raise ValueError(f"invalid label key {key!r}")
            if not values or any(not _K8S_VALUE.fullmatch(v) or not v for v in values):
                raise ValueError(f"invalid value list for {key!r}")
            out.append(f"{key} {op} ({','.join(values)})")
        elif m := _K8S_EQ.fullmatch(part):
            key, op, value = m.groups()
            if not _K8S_KEY.fullmatch(key):
                raise ValueError(f"invalid label key {key!r}")
            if not _K8S_VALUE.fullmatch(value):
                raise ValueError(f"invalid label value {value!r} for {key!r}")
            out.append(f"{key}{op}{value}")
        elif m := _K8S_EXISTS.fullmatch(part):
            bang, key = m.groups()
            if not _K8S_KEY.fullmatch(key):
                raise ValueError(f"invalid selector term {part.strip()!r}")
            out.append(f"{bang}{key}")
        else:
            raise ValueError(f"invalid selector term {part.strip()!r}")
    return ",".join(out)


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
    min_replicas: int = 0
    max_replicas: int = 100
    """Bounds of the answer; defaults are KEDA's minReplicaCount/maxReplicaCount."""
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
    extra: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False, repr=False)
    """Ignored keys (KEDA's own, unknown ``...FromEnv``), kept for debugging."""

    @property
    def source_kind(self) -> str:
        """``prometheus``, ``scrape`` or ``kubernetes``."""
        if self.prometheus_address is not None:
            return "prometheus"
        if self.metrics_urls:
            return "scrape"
        return "kubernetes"

    def source_key(self) -> tuple[str, ...]:
        """Identity of the data source, without per-object filters.

        ScaledObjects with equal keys share one source (one Prometheus query
        per signal per refresh for all of them); ``selector`` and ``model``
        are applied to the grouped result, not part of the key.
        """
        if self.prometheus_address is not None:
            return ("prometheus", self.prometheus_address)
        if self.metrics_urls:
            return ("scrape", *self.metrics_urls)
        return ("kubernetes", self.namespace or "", self.pod_selector or "")

    def promql_matchers(self) -> str:
        """The per-object matchers as PromQL text (``selector`` plus
        ``model_name`` from ``model``), comma-joined, escaped; may be empty."""
        parts = [m.promql() for m in self.selector]
        if self.model is not None:
            parts.append(LabelMatcher("model_name", "=", self.model).promql())
        return ",".join(parts)


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
    "prewarm": ("prewarm", _bool),
    "prewarmDeployment": ("prewarm_deployment", _name),
    "nodeLeadTimeSeconds": ("node_lead_time_seconds", lambda k, v: _num(k, v, lo=0, hi=86_400)),
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
            raise SettingsError(
                raw_key, "unknown metadata key (see the scaler's README for the keys)"
            )
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
        raise SettingsError(seen["fallbackReplicas"], "must lie within [minReplicas, maxReplicas]")
    return settings
