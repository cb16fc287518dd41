"""Trigger metadata -> ScalerSettings: every key, every bad value, the selector parser."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decision.settings import (
    FORECAST_METHODS,
    KEDA_KEYS,
    METADATA_KEYS,
    LabelMatcher,
    ScalerSettings,
    SettingsError,
    metadata_value,
    parse_selector,
    parse_settings,
    validate_pod_selector,
)

PROM = {"prometheusAddress": "http://prometheus.monitoring:9090"}


def test_defaults_match_the_contract() -> None:
    """Only a source given: every other field takes the documented default."""
    s = parse_settings(PROM)
    assert s.prometheus_address == "http://prometheus.monitoring:9090"
    assert (s.metrics_urls, s.pod_selector, s.namespace, s.selector) == ((), None, None, ())
    assert (s.model, s.profile, s.capacity_tokens_per_second) == (None, None, None)
    assert s.target_waiting_per_replica == 3
    assert s.target_kv_cache_usage == 0.8
    assert s.lead_time_seconds is None  # auto
    assert s.forecast == "auto"
    assert s.forecast_quantile == 0.9
    assert (s.min_replicas, s.max_replicas) == (0, 100)
    assert s.scale_down_stabilization_seconds == 300
    assert (s.stale_after_seconds, s.fallback_after_seconds, s.fallback_replicas) == (60, 300, None)
    assert (s.prewarm, s.prewarm_deployment, s.node_lead_time_seconds) == (
        False,
        "prescaler-balloon",
        180,
    )
    assert s == ScalerSettings(prometheus_address="http://prometheus.monitoring:9090")


def test_every_key_parsed() -> None:
    """Each metadata key lands, typed, in its snake_case field."""
    s = parse_settings(
        {
            **PROM,
            "selector": 'app="vllm",model=~"llama.*"',
            "model": "meta-llama/Meta-Llama-3-8B-Instruct",
            "capacityTokensPerSecond": "1500",
            "targetWaitingPerReplica": "5",
            "targetKvCacheUsage": "0.7",
            "leadTimeSeconds": "240",
            "forecast": "holt_winters",
            "forecastQuantile": "0.95",
            "minReplicas": "1",
            "maxReplicas": "12",
            "scaleDownStabilizationSeconds": "600",
            "staleAfterSeconds": "45",
            "fallbackAfterSeconds": "120",
            "fallbackReplicas": "4",
            "prewarm": "true",
            "prewarmDeployment": "llama-balloon",
            "nodeLeadTimeSeconds": "90",
        }
    )
    assert s.selector == (LabelMatcher("app", "=", "vllm"), LabelMatcher("model", "=~", "llama.*"))
    assert s.model == "meta-llama/Meta-Llama-3-8B-Instruct"
    assert s.capacity_tokens_per_second == 1500.0
    assert (s.target_waiting_per_replica, s.target_kv_cache_usage) == (5.0, 0.7)
    assert (s.lead_time_seconds, s.forecast, s.forecast_quantile) == (240.0, "holt_winters", 0.95)
    assert (s.min_replicas, s.max_replicas) == (1, 12)
    assert s.scale_down_stabilization_seconds == 600.0
    assert (s.stale_after_seconds, s.fallback_after_seconds, s.fallback_replicas) == (45, 120, 4)
    assert (s.prewarm, s.prewarm_deployment, s.node_lead_time_seconds) == (
        True,
        "llama-balloon",
        90,
    )
    assert isinstance(s.min_replicas, int) and isinstance(s.fallback_replicas, int)


def test_metadata_keys_are_exactly_the_contract() -> None:
    assert {
        "prometheusAddress", "metricsUrls", "podSelector", "namespace", "selector", "model",
        "profile", "capacityTokensPerSecond", "targetWaitingPerReplica", "targetKvCacheUsage",
        "leadTimeSeconds", "forecast", "forecastQuantile", "minReplicas", "maxReplicas",
        "scaleDownStabilizationSeconds", "staleAfterSeconds", "fallbackAfterSeconds",
        "fallbackReplicas", "prewarm", "prewarmDeployment", "nodeLeadTimeSeconds",
        "gatewayRateQuery", "seasonalPeakDays", "seasonalWanderSeconds",
        "seasonalSizeWanderSeconds", "countStartingReplicas",
    } == METADATA_KEYS  # fmt: skip


@pytest.mark.parametrize("raw", ["-1", "15", "2.5", "three"])
def test_seasonal_peak_days_is_a_small_whole_number(raw: str) -> None:
    with pytest.raises(SettingsError, match="seasonalPeakDays"):
        parse_settings({"prometheusAddress": "http://p:9090", "seasonalPeakDays": raw})
    assert parse_settings({"prometheusAddress": "http://p:9090"}).seasonal_peak_days == 3


@pytest.mark.parametrize("raw", ["-1", "21601", "nan", "soon"])
def test_seasonal_wander_is_seconds_up_to_six_hours(raw: str) -> None:
    with pytest.raises(SettingsError, match="seasonalWanderSeconds"):
        parse_settings({"prometheusAddress": "http://p:9090", "seasonalWanderSeconds": raw})
    base = {"prometheusAddress": "http://p:9090"}
    assert parse_settings(base).seasonal_wander_seconds == 1800.0
    assert parse_settings({**base, "seasonalWanderSeconds": "1200"}).seasonal_wander_seconds == 1200


def test_sources() -> None:
    """metricsUrls splits on commas; podSelector takes a namespace."""
    s = parse_settings(
        {"metricsUrls": " http://10.0.0.1:8000/metrics , http://10.0.0.2:8000/metrics"}
    )
    assert s.metrics_urls == ("http://10.0.0.1:8000/metrics", "http://10.0.0.2:8000/metrics")
    assert s.prometheus_address is None
    k = parse_settings({"podSelector": "app=vllm, tier in (gpu,spot)", "namespace": "llm"})
    assert (k.pod_selector, k.namespace) == ("app=vllm,tier in (gpu,spot)", "llm")
    assert k.prometheus_address is None and not k.metrics_urls


def test_tls_cert_file_is_an_ignored_keda_key() -> None:
    """KEDA's deprecated tlsCertFile is still in its docs and forwarded with the
    metadata: it must not turn every call into INVALID_ARGUMENT."""
    assert "tlsCertFile" in KEDA_KEYS
    s = parse_settings({**PROM, "tlsCertFile": "/certs/tls.crt", "enableTLS": "true"})
    assert s.extra == {"tlsCertFile": "/certs/tls.crt", "enableTLS": "true"}
    assert s == parse_settings(PROM)


def test_keda_keys_and_from_env() -> None:
    """KEDA's own keys are ignored; <ourKey>FromEnv is read as the key."""
    meta = {k: "x" for k in KEDA_KEYS} | {
        "prometheusAddressFromEnv": "http://prom:9090",
        "someUnrelatedFromEnv": "whatever",
    }
    s = parse_settings(meta)
    assert s.prometheus_address == "http://prom:9090"
    assert "scalerAddress" in s.extra and "someUnrelatedFromEnv" in s.extra
    with pytest.raises(SettingsError) as err:
        parse_settings({**PROM, "prometheusAddressFromEnv": "http://other:9090"})
    assert "given twice" in str(err.value)


