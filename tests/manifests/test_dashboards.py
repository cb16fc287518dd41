"""Grafana dashboards: valid JSON, unique panel ids, a datasource variable and
no hard-coded datasource uid, an import input for the data source, every
per-namespace series filtered on ``$namespace``, metric names exactly the
scaler's contract, the generator (Grafana's SDK) and the committed JSON agree
byte for byte in any process, and every PromQL expression parses with
Prometheus' own parser (``promtool check rules``)."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from decision.tracker import SEASONAL_SIGNAL, SIGNAL
from tests.manifests.conftest import MANIFESTS, need_tool

GRAFANA = MANIFESTS / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))

# docs/contracts.md, "The scaler's own metrics".
CONTRACT_METRICS = {
    "prescaler_desired_replicas",
    "prescaler_ready_replicas",
    "prescaler_demand",
    "prescaler_forecast",
    "prescaler_forecast_abs_percentage_error",
    "prescaler_forecast_coverage",
    "prescaler_lead_time_seconds",
    "prescaler_decisions_total",
    "prescaler_source_up",
    "prescaler_grpc_request_duration_seconds",
    # backfilled by `prescaler hindsight` (docs/contracts.md, "prescaler hindsight")
    "prescaler_hindsight_replicas",
    "prescaler_hindsight_ready_replicas",
}
# vLLM series the Fleet dashboard reads (docs/facts.md and engine/metrics.py), V0 and V1 names.
VLLM_METRICS = {
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
    "vllm:time_to_first_token_seconds",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:num_preemptions_total",
}

# Values for Grafana's variables, so that expressions become plain PromQL.
GRAFANA_VARS = {
    "__rate_interval": "1m",
    "__interval": "30s",
    "__range": "6h",
    "namespace": "llm-serving",
    "scaledobject": "vllm-llama3-8b",
    "signal": "requests_per_s",
    "horizon": "300",
    "model": ".*",
    "datasource": "prometheus",
}


def substitute(expr: str) -> str:
    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        assert name in GRAFANA_VARS, f"unknown Grafana variable ${name} in {expr!r}"
        return GRAFANA_VARS[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, expr)


def promtool_run(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``promtool`` with ``args``, its output captured as text."""
    return subprocess.run(
        [promtool, *args], capture_output=True, text=True, timeout=60, check=False
    )


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def exprs(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in panels(dashboard) for t in p.get("targets", [])]


def variable_exprs(dashboard: dict[str, Any]) -> list[str]:
    """The series selector inside each ``label_values(selector, label)``."""
    out = []
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"]
            m = re.fullmatch(r"label_values\((.*), *(\w+)\)", query)
            assert m, query
            out.append(m.group(1))
    return out


def metric_names(expr: str) -> set[str]:
    names = set(re.findall(r"\b((?:prescaler_|vllm:)[A-Za-z0-9_:]*)", expr))
    return {re.sub(r"_(bucket|sum|count)$", "", n) for n in names}


def test_dashboards_exist() -> None:
    names = {p.name for p in DASHBOARDS}
    assert names == {"forecast-accuracy.json", "fleet.json"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_valid_json_with_unique_panel_ids(path: Path) -> None:
    dashboard = load(path)
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) for i in ids)
    assert dashboard["uid"] and dashboard["title"]
    for panel in panels(dashboard):
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_datasource_is_a_variable(path: Path) -> None:
    dashboard = load(path)
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"

    def walk(node: Any) -> Iterator[Any]:
        if isinstance(node, dict):
            if "datasource" in node and isinstance(node["datasource"], dict):
                yield node["datasource"]
            for v in node.values():
                yield from walk(v)
        elif isinstance(node, list):
            for v in node:
                yield from walk(v)

    refs = list(walk(dashboard))
    assert refs
    assert all(r == {"type": "prometheus", "uid": "${datasource}"} for r in refs), refs
    for panel in panels(dashboard):
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_metric_names_are_the_contract(path: Path) -> None:
    used = set().union(*(metric_names(e) for e in exprs(load(path)) + variable_exprs(load(path))))
    assert used <= CONTRACT_METRICS | VLLM_METRICS, used - CONTRACT_METRICS - VLLM_METRICS


