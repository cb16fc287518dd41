"""Panel and target builders shared by both dashboards.

Why one place: every panel reads the same Prometheus through the
``${datasource}`` variable and is sized on the same grid, so the styling of a
time series or stat panel is decided once here and each dashboard module says
only what it plots.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, Self, TypeVar

from grafana_foundation_sdk.builders import common as common_builder
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model

__all__ = [
    "DS",
    "FRACTION_UNIT",
    "Query",
    "field_overrides",
    "prometheus_targets",
    "stat_panel",
    "timeseries_panel",
]

# No datasource uid is hard-coded: everything reads the dashboard's
# `datasource` variable (see board.datasource_variable).
DS = model.DataSourceRef(type_val="prometheus", uid="${datasource}")

# prescaler_forecast_abs_percentage_error and prescaler_forecast_coverage are
# fractions (0.25 = 25 %), like vLLM's *_perc gauges.
FRACTION_UNIT = "percentunit"

Query = tuple[str, str]  # (PromQL, legend)


class _PanelBuilder(Protocol):
    """The builder methods time series and stat panels share."""

    def title(self, title: str) -> Self: ...
    def description(self, description: str) -> Self: ...
    def datasource(self, datasource: model.DataSourceRef) -> Self: ...
    def span(self, w: int) -> Self: ...
    def height(self, h: int) -> Self: ...
    def unit(self, unit: str) -> Self: ...
    def targets(self, targets: list[cogbuilder.Builder[cogvariants.Dataquery]]) -> Self: ...


PanelT = TypeVar("PanelT", bound=_PanelBuilder)


def prometheus_targets(
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


def _framed(
    panel: PanelT,
    title: str,
    size: tuple[int, int],
    queries: Sequence[Query],
    *,
    unit: str,
    description: str,
    instant: bool = False,
) -> PanelT:
    """What every panel sets the same way: title, text, data source, grid size, unit, targets."""
    width, height = size
    return (
        panel.title(title)
        .description(description)
        .datasource(DS)
        .span(width)
        .height(height)
        .unit(unit)
        .targets(prometheus_targets(queries, instant=instant))
    )


def timeseries_panel(
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
    panel = (
        _framed(timeseries.Panel(), title, size, queries, unit=unit, description=description)
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


def stat_panel(
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
    return (
        _framed(
            stat.Panel(),
            title,
            size,
            queries,
            unit=unit,
            description=description,
            instant=instant,
        )
        .mappings(mappings or [])
        .reduce_options(
            common_builder.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False)
        )
        .color_mode(common.BigValueColorMode.VALUE)
        .graph_mode(common.BigValueGraphMode.AREA)
        .text_mode(common.BigValueTextMode.AUTO)
    )


def field_overrides(properties: Mapping[str, object]) -> list[model.DynamicConfigValue]:
    """One series' field-config overrides, from ``{"custom.lineWidth": 0, ...}``."""
    return [model.DynamicConfigValue(id_val=key, value=value) for key, value in properties.items()]
