#!/usr/bin/env python3
"""Generate prescaler's two Grafana dashboards as JSON, with Grafana's own SDK.

Why a script: the two dashboards share variables, label filters and panel
styling, and the metric names must match the scaler's contract
(docs/contracts.md) exactly. Why ``grafana-foundation-sdk`` (Grafana's typed
builders, a dev extra): the panel, target and variable fields are checked by
types generated from Grafana's own schema instead of hand-written JSON. The
JSON output is committed next to this script (kustomize turns it into
ConfigMaps) and a test checks that it is what this script produces.

    python manifests/grafana/generate.py          # rewrite dashboards/*.json
    python manifests/grafana/generate.py --check  # exit 1 if they differ

No datasource uid is hard-coded: every panel, target and variable uses the
``${datasource}`` variable, whose initial value is the import input
``DS_PROMETHEUS`` (declared in ``__inputs``, which the SDK does not model),
so Grafana's Import asks for the Prometheus data source.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as common_builder
from grafana_foundation_sdk.builders import dashboard as dashboard_builder
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model

HERE = Path(__file__).resolve().parent
OUT_DIR = HERE / "dashboards"

DS = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
# The import input: Grafana's Import replaces "${DS_PROMETHEUS}" everywhere in
# the JSON with the data source picked in its form.
DS_INPUT = "DS_PROMETHEUS"

# Label filters. The scaler labels its per-object series with the
# ScaledObject's namespace and name; prescaler_source_up (one source serves
# many ScaledObjects) and prescaler_grpc_request_duration_seconds carry only
# `source` / `method`, so those panels are not filtered by ScaledObject.
# vLLM series carry the pod's namespace (a PodMonitor, or the scrape job's
# relabelling) and are told apart by `model_name` (each Deployment serves a
# distinct --served-model-name).
SO = 'namespace="$namespace",scaledobject="$scaledobject"'
VLLM = 'namespace="$namespace",model_name=~"$model"'

# prescaler_forecast_abs_percentage_error and prescaler_forecast_coverage are
# fractions (0.25 = 25 %), like vLLM's *_perc gauges.
FRACTION_UNIT = "percentunit"

Json = dict[str, Any]
Query = tuple[str, str]  # (PromQL, legend)


def _targets(
    queries: Sequence[Query], *, instant: bool = False
) -> list[cogbuilder.Builder[cogvariants.Dataquery]]:
    """One Prometheus target per query, refIds A, B, C... in order."""
    out: list[cogbuilder.Builder[cogvariants.Dataquery]] = []
    for i, (expr, legend) in enumerate(queries):
        target = (
            prometheus.Dataquery()
            .datasource(DS)
            .expr(expr)
            .legend_format(legend)
            .ref_id(chr(ord("A") + i))
        )
        out.append(target.instant() if instant else target.range())
    return out


def _timeseries(
    title: str,
    size: tuple[int, int],
    queries: Sequence[Query],
    *,
    unit: str = "short",
    description: str = "",
    bars: bool = False,
    stack: bool = False,
    minimum: float | None = None,
    maximum: float | None = None,
) -> timeseries.Panel:
    """A time series panel; ``size`` is (width, height) in grid units, placed by the SDK."""
    width, height = size
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .span(width)
        .height(height)
        .unit(unit)
        .targets(_targets(queries))
        .draw_style(common.GraphDrawStyle.BARS if bars else common.GraphDrawStyle.LINE)
        .line_width(1 if bars else 2)
        .fill_opacity(60 if bars else 10)
        .show_points(common.VisibilityMode.NEVER)
        .span_nulls(False)
        .stacking(
            common_builder.StackingConfig()
            .mode(common.StackingMode.NORMAL if stack else common.StackingMode.NONE)
            .group("A")
        )
        .legend(
            common_builder.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(
            common_builder.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )
    if minimum is not None:
        panel = panel.min(minimum)
    if maximum is not None:
        panel = panel.max(maximum)
    return panel


def _stat(
    title: str,
    size: tuple[int, int],
    queries: Sequence[Query],
    *,
    unit: str = "short",
    description: str = "",
    mappings: list[model.ValueMapping] | None = None,
    instant: bool = False,
) -> stat.Panel:
    """A single-value panel showing each series' last value."""
    width, height = size
    return (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .span(width)
        .height(height)
        .unit(unit)
        .mappings(mappings or [])
        .targets(_targets(queries, instant=instant))
        .reduce_options(
            common_builder.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False)
        )
        .color_mode(common.BigValueColorMode.VALUE)
        .graph_mode(common.BigValueGraphMode.AREA)
        .text_mode(common.BigValueTextMode.AUTO)
    )