BAD = [
    ({"prometheusAddres": "http://p:9090"}, "prometheusAddres"),
    ({**PROM, "targetWaiting": "3"}, "targetWaiting"),
    ({}, "prometheusAddress"),
    ({**PROM, "metricsUrls": "http://a/metrics"}, "metricsUrls"),
    ({**PROM, "podSelector": "app=vllm"}, "podSelector"),
    ({"prometheusAddress": "prometheus:9090"}, "prometheusAddress"),
    ({"prometheusAddress": "ftp://p"}, "prometheusAddress"),
    ({"prometheusAddress": "http://user:pw@p:9090"}, "prometheusAddress"),
    ({"prometheusAddress": "http://p:99999"}, "prometheusAddress"),
    ({"metricsUrls": " , "}, "metricsUrls"),
    ({"metricsUrls": "http://a/m,http://a/m"}, "metricsUrls"),
    ({"podSelector": "app=vl/lm"}, "podSelector"),
    ({"podSelector": "app in (a"}, "podSelector"),
    ({"podSelector": "app=vllm", "namespace": "Bad_NS"}, "namespace"),
    ({**PROM, "namespace": "llm"}, "namespace"),
    ({**PROM, "selector": "app=vllm"}, "selector"),
    ({**PROM, "model": "  "}, "model"),
    ({**PROM, "capacityTokensPerSecond": "0"}, "capacityTokensPerSecond"),
    ({**PROM, "capacityTokensPerSecond": "fast"}, "capacityTokensPerSecond"),
    ({**PROM, "targetWaitingPerReplica": "-1"}, "targetWaitingPerReplica"),
    ({**PROM, "targetWaitingPerReplica": "nan"}, "targetWaitingPerReplica"),
    ({**PROM, "targetKvCacheUsage": "80"}, "targetKvCacheUsage"),
    ({**PROM, "targetKvCacheUsage": "inf"}, "targetKvCacheUsage"),
    ({**PROM, "leadTimeSeconds": "soon"}, "leadTimeSeconds"),
    ({**PROM, "leadTimeSeconds": "-5"}, "leadTimeSeconds"),
    ({**PROM, "forecast": "prophet"}, "forecast"),
    ({**PROM, "forecastQuantile": "1"}, "forecastQuantile"),
    ({**PROM, "forecastQuantile": "0"}, "forecastQuantile"),
    ({**PROM, "minReplicas": "1.5"}, "minReplicas"),
    ({**PROM, "minReplicas": "-1"}, "minReplicas"),
    ({**PROM, "maxReplicas": "0"}, "maxReplicas"),
    ({**PROM, "minReplicas": "5", "maxReplicas": "4"}, "maxReplicas"),
    ({**PROM, "scaleDownStabilizationSeconds": "-1"}, "scaleDownStabilizationSeconds"),
    ({**PROM, "staleAfterSeconds": "0"}, "staleAfterSeconds"),
    ({**PROM, "staleAfterSeconds": "90", "fallbackAfterSeconds": "60"}, "fallbackAfterSeconds"),
    ({**PROM, "fallbackReplicas": "many"}, "fallbackReplicas"),
    ({**PROM, "maxReplicas": "3", "fallbackReplicas": "5"}, "fallbackReplicas"),
    ({**PROM, "prewarm": "yes"}, "prewarm"),
    ({**PROM, "prewarmDeployment": "Balloon_1"}, "prewarmDeployment"),
    ({**PROM, "nodeLeadTimeSeconds": "-1"}, "nodeLeadTimeSeconds"),
    ({**PROM, "profile": "gpt-5@h100", "capacityTokensPerSecond": "10"}, "profile"),
    ({**PROM, "gatewayRateQuery": "   "}, "gatewayRateQuery"),
    ({**PROM, "gatewayRateQuery": "sum(rate(x[1m]))" + "a" * 2048}, "gatewayRateQuery"),
    ({"metricsUrls": "http://a/m", "gatewayRateQuery": "sum(rate(x[1m]))"}, "gatewayRateQuery"),
]