# Series without a namespace label: one source serves many ScaledObjects, and
# the gRPC latency is per scaler process (docs/contracts.md).
UNNAMESPACED = {"prescaler_source_up", "prescaler_grpc_request_duration_seconds"}


def selectors(expr: str) -> list[tuple[str, str]]:
    """(metric, label matchers) for every series selector in an expression."""
    return [
        (re.sub(r"_(bucket|sum|count)$", "", m.group(1)), m.group(2) or "")
        for m in re.finditer(r"\b((?:prescaler_|vllm:)[A-Za-z0-9_:]*)(?:\{([^}]*)\})?", expr)
    ]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_namespaced_series_filters_on_the_namespace_variable(path: Path) -> None:
    d = load(path)
    unfiltered = [
        (metric, expr)
        for expr in exprs(d) + variable_exprs(d)[1:]  # the first lists the namespaces
        for metric, matchers in selectors(expr)
        if metric not in UNNAMESPACED and 'namespace="$namespace"' not in matchers
    ]
    assert not unfiltered, unfiltered


def test_namespace_filter_check_sees_a_missing_filter() -> None:
    assert selectors('sum(vllm:num_requests_waiting{model_name=~"$model"})') == [
        ("vllm:num_requests_waiting", 'model_name=~"$model"')
    ]
    assert selectors("rate(prescaler_grpc_request_duration_seconds_bucket[1m])") == [
        ("prescaler_grpc_request_duration_seconds", "")
    ]


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_imports_through_grafanas_ui(path: Path) -> None:
    """Grafana's Import fills each ``${INPUT}`` named in ``__inputs`` with the
    data source picked in its form; done here the same way on the raw text."""
    text = path.read_text(encoding="utf-8")
    inputs = json.loads(text)["__inputs"]
    assert inputs == [
        {
            "name": "DS_PROMETHEUS",
            "label": "Prometheus",
            "description": "The Prometheus that scrapes prescaler and vLLM",
            "type": "datasource",
            "pluginId": "prometheus",
            "pluginName": "Prometheus",
        }
    ]
    placeholders = set(re.findall(r"\$\{(DS_\w+)\}", text))
    assert placeholders == {i["name"] for i in inputs}
    imported = json.loads(text.replace("${DS_PROMETHEUS}", "picked-uid"))
    (ds_var,) = [v for v in imported["templating"]["list"] if v["type"] == "datasource"]
    assert ds_var["current"]["value"] == "picked-uid"
    assert "${DS_" not in json.dumps(imported)


def test_all_contract_metrics_are_shown() -> None:
    used: set[str] = set()
    for path in DASHBOARDS:
        used |= set().union(*(metric_names(e) for e in exprs(load(path))))
    assert used >= CONTRACT_METRICS, CONTRACT_METRICS - used


def _titles(name: str) -> list[str]:
    return [p["title"] for p in panels(load(GRAFANA / "dashboards" / name))]


def test_forecast_accuracy_panels() -> None:
    d = load(GRAFANA / "dashboards" / "forecast-accuracy.json")
    titles = " | ".join(_titles("forecast-accuracy.json"))
    for want in (
        "Forecast vs actual",
        "Absolute percentage error",
        "Quantile coverage",
        "Lead time in use",
    ):
        assert want in titles
    (fva,) = [
        p
        for p in panels(d)
        if p["type"] == "timeseries" and p["title"].startswith("Forecast vs actual")
    ]
    assert fva["repeat"] == "horizon"
    legends = {t["legendFormat"] for t in fva["targets"]}
    assert {"actual", "upper quantile", "lower quantile"} <= legends
    band = {o["matcher"]["options"]: o["properties"] for o in fva["fieldConfig"]["overrides"]}
    assert {"id": "custom.fillBelowTo", "value": "lower quantile"} in band["upper quantile"]