def _query_variable(
    name: str, label: str, query: str, *, multi: bool = False, include_all: bool = False
) -> dashboard_builder.QueryVariable:
    variable = (
        dashboard_builder.QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query({"query": query, "refId": f"{name}-variable"})
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.NUMERICAL_ASC)
        .multi(multi)
        .include_all(include_all)
    )
    return variable.all_value(".*") if include_all else variable


def _datasource_variable() -> dashboard_builder.DatasourceVariable:
    placeholder = f"${{{DS_INPUT}}}"
    return (
        dashboard_builder.DatasourceVariable("datasource")
        .label("Data source")
        .type("prometheus")
        .current(model.VariableOption(selected=True, text=placeholder, value=placeholder))
    )


def _scaledobject_variables() -> list[dashboard_builder.QueryVariable]:
    return [
        _query_variable(
            "namespace", "Namespace", "label_values(prescaler_desired_replicas, namespace)"
        ),
        _query_variable(
            "scaledobject",
            "ScaledObject",
            'label_values(prescaler_desired_replicas{namespace="$namespace"}, scaledobject)',
        ),
    ]


def _dashboard(uid: str, title: str) -> dashboard_builder.Dashboard:
    return (
        dashboard_builder.Dashboard(title)
        .uid(uid)
        .tags(["prescaler", "vllm", "keda"])
        .editable()
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .version(1)
        .with_variable(_datasource_variable())
    )


def _to_json(built: model.Dashboard) -> Json:
    """The SDK's model as plain JSON, plus the import inputs it does not model."""
    data: Json = json.loads(json.dumps(built, cls=JSONEncoder))
    data["__inputs"] = [
        {
            "name": DS_INPUT,
            "label": "Prometheus",
            "description": "The Prometheus that scrapes prescaler and vLLM",
            "type": "datasource",
            "pluginId": "prometheus",
            "pluginName": "Prometheus",
        }
    ]
    return data