def test_gateway_rate_query_is_optional_and_kept_as_one_line() -> None:
    """Absent by default; a YAML block scalar's line breaks read as spaces
    (PromQL does not care) and the text is otherwise kept as written."""
    assert parse_settings(PROM).gateway_rate_query is None
    query = 'sum(rate(nginx_ingress_controller_requests{service="vllm"}[1m]))'
    assert parse_settings({**PROM, "gatewayRateQuery": query}).gateway_rate_query == query
    folded = "sum(\n  rate(gateway_requests_total[1m])\n)\n"
    parsed = parse_settings({**PROM, "gatewayRateQueryFromEnv": folded})
    assert parsed.gateway_rate_query == "sum(   rate(gateway_requests_total[1m]) )"


@pytest.mark.parametrize(("meta", "key"), BAD, ids=[k for _, k in BAD])
def test_bad_metadata_names_the_key(meta: dict[str, str], key: str) -> None:
    """Every bad value or unknown key raises SettingsError naming the key."""
    with pytest.raises(SettingsError) as err:
        parse_settings(meta)
    assert err.value.key == key or (key == "profile" and err.value.key == "capacityTokensPerSecond")
    assert str(err.value).startswith(f"{err.value.key}:")


def test_profile_validated_against_engine_profiles() -> None:
    profiles = pytest.importorskip("engine.profiles")
    name = profiles.profile_names()[0]
    assert parse_settings({**PROM, "profile": name}).profile == name
    with pytest.raises(SettingsError) as err:
        parse_settings({**PROM, "profile": "no-such-model@nowhere"})
    assert err.value.key == "profile" and name in str(err.value)