def test_signal_variable_leaves_out_the_seasonal_peak() -> None:
    """The forecast's seasonal peak (``seasonalPeakDays``) has no actual, error
    or coverage series, so the ``signal`` variable leaves it out: opened on
    it, every panel would be empty. Grafana keeps the values its ``/regex/``
    matches; Python reads this pattern as JavaScript does."""
    d = load(GRAFANA / "dashboards" / "forecast-accuracy.json")
    (variable,) = [v for v in d["templating"]["list"] if v["name"] == "signal"]
    m = re.fullmatch(r"/(.*)/", variable["regex"])
    assert m, variable["regex"]
    keeps = re.compile(m.group(1))
    assert keeps.search(SIGNAL)
    assert not keeps.search(SEASONAL_SIGNAL)


def test_forecast_actual_is_the_gateway_rate_where_known_else_vllms(tmp_path: Path) -> None:
    """For an object with gatewayRateQuery the forecast learns the gateway's
    rate, so the panel's actual is that series where it exists and vLLM's
    arrivals where it does not (a gap in the gateway's, an object without
    the key), never both: evaluated by Prometheus' own engine (``promtool
    test rules``) on series labelled as the scaler exports them."""
    promtool = need_tool("promtool")
    d = load(GRAFANA / "dashboards" / "forecast-accuracy.json")
    (actual,) = [
        t["expr"] for p in panels(d) for t in p.get("targets", []) if t["legendFormat"] == "actual"
    ]
    fed = substitute(actual)
    plain = fed.replace('scaledobject="vllm-llama3-8b"', 'scaledobject="plain"')
    assert plain != fed

    def demand(scaledobject: str, signal: str) -> str:
        return (
            f'prescaler_demand{{job="prescaler",namespace="llm-serving",'
            f'scaledobject="{scaledobject}",signal="{signal}"}}'
        )

    # One sample a minute; ``stale``: the gateway's rate unknown, no series.
    series = [
        (demand("vllm-llama3-8b", "gateway_requests_per_s"), "5 stale 7"),
        (demand("vllm-llama3-8b", "requests_per_s"), "0 1 2"),
        (demand("plain", "requests_per_s"), "3 4 6"),
    ]
    want = [
        (fed, 0, "gateway_requests_per_s", 5),
        (fed, 1, "requests_per_s", 1),
        (fed, 2, "gateway_requests_per_s", 7),
        *((plain, m, "requests_per_s", v) for m, v in ((0, 3), (1, 4), (2, 6))),
    ]
    tests = [
        {
            "expr": expr,
            "eval_time": f"{minute}m",
            "exp_samples": [
                {
                    "labels": demand("plain" if expr is plain else "vllm-llama3-8b", signal),
                    "value": value,
                }
            ],
        }
        for expr, minute, signal, value in want
    ]
    unit = tmp_path / "actual.test.yml"
    unit.write_text(
        yaml.safe_dump(
            {
                "rule_files": [],
                "evaluation_interval": "1m",
                "tests": [
                    {
                        "interval": "1m",
                        "input_series": [{"series": s, "values": v} for s, v in series],
                        "promql_expr_test": tests,
                    }
                ],
            }
        )
    )
    done = promtool_run(promtool, "test", "rules", str(unit))
    assert done.returncode == 0, done.stdout + done.stderr