def forecast_accuracy() -> Json:
    """What the scaler forecast, what came, and how wrong it was."""
    sig = f'{SO},signal="$signal"'
    fc = f'{sig},horizon_seconds="$horizon"'
    forecast_vs_actual = (
        _timeseries(
            "Forecast vs actual, horizon ${horizon} s",
            (24, 9),
            [
                (f"prescaler_demand{{{sig}}}", "actual"),
                (f"max(prescaler_forecast{{{fc}}} offset ${{horizon}}s)", "upper quantile"),
                (f"min(prescaler_forecast{{{fc}}} offset ${{horizon}}s)", "lower quantile"),
                (f"prescaler_forecast{{{fc}}} offset ${{horizon}}s", "q{{quantile}}"),
            ],
            description=(
                "Each forecast is shifted forward by its horizon (`offset`), so at time t "
                "it shows what the scaler predicted for t at t - horizon, next to what "
                "came (`prescaler_demand`). The band spans the lowest to the highest "
                "exported quantile."
            ),
        )
        .override_by_name(
            "upper quantile",
            [
                model.DynamicConfigValue(id_val="custom.fillBelowTo", value="lower quantile"),
                model.DynamicConfigValue(id_val="custom.lineWidth", value=0),
                model.DynamicConfigValue(id_val="custom.fillOpacity", value=25),
            ],
        )
        .override_by_name(
            "lower quantile",
            [
                model.DynamicConfigValue(id_val="custom.lineWidth", value=0),
                model.DynamicConfigValue(id_val="custom.fillOpacity", value=0),
            ],
        )
        .override_by_name(
            "actual",
            [
                model.DynamicConfigValue(id_val="custom.lineWidth", value=3),
                model.DynamicConfigValue(
                    id_val="color", value={"mode": "fixed", "fixedColor": "orange"}
                ),
            ],
        )
        .repeat("horizon")
        .repeat_direction("v")
    )
    panels: list[Any] = [
        dashboard_builder.Row("Forecast vs actual (one panel per horizon)"),
        forecast_vs_actual,
        dashboard_builder.Row("Error and calibration"),
        _timeseries(
            "Absolute percentage error by horizon",
            (12, 8),
            [(f"prescaler_forecast_abs_percentage_error{{{sig}}}", "{{horizon_seconds}} s")],
            unit=FRACTION_UNIT,
            minimum=0,
            description="|forecast - actual| / actual per horizon, as exported by the scaler.",
        ),
        _stat(
            "Mean absolute percentage error over the time range",
            (12, 8),
            [
                (
                    "avg by (horizon_seconds) (avg_over_time("
                    f"prescaler_forecast_abs_percentage_error{{{sig}}}[$__range]))",
                    "{{horizon_seconds}} s",
                )
            ],
            unit=FRACTION_UNIT,
            instant=True,
        ),
        _timeseries(
            "Quantile coverage",
            (12, 8),
            [(f"prescaler_forecast_coverage{{{sig}}}", "q{{quantile}}")],
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
            "Lead time in use",
            (6, 8),
            [(f"prescaler_lead_time_seconds{{{SO}}}", "lead time")],
            unit="s",
            description="Node + pod start + model load: how far ahead the scaler sizes the fleet.",
        ),
        _timeseries(
            "Lead time over time",
            (6, 8),
            [(f"prescaler_lead_time_seconds{{{SO}}}", "lead time")],
            unit="s",
            minimum=0,
        ),
    ]
    variables = [
        *_scaledobject_variables(),
        _query_variable("signal", "Signal", f"label_values(prescaler_forecast{{{SO}}}, signal)"),
        _query_variable(
            "horizon",
            "Horizon (s)",
            f"label_values(prescaler_forecast{{{sig}}}, horizon_seconds)",
            multi=True,
            include_all=True,
        ),
    ]
    return _assemble(
        _dashboard("prescaler-forecast-accuracy", "prescaler / Forecast accuracy"),
        variables,
        panels,
    )