def test_forecast_methods_from_forecasting() -> None:
    """decision.methods names forecasting.METHODS exactly; anything else is
    refused naming them."""
    import forecasting

    assert FORECAST_METHODS == forecasting.METHODS
    for method in forecasting.METHODS:
        assert parse_settings({**PROM, "forecast": method}).forecast == method
    assert parse_settings({**PROM, "forecast": "off"}).forecast == "off"
    with pytest.raises(SettingsError) as err:
        parse_settings({**PROM, "forecast": "crystal_ball"})
    assert err.value.key == "forecast" and "holt_winters" in str(err.value)


def test_parsing_imports_nothing() -> None:
    """Neither importing decision.settings nor parse_settings (which runs in
    gRPC handlers on the event loop) imports anything: not forecasting,
    pandas or statsmodels (~0.6 s), not a module on a call."""
    code = (
        "import sys\n"
        "import decision.settings as s\n"
        "assert not {'forecasting', 'pandas', 'statsmodels'} & set(sys.modules)\n"
        "before = set(sys.modules)\n"
        "meta = {'prometheusAddress': 'http://p:9090', 'forecast': 'holt_winters',\n"
        "        'selector': 'app=~\"vllm-.*\"', 'tlsCertFile': '/certs/tls.crt'}\n"
        "assert s.parse_settings(meta).forecast == 'holt_winters'\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_lead_time_auto_and_bools() -> None:
    assert parse_settings({**PROM, "leadTimeSeconds": "AUTO"}).lead_time_seconds is None
    for text, value in [("true", True), ("1", True), ("False", False), ("f", False)]:
        assert parse_settings({**PROM, "prewarm": text}).prewarm is value


# ---------------------------------------------------------------------------
# selector parsing and escaping
# ---------------------------------------------------------------------------


def test_selector_forms() -> None:
    assert parse_selector('{app="vllm", env!="dev",model=~"llama.*",x!~"a|b",}') == (
        LabelMatcher("app", "=", "vllm"),
        LabelMatcher("env", "!=", "dev"),
        LabelMatcher("model", "=~", "llama.*"),
        LabelMatcher("x", "!~", "a|b"),
    )
    assert parse_selector("app='vllm'") == (LabelMatcher("app", "=", "vllm"),)
    assert parse_selector("") == ()


@pytest.mark.parametrize(
    "text",
    [
        'a="x"}or vector(1)',
        'a="x"} or on() vector(1) #',
        'a="x") or (vector(1)',
        'a="x" or b="y"',
        "a=x",
        'a="x',
        '__name__="up"',
        '1a="x"',
        'a=="x"',
        'a=~"("',
        'a="x"\nb="y"',
        'a="\\q"',
        '{a="x"',
    ],
)
def test_selector_injection_rejected(text: str) -> None:
    """Anything that is not a list of well-formed matchers is refused."""
    with pytest.raises(ValueError):
        parse_selector(text)
    with pytest.raises(SettingsError) as err:
        parse_settings({**PROM, "selector": text})
    assert err.value.key == "selector"


def test_selector_values_escaped_in_promql() -> None:
    """A quote inside a value stays inside the value when re-emitted."""
    (m,) = parse_selector(r'a="x\"}or vector(1)"')
    assert m.value == 'x"}or vector(1)'
    assert m.promql() == r'a="x\"}or vector(1)"'
    s = parse_settings({**PROM, "selector": r'a="back\\slash"', "model": 'm"}'})
    assert [m.promql() for m in s.selector] == [r'a="back\\slash"']
    assert LabelMatcher("model_name", "=", s.model or "").promql() == r'model_name="m\"}"'


_PROMQL_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_value_round_trips_as_one_promql_string(value: str) -> None:
    """Whatever the value, promql() is name op one string literal that parses back."""
    m = LabelMatcher("a", "=", value)
    text = m.promql()
    assert text.startswith('a="') and _PROMQL_STRING.fullmatch(text[2:])
    if "\n" not in value and "\r" not in value:
        assert parse_selector(text) == (m,)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_parse_selector_only_raises_value_error(text: str) -> None:
    """Random text: a tuple of valid matchers or ValueError, nothing else."""
    try:
        matchers = parse_selector(text)
    except ValueError:
        return
    for m in matchers:
        assert parse_selector(m.promql()) == (m,)


def test_matcher_matches_like_promql() -> None:
    labels = {"app": "vllm", "model": "llama-3-8b"}
    assert LabelMatcher("app", "=", "vllm").matches(labels)
    assert LabelMatcher("model", "=~", "llama.*").matches(labels)
    assert not LabelMatcher("model", "=~", "llama").matches(labels)  # anchored
    assert LabelMatcher("env", "=", "").matches(labels)  # missing label is ""
    assert LabelMatcher("model", "!~", "mistral.*").matches(labels)


# ---------------------------------------------------------------------------
# selector regexes: the RE2 (Prometheus) / Python common subset
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("regex", "construct"),
    [
        ("vllm-(?!canary).*", "negative lookahead '(?!'"),
        ("(?=vllm).*", "lookahead '(?='"),
        (".*(?<=-0)", "lookbehind '(?<='"),
        (".*(?<!-0)", "negative lookbehind '(?<!'"),
        ("(a)\\1", "backreference '\\1'"),
        ("(a)(b)\\2", "backreference '\\2'"),
        ("(?P<x>a)(?P=x)", "backreference '(?P=name)'"),
        ("a*+", "possessive quantifier '*+'"),
        ("a++", "possessive quantifier '++'"),
        ("a?+", "possessive quantifier '?+'"),
        ("a{2,3}+", "possessive quantifier '}+'"),
        ("(?>a|ab)c", "atomic group '(?>'"),
        ("(a)?(?(1)b|c)", "conditional '(?('"),
        ("vllm(?#comment)", "comment '(?#'"),
        ("vllm\\Z", "escape '\\Z'"),
        ("(?x)vllm", "inline flag 'x'"),
        ("a{,3}", "repeat '{,3}' without a minimum"),
        ("a{1001}", "repeat count over 1000"),
        ("[[:alpha:]]+", "'[' inside a character class"),
        ("[a-z&&b]", "'&&' inside a character class"),
        ("[\\b]", "escape '\\b' inside a character class"),
    ],
)
def test_selector_regex_outside_re2_is_refused(regex: str, construct: str) -> None:
    """Python accepts these, Prometheus answers every query with HTTP 400
    (or reads them differently): refused up front, naming the construct."""
    with warnings.catch_warnings():  # Python warns about '[[' and '&&' ...
        warnings.simplefilter("ignore", FutureWarning)
        re.compile(regex)  # ... but accepts all: the RE2 check is what refuses them
    quoted = regex.replace("\\", "\\\\")
    for op in ("=~", "!~"):
        with pytest.raises(SettingsError) as err:
            parse_settings({**PROM, "selector": f'pod{op}"{quoted}"'})
        assert err.value.key == "selector"
        assert construct in str(err.value) and "RE2" in str(err.value)
    assert parse_settings({**PROM, "selector": f'pod="{quoted}"'}).selector  # not a regex: fine


