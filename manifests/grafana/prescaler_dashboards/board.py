"""The dashboard frame both dashboards share: variables, label filters, import inputs.

Why here: the variables and the label filters the panels use are two halves
of one contract (a panel filters on ``$namespace`` only because a variable of
that name exists), and the import input must match the ``datasource``
variable's placeholder; keeping them together keeps them consistent.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dashboard_builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model

from prescaler_dashboards.panels import DS

__all__ = [
    "DS_INPUT",
    "SO",
    "VLLM",
    "Json",
    "assemble",
    "new_dashboard",
    "query_variable",
    "scaledobject_variables",
]

Json = dict[str, Any]

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


def query_variable(
    name: str,
    label: str,
    query: str,
    *,
    multi: bool = False,
    include_all: bool = False,
    regex: str | None = None,
) -> dashboard_builder.QueryVariable:
    """A variable whose values come from a Prometheus ``label_values`` query,
    kept only where they match ``regex`` (Grafana's ``/.../`` form) if given."""
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
    if regex is not None:
        variable = variable.regex(regex)
    return variable.all_value(".*") if include_all else variable


def scaledobject_variables() -> list[dashboard_builder.QueryVariable]:
    """``namespace`` then ``scaledobject``: what the ``SO`` filter refers to."""
    return [
        query_variable(
            "namespace", "Namespace", "label_values(prescaler_desired_replicas, namespace)"
        ),
        query_variable(
            "scaledobject",
            "ScaledObject",
            'label_values(prescaler_desired_replicas{namespace="$namespace"}, scaledobject)',
        ),
    ]


def _datasource_variable() -> dashboard_builder.DatasourceVariable:
    placeholder = f"${{{DS_INPUT}}}"
    return (
        dashboard_builder.DatasourceVariable("datasource")
        .label("Data source")
        .type("prometheus")
        .current(model.VariableOption(selected=True, text=placeholder, value=placeholder))
    )


def new_dashboard(uid: str, title: str) -> dashboard_builder.Dashboard:
    """An empty dashboard with the shared settings and the ``datasource`` variable."""
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


def assemble(
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