def fleet() -> Json:
    """Replicas, load on vLLM, latency, and why the scaler chose each count."""
    up_mappings: list[model.ValueMapping] = [
        model.ValueMap(
            options={
                "0": model.ValueMappingResult(text="down", color="red", index=0),
                "1": model.ValueMappingResult(text="up", color="green", index=1),
            }
        )
    ]

    def kv(agg: str) -> str:
        return (
            f"{agg}(vllm:kv_cache_usage_perc{{{VLLM}}}) or "
            f"{agg}(vllm:gpu_cache_usage_perc{{{VLLM}}})"
        )

    def ttft(q: str) -> str:
        return (
            f"histogram_quantile({q}, sum by (le) "
            f"(rate(vllm:time_to_first_token_seconds_bucket{{{VLLM}}}[$__rate_interval])))"
        )

    def vllm_rate(counter: str) -> str:
        return f"sum(rate({counter}{{{VLLM}}}[$__rate_interval]))"

    panels: list[Any] = [
        _stat("Desired replicas", (6, 4), [(f"prescaler_desired_replicas{{{SO}}}", "desired")]),
        _stat("Ready replicas", (6, 4), [(f"prescaler_ready_replicas{{{SO}}}", "ready")]),
        _stat(
            "Lead time", (6, 4), [(f"prescaler_lead_time_seconds{{{SO}}}", "lead time")], unit="s"
        ),
        _stat(
            "Sources up",
            (6, 4),
            [("min(prescaler_source_up)", "all sources")],
            mappings=up_mappings,
        ),
        _timeseries(
            "Desired vs ready replicas",
            (12, 8),
            [
                (f"prescaler_desired_replicas{{{SO}}}", "desired (scaler)"),
                (f"prescaler_ready_replicas{{{SO}}}", "ready"),
            ],
            minimum=0,
            description="The gap is pods starting: node launch, image pull, model load.",
        ),
        _timeseries(
            "Queue",
            (12, 8),
            [
                (f"sum(vllm:num_requests_waiting{{{VLLM}}})", "waiting"),
                (f"sum(vllm:num_requests_running{{{VLLM}}})", "running"),
            ],
            minimum=0,
        ),
        _timeseries(
            "KV cache usage",
            (12, 8),
            [(kv("max"), "max over replicas"), (kv("avg"), "mean over replicas")],
            unit="percentunit",
            minimum=0,
            maximum=1,
            description=(
                "vLLM >= 0.9.2 exports kv_cache_usage_perc; older (and Neuron) images "
                "gpu_cache_usage_perc."
            ),
        ),
        _timeseries(
            "Time to first token",
            (12, 8),
            [(ttft("0.99"), "p99"), (ttft("0.5"), "p50")],
            unit="s",
            minimum=0,
            description="From vLLM's histogram vllm:time_to_first_token_seconds, all replicas.",
        ),
        _timeseries(
            "Token throughput",
            (12, 8),
            [
                (vllm_rate("vllm:prompt_tokens_total"), "prompt"),
                (vllm_rate("vllm:generation_tokens_total"), "generation"),
            ],
            minimum=0,
            stack=True,
        ),
        _timeseries(
            "Demand signals (scaler's view)",
            (12, 8),
            [(f"prescaler_demand{{{SO}}}", "{{signal}}")],
            minimum=0,
        ),
        _timeseries(
            "Decisions by reason",
            (12, 8),
            [
                (
                    f"sum by (reason) (increase(prescaler_decisions_total{{{SO}}}"
                    "[$__rate_interval]))",
                    "{{reason}}",
                )
            ],
            bars=True,
            stack=True,
            minimum=0,
            description=(
                "Which component set the replica count (reactive, predictive, hold, fallback...)."
            ),
        ),
        _timeseries(
            "Source health",
            (12, 8),
            [("prescaler_source_up", "{{source}}")],
            minimum=0,
            maximum=1,
            description=(
                "1 while a data source answers; missing data holds replicas, never lowers them."
            ),
        ),
        _timeseries(
            "Preemptions",
            (12, 8),
            [(vllm_rate("vllm:num_preemptions_total"), "preemptions/s")],
            minimum=0,
        ),
        _timeseries(
            "Scaler gRPC latency p99 by method",
            (12, 8),
            [
                (
                    "histogram_quantile(0.99, sum by (le, method) (rate("
                    "prescaler_grpc_request_duration_seconds_bucket[$__rate_interval])))",
                    "{{method}}",
                )
            ],
            unit="s",
            minimum=0,
        ),
    ]
    variables = [
        *_scaledobject_variables(),
        _query_variable(
            "model",
            "vLLM model",
            'label_values(vllm:num_requests_running{namespace="$namespace"}, model_name)',
            multi=True,
            include_all=True,
        ),
    ]
    return _assemble(_dashboard("prescaler-fleet", "prescaler / Fleet"), variables, panels)


def _assemble(
    board: dashboard_builder.Dashboard, variables: Sequence[Any], panels: Sequence[Any]
) -> Json:
    """Add variables and panels in order (the SDK lays them out), then number the panels."""
    for variable in variables:
        board = board.with_variable(variable)
    for panel in panels:
        if isinstance(panel, dashboard_builder.Row):
            board = board.with_row(panel)
        else:
            board = board.with_panel(panel)
    built = board.build()
    for pid, panel in enumerate(built.panels or [], start=1):
        panel.id_val = pid
    return _to_json(built)


DASHBOARDS: dict[str, Callable[[], Json]] = {
    "forecast-accuracy.json": forecast_accuracy,
    "fleet.json": fleet,
}


def render(dashboard: Json) -> str:
    """Stable text form (keys sorted): what is committed and what the test compares."""
    return json.dumps(dashboard, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
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