@pytest.mark.parametrize(
    "regex",
    [
        "vllm-.*",
        "(a|b)",
        "[0-9]+",
        "(?i)abc",
        "(?i:ab)c",
        "(?:a|b)+?",
        "(?P<name>llama)-[^-]+",
        "a{2}",
        "a{2,}?",
        "a{}",
        "[]a]",
        "[^]-]",
        "\\d+\\.\\w*",
        "\\123",
        "",
    ],
)
def test_selector_regex_in_re2_is_accepted(regex: str) -> None:
    quoted = regex.replace("\\", "\\\\")
    (m,) = parse_settings({**PROM, "selector": f'pod=~"{quoted}"'}).selector
    assert m == LabelMatcher("pod", "=~", regex)
    assert m.matches({"pod": "x"}) is (re.fullmatch(regex, "x") is not None)


def test_selector_regex_still_checked_by_python() -> None:
    """The Python-side matcher runs the regex too: invalid Python is refused."""
    for bad in ["(unclosed", "a{3,2}", "*a", "(?P<n>a)(?P<n>b)"]:
        quoted = bad.replace("\\", "\\\\")
        with pytest.raises(SettingsError) as err:
            parse_settings({**PROM, "selector": f'pod=~"{quoted}"'})
        assert err.value.key == "selector" and "regular expression for pod" in str(err.value)