def test_fleet_over_hindsight_compares_only_where_both_exist(tmp_path: Path) -> None:
    """The schedule was backfilled for the last hour of a 6 h range only: the
    ratio is the live fleet's mean over that hour (6) against the schedule's
    (3), not the live fleet's mean over 6 h (mostly 12) against the schedule's
    hour; evaluated by Prometheus' own engine (``promtool test rules``), with
    the live series labelled as a scraped scaler exports them."""
    promtool = need_tool("promtool")
    d = load(GRAFANA / "dashboards" / "fleet.json")
    (ratio,) = [
        t["expr"]
        for p in panels(d)
        if p.get("title") == "Live fleet / hindsight schedule"
        for t in p.get("targets", [])
    ]
    so = 'namespace="llm-serving",scaledobject="vllm-llama3-8b"'
    series = [
        # one sample a minute: 12 ready for 5 h, then 6 for the last hour
        (f'prescaler_ready_replicas{{job="prescaler",instance="a:9091",{so}}}', "12x299 6x60"),
        # backfilled for the last hour only, without job or instance
        (f"prescaler_hindsight_ready_replicas{{{so}}}", "_x300 3x60"),
    ]
    unit = tmp_path / "ratio.test.yml"
    unit.write_text(
        yaml.safe_dump(
            {
                "rule_files": [],
                "evaluation_interval": "1m",
                "tests": [
                    {
                        "interval": "1m",
                        "input_series": [{"series": s, "values": v} for s, v in series],
                        "promql_expr_test": [
                            {
                                "expr": substitute(ratio),
                                "eval_time": "360m",
                                "exp_samples": [{"labels": f"{{{so}}}", "value": 2}],
                            }
                        ],
                    }
                ],
            }
        )
    )
    done = promtool_run(promtool, "test", "rules", str(unit))
    assert done.returncode == 0, done.stdout + done.stderr


def test_fleet_panels() -> None:
    d = load(GRAFANA / "dashboards" / "fleet.json")
    titles = " | ".join(_titles("fleet.json"))
    for want in (
        "Desired vs ready replicas",
        "Queue",
        "KV cache usage",
        "Time to first token",
        "Decisions by reason",
        "Source health",
        "Live fleet vs the hindsight schedule",
        "Live fleet / hindsight schedule",
    ):
        assert want in titles
    assert any(
        "histogram_quantile(0.99" in e and "vllm:time_to_first_token_seconds_bucket" in e
        for e in exprs(d)
    )


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("grafana_generate", GRAFANA / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generator_matches_committed_json() -> None:
    gen = _generator()
    assert set(gen.DASHBOARDS) == {p.name for p in DASHBOARDS}
    for name, build in gen.DASHBOARDS.items():
        committed = (GRAFANA / "dashboards" / name).read_text(encoding="utf-8")
        assert gen.render(build()) == committed, (
            f"{name} is stale: run python manifests/grafana/generate.py"
        )
    assert gen.main(["--check"]) == 0


@pytest.mark.parametrize("hash_seed", ["0", "1", "4242"])
def test_generator_is_deterministic_across_processes(hash_seed: str) -> None:
    # A fresh interpreter with another hash seed (set iteration order) writes
    # the same bytes as the committed files.
    done = subprocess.run(
        [sys.executable, str(GRAFANA / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"PYTHONHASHSEED": hash_seed, "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr


def test_every_expression_parses_with_promtool(tmp_path: Path) -> None:
    promtool = need_tool("promtool")
    rules = []
    for path in DASHBOARDS:
        d = load(path)
        for i, expr in enumerate(exprs(d) + variable_exprs(d)):
            rules.append(
                {"record": f"dashboard:{path.stem.replace('-', '_')}:{i}", "expr": substitute(expr)}
            )
    assert len(rules) > 20
    rules_file = tmp_path / "dashboards.rules.yml"
    rules_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    done = promtool_run(promtool, "check", "rules", str(rules_file))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(rules)} rules found" in done.stdout


def test_promtool_rejects_a_broken_expression(tmp_path: Path) -> None:
    # The check above would be worthless if promtool accepted anything.
    promtool = need_tool("promtool")
    rules_file = tmp_path / "bad.rules.yml"
    rules_file.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "g",
                        "rules": [
                            {
                                "record": "bad:x",
                                "expr": substitute("sum(rate(vllm:x[$__rate_interval])"),
                            }
                        ],
                    }
                ]
            }
        )
    )
    done = promtool_run(promtool, "check", "rules", str(rules_file))
    assert done.returncode != 0
