#!/usr/bin/env python3
"""Generate prescaler's two Grafana dashboards as JSON.

Why a script: the two dashboards share variables, label filters and panel
boilerplate, and the metric names must match the scaler's contract
(docs/contracts.md) exactly. Writing them once here keeps them
consistent; the JSON output is committed next to it (kustomize turns it into
ConfigMaps) and a test checks that the committed JSON is what this script
produces.

    python manifests/grafana/generate.py          # rewrite dashboards/*.json
    python manifests/grafana/generate.py --check  # exit 1 if they differ

No datasource uid is hard-coded: every panel and variable uses the
``${datasource}`` template variable.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
OUT_DIR = HERE / "dashboards"

DS: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}

# Label filters. The scaler labels its per-object series with the
# ScaledObject's namespace and name; prescaler_source_up (one source serves
# many ScaledObjects) and prescaler_grpc_request_duration_seconds carry only
# `source` / `method`, so those panels are not filtered by ScaledObject.
# vLLM series are told apart by `model_name` (each Deployment serves a
# distinct --served-model-name).
SO = 'namespace="$namespace",scaledobject="$scaledobject"'
MODEL = 'model_name=~"$model"'

# prescaler_forecast_abs_percentage_error and prescaler_forecast_coverage are
# fractions (0.25 = 25 %), like vLLM's *_perc gauges.
FRACTION_UNIT = "percentunit"

Json = dict[str, Any]


class _Ids:
    """Hands out unique, stable panel ids in creation order."""

    def __init__(self) -> None:
        self._next = 0

    def __call__(self) -> int:
        self._next += 1
        return self._next


def _target(expr: str, legend: str, ref: str, *, instant: bool = False) -> Json:
    return {
        "datasource": DS,
        "expr": expr,
        "legendFormat": legend,
        "refId": ref,
        "range": not instant,
        "instant": instant,
    }


def _targets(*pairs: tuple[str, str], instant: bool = False) -> list[Json]:
    return [
        _target(expr, legend, chr(ord("A") + i), instant=instant)
        for i, (expr, legend) in enumerate(pairs)
    ]


def _timeseries(
    pid: int,
    title: str,
    grid: tuple[int, int, int, int],
    targets: list[Json],
    *,
    unit: str = "short",
    description: str = "",
    bars: bool = False,
    stack: bool = False,
    overrides: list[Json] | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
) -> Json:
    x, y, w, h = grid
    custom: Json = {
        "drawStyle": "bars" if bars else "line",
        "lineWidth": 1 if bars else 2,
        "fillOpacity": 60 if bars else 10,
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"mode": "normal" if stack else "none", "group": "A"},
    }
    defaults: Json = {"unit": unit, "custom": custom}
    if minimum is not None:
        defaults["min"] = minimum
    if maximum is not None:
        defaults["max"] = maximum
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": defaults, "overrides": overrides or []},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": targets,
    }


def _stat(
    pid: int,
    title: str,
    grid: tuple[int, int, int, int],
    targets: list[Json],
    *,
    unit: str = "short",
    description: str = "",
    mappings: list[Json] | None = None,
) -> Json:
    x, y, w, h = grid
    return {
        "id": pid,
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit, "mappings": mappings or []}, "overrides": []},
        "options": {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "area",
            "textMode": "auto",
        },
        "targets": targets,
    }


def _row(pid: int, title: str, y: int) -> Json:
    return {
        "id": pid,
        "type": "row",
        "title": title,
        "collapsed": False,
        "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
        "panels": [],
    }


def _datasource_var() -> Json:
    return {
        "type": "datasource",
        "name": "datasource",
        "label": "Data source",
        "query": "prometheus",
        "regex": "",
        "hide": 0,
        "refresh": 1,
        "current": {},
        "options": [],
    }


def _query_var(
    name: str, label: str, query: str, *, multi: bool = False, include_all: bool = False
) -> Json:
    var: Json = {
        "type": "query",
        "name": name,
        "label": label,
        "datasource": DS,
        "definition": query,
        "query": {"query": query, "refId": f"{name}-variable"},
        "refresh": 2,
        "sort": 3,
        "regex": "",
        "hide": 0,
        "multi": multi,
        "includeAll": include_all,
        "current": {},
        "options": [],
    }
    if include_all:
        var["allValue"] = ".*"
    return var


def _scaledobject_vars() -> list[Json]:
    return [
        _datasource_var(),
        _query_var("namespace", "Namespace", "label_values(prescaler_desired_replicas, namespace)"),
        _query_var(
            "scaledobject",
            "ScaledObject",
            'label_values(prescaler_desired_replicas{namespace="$namespace"}, scaledobject)',
        ),
    ]


def _dashboard(uid: str, title: str, variables: list[Json], panels: list[Json]) -> Json:
    return {
        "uid": uid,
        "title": title,
        "tags": ["prescaler", "vllm", "keda"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": variables},
        "panels": panels,
    }


def forecast_accuracy() -> Json:
    """What the scaler forecast, what came, and how wrong it was."""
    ids = _Ids()
    sig = f'{SO},signal="$signal"'
    fc = f'{sig},horizon_seconds="$horizon"'
    variables = [
        *_scaledobject_vars(),
        _query_var(
            "signal",
            "Signal",
            f"label_values(prescaler_forecast{{{SO}}}, signal)",
        ),
        _query_var(
            "horizon",
            "Horizon (s)",
            f"label_values(prescaler_forecast{{{sig}}}, horizon_seconds)",
            multi=True,
            include_all=True,
        ),
    ]
    band: list[Json] = [
        {
            "matcher": {"id": "byName", "options": "upper quantile"},
            "properties": [
                {"id": "custom.fillBelowTo", "value": "lower quantile"},
                {"id": "custom.lineWidth", "value": 0},
                {"id": "custom.fillOpacity", "value": 25},
            ],
        },
        {
            "matcher": {"id": "byName", "options": "lower quantile"},
            "properties": [
                {"id": "custom.lineWidth", "value": 0},
                {"id": "custom.fillOpacity", "value": 0},
            ],
        },
        {
            "matcher": {"id": "byName", "options": "actual"},
            "properties": [
                {"id": "custom.lineWidth", "value": 3},
                {"id": "color", "value": {"mode": "fixed", "fixedColor": "orange"}},
            ],
        },
    ]
    forecast_vs_actual = _timeseries(
        ids(),
        "Forecast vs actual, horizon ${horizon} s",
        (0, 1, 24, 9),
        _targets(
            (f"prescaler_demand{{{sig}}}", "actual"),
            (f"max(prescaler_forecast{{{fc}}} offset ${{horizon}}s)", "upper quantile"),
            (f"min(prescaler_forecast{{{fc}}} offset ${{horizon}}s)", "lower quantile"),
            (f"prescaler_forecast{{{fc}}} offset ${{horizon}}s", "q{{quantile}}"),
        ),
        description=(
            "Each forecast is shifted forward by its horizon (`offset`), so at time t "
            "it shows what the scaler predicted for t at t - horizon, next to what "
            "came (`prescaler_demand`). The band spans the lowest to the highest "
            "exported quantile."
        ),
        overrides=band,
    )
    forecast_vs_actual["repeat"] = "horizon"
    forecast_vs_actual["repeatDirection"] = "v"
    panels = [
        _row(ids(), "Forecast vs actual (one panel per horizon)", 0),
        forecast_vs_actual,
        _row(ids(), "Error and calibration", 10),
        _timeseries(
            ids(),
            "Absolute percentage error by horizon",
            (0, 11, 12, 8),
            _targets(
                (f"prescaler_forecast_abs_percentage_error{{{sig}}}", "{{horizon_seconds}} s"),
            ),
            unit=FRACTION_UNIT,
            minimum=0,
            description="|forecast - actual| / actual per horizon, as exported by the scaler.",
        ),
        _stat(
            ids(),
            "Mean absolute percentage error over the time range",
            (12, 11, 12, 8),
            _targets(
                (
                    "avg by (horizon_seconds) (avg_over_time("
                    f"prescaler_forecast_abs_percentage_error{{{sig}}}[$__range]))",
                    "{{horizon_seconds}} s",
                ),
                instant=True,
            ),
            unit=FRACTION_UNIT,
        ),
        _timeseries(
            ids(),
            "Quantile coverage",
            (0, 19, 12, 8),
            _targets((f"prescaler_forecast_coverage{{{sig}}}", "q{{quantile}}")),
            unit=FRACTION_UNIT,
            minimum=0,
            maximum=1,
            description=(
                "Share of actuals at or below each forecast quantile. A calibrated "
                "q0.9 sits near 0.9: lower means the scaler under-provisions bursts, "
                "higher means it pays for headroom it does not need."
            ),
        ),
        _stat(
            ids(),
            "Lead time in use",
            (12, 19, 6, 8),
            _targets((f"prescaler_lead_time_seconds{{{SO}}}", "lead time")),
            unit="s",
            description="Node + pod start + model load: how far ahead the scaler sizes the fleet.",
        ),
        _timeseries(
            ids(),
            "Lead time over time",
            (18, 19, 6, 8),
            _targets((f"prescaler_lead_time_seconds{{{SO}}}", "lead time")),
            unit="s",
            minimum=0,
        ),
    ]
    return _dashboard(
        "prescaler-forecast-accuracy", "prescaler / Forecast accuracy", variables, panels
    )


def fleet() -> Json:
    """Replicas, load on vLLM, latency, and why the scaler chose each count."""
    ids = _Ids()
    variables = [
        *_scaledobject_vars(),
        _query_var(
            "model",
            "vLLM model",
            "label_values(vllm:num_requests_running, model_name)",
            multi=True,
            include_all=True,
        ),
    ]
    up_mappings = [
        {
            "type": "value",
            "options": {
                "0": {"text": "down", "color": "red", "index": 0},
                "1": {"text": "up", "color": "green", "index": 1},
            },
        }
    ]
    kv = "{agg}(vllm:kv_cache_usage_perc{{{m}}}) or {agg}(vllm:gpu_cache_usage_perc{{{m}}})"

    def ttft(q: str) -> str:
        return (
            f"histogram_quantile({q}, sum by (le) "
            f"(rate(vllm:time_to_first_token_seconds_bucket{{{MODEL}}}[$__rate_interval])))"
        )

    panels = [
        _stat(
            ids(),
            "Desired replicas",
            (0, 0, 6, 4),
            _targets((f"prescaler_desired_replicas{{{SO}}}", "desired")),
        ),
        _stat(
            ids(),
            "Ready replicas",
            (6, 0, 6, 4),
            _targets((f"prescaler_ready_replicas{{{SO}}}", "ready")),
        ),
        _stat(
            ids(),
            "Lead time",
            (12, 0, 6, 4),
            _targets((f"prescaler_lead_time_seconds{{{SO}}}", "lead time")),
            unit="s",
        ),
        _stat(
            ids(),
            "Sources up",
            (18, 0, 6, 4),
            _targets(("min(prescaler_source_up)", "all sources")),
            mappings=up_mappings,
        ),
        _timeseries(
            ids(),
            "Desired vs ready replicas",
            (0, 4, 12, 8),
            _targets(
                (f"prescaler_desired_replicas{{{SO}}}", "desired (scaler)"),
                (f"prescaler_ready_replicas{{{SO}}}", "ready"),
            ),
            minimum=0,
            description="The gap is pods starting: node launch, image pull, model load.",
        ),
        _timeseries(
            ids(),
            "Queue",
            (12, 4, 12, 8),
            _targets(
                (f"sum(vllm:num_requests_waiting{{{MODEL}}})", "waiting"),
                (f"sum(vllm:num_requests_running{{{MODEL}}})", "running"),
            ),
            minimum=0,
        ),
        _timeseries(
            ids(),
            "KV cache usage",
            (0, 12, 12, 8),
            _targets(
                (kv.format(agg="max", m=MODEL), "max over replicas"),
                (kv.format(agg="avg", m=MODEL), "mean over replicas"),
            ),
            unit="percentunit",
            minimum=0,
            maximum=1,
            description=(
                "vLLM >= 0.9.2 exports kv_cache_usage_perc; older (and Neuron) images "
                "gpu_cache_usage_perc."
            ),
        ),
        _timeseries(
            ids(),
            "Time to first token",
            (12, 12, 12, 8),
            _targets((ttft("0.99"), "p99"), (ttft("0.5"), "p50")),
            unit="s",
            minimum=0,
            description="From vLLM's histogram vllm:time_to_first_token_seconds, all replicas.",
        ),
        _timeseries(
            ids(),
            "Token throughput",
            (0, 20, 12, 8),
            _targets(
                (f"sum(rate(vllm:prompt_tokens_total{{{MODEL}}}[$__rate_interval]))", "prompt"),
                (
                    f"sum(rate(vllm:generation_tokens_total{{{MODEL}}}[$__rate_interval]))",
                    "generation",
                ),
            ),
            unit="short",
            minimum=0,
            stack=True,
        ),
        _timeseries(
            ids(),
            "Demand signals (scaler's view)",
            (12, 20, 12, 8),
            _targets((f"prescaler_demand{{{SO}}}", "{{signal}}")),
            minimum=0,
        ),
        _timeseries(
            ids(),
            "Decisions by reason",
            (0, 28, 12, 8),
            _targets(
                (
                    f"sum by (reason) (increase(prescaler_decisions_total{{{SO}}}"
                    "[$__rate_interval]))",
                    "{{reason}}",
                )
            ),
            bars=True,
            stack=True,
            minimum=0,
            description=(
                "Which component set the replica count (reactive, predictive, hold, fallback...)."
            ),
        ),
        _timeseries(
            ids(),
            "Source health",
            (12, 28, 12, 8),
            _targets(("prescaler_source_up", "{{source}}")),
            minimum=0,
            maximum=1,
            description=(
                "1 while a data source answers; missing data holds replicas, never lowers them."
            ),
        ),
        _timeseries(
            ids(),
            "Preemptions",
            (0, 36, 12, 8),
            _targets(
                (
                    f"sum(rate(vllm:num_preemptions_total{{{MODEL}}}[$__rate_interval]))",
                    "preemptions/s",
                )
            ),
            minimum=0,
        ),
        _timeseries(
            ids(),
            "Scaler gRPC latency p99 by method",
            (12, 36, 12, 8),
            _targets(
                (
                    "histogram_quantile(0.99, sum by (le, method) (rate("
                    "prescaler_grpc_request_duration_seconds_bucket[$__rate_interval])))",
                    "{{method}}",
                )
            ),
            unit="s",
            minimum=0,
        ),
    ]
    return _dashboard("prescaler-fleet", "prescaler / Fleet", variables, panels)


DASHBOARDS = {
    "forecast-accuracy.json": forecast_accuracy,
    "fleet.json": fleet,
}


def render(dashboard: Json) -> str:
    """Stable text form: what is committed and what the test compares."""
    return json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, exit 1 on drift")
    args = parser.parse_args(argv)
    stale = []
    for name, build in DASHBOARDS.items():
        path = OUT_DIR / name
        text = render(build())
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"out of date: {', '.join(stale)}; run {Path(__file__).name}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