def test_pod_selector_validation() -> None:
    assert validate_pod_selector("app.kubernetes.io/name=vllm,!canary") == (
        "app.kubernetes.io/name=vllm,!canary"
    )
    for bad in ["", "a=b=c", "a in ()", "-bad=x", "a=(b)"]:
        with pytest.raises(ValueError):
            validate_pod_selector(bad)


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("targetWaitingPerReplca", "targetWaitingPerReplica"),
        ("leadtimeseconds", "leadTimeSeconds"),
        ("forecastQuantil", "forecastQuantile"),
        ("prometheusAdress", "prometheusAddress"),
        ("scalerAdress", "scalerAddress"),
    ],
)
def test_unknown_key_suggests_the_nearest(typo: str, meant: str) -> None:
    """A misspelt or wrongly cased key is refused, naming it and the key it is nearest to."""
    with pytest.raises(SettingsError) as err:
        parse_settings({**PROM, typo: "1"})
    assert err.value.key == typo
    assert f"did you mean {meant!r}?" in str(err.value)


def test_unknown_key_far_from_every_key_suggests_nothing() -> None:
    """A key like no known one gets no guess, only where the keys are listed:
    a page of the repository that exists, whose named section lists every key
    (it once pointed to a README that did not exist)."""
    with pytest.raises(SettingsError) as err:
        parse_settings({**PROM, "colour": "blue"})
    assert err.value.key == "colour"
    message = str(err.value)
    assert "did you mean" not in message
    found = re.search(r"(docs/[\w/.-]+\.md), '([^']+)'", message)
    assert found is not None, message
    page = (Path(__file__).parents[2] / found[1]).read_text()
    section = page.split(f"## {found[2]}\n", 1)[1].split("\n## ", 1)[0]
    for key in METADATA_KEYS:
        assert f"`{key}`" in section, key


@pytest.mark.parametrize(
    ("bounds", "fallback"),
    [({"maxReplicas": "3"}, "5"), ({"minReplicas": "2", "maxReplicas": "6"}, "1")],
)
def test_fallback_replicas_out_of_range_names_the_values(
    bounds: dict[str, str], fallback: str
) -> None:
    """fallbackReplicas outside [minReplicas, maxReplicas]: the error holds all three values."""
    with pytest.raises(SettingsError) as err:
        parse_settings({**PROM, **bounds, "fallbackReplicas": fallback})
    lo, hi = bounds.get("minReplicas", "0"), bounds["maxReplicas"]
    assert err.value.key == "fallbackReplicas"
    assert f"{fallback} must lie within [minReplicas, maxReplicas] = [{lo}, {hi}]" in str(err.value)


def test_metadata_value_is_the_text_that_gives_the_setting() -> None:
    """Each scalar key's value as metadata text parses back to the same
    setting; an auto lead time is ``auto``; a list or an unset optional has
    no one text."""
    settings = parse_settings({"prometheusAddress": "http://p:9090", "minReplicas": "2"})
    assert metadata_value(settings, "minReplicas") == "2"
    assert metadata_value(settings, "targetKvCacheUsage") == "0.8"
    assert metadata_value(settings, "seasonalWanderSeconds") == "1800"
    assert metadata_value(settings, "leadTimeSeconds") == "auto"
    assert metadata_value(settings, "prewarm") == "false"
    assert metadata_value(settings, "fallbackReplicas") is None
    assert metadata_value(settings, "metricsUrls") is None
    with pytest.raises(KeyError, match="not a metadata key"):
        metadata_value(settings, "threshold")
    texts = {
        k: v
        for k in METADATA_KEYS
        if k not in ("prometheusAddress", "gatewayRateQuery")
        and (v := metadata_value(settings, k)) is not None
    }
    again = parse_settings({"prometheusAddress": "http://p:9090", **texts})
    assert again == settings
