"""The "Forecast accuracy" dashboard: what the scaler forecast, what came, how wrong it was."""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import dashboard as dashboard_builder
from grafana_foundation_sdk.builders import timeseries

from prescaler_dashboards.board import (
    SO,
    Json,
    assemble,
    new_dashboard,
    query_variable,
    scaledobject_variables,
)
from prescaler_dashboards.panels import (
    FRACTION_UNIT,
    field_overrides,
    stat_panel,
    timeseries_panel,
)

__all__ = ["forecast_accuracy"]

# The forecast series of the selected signal, and of the selected horizon.
SIGNAL = f'{SO},signal="$signal"'
HORIZON = f'{SIGNAL},horizon_seconds="$horizon"'

# Signals of prescaler_forecast that have no actual (prescaler_demand) and no
# error or coverage series, so no panel here can show them: the recent days'
# peak that seasonalPeakDays sizes for (docs/contracts.md). Left out of the
# signal variable, whose first value is what the dashboard opens on.
SIGNAL_REGEX = "/^(?!seasonal_peak_requests_per_s$).*$/"

# What the forecast learned: for an object with gatewayRateQuery that is the
# gateway's rate (exported as the signal's "gateway_" series while known), so
# it is the actual wherever it exists, and vLLM's series where it does not
# (no gateway key, or the gateway's rate unknown at that time). The two series
# differ only in ``signal``, so ``or`` matches on the object's labels.
ACTUAL = (
    f'prescaler_demand{{{SO},signal="gateway_${{signal}}"}} '
    f"or on(namespace, scaledobject) prescaler_demand{{{SIGNAL}}}"
)


def _forecast_vs_actual() -> timeseries.Panel:
    """One panel per horizon: the forecast shifted by its horizon over the actual demand."""
    return (
        timeseries_panel(
            "Forecast vs actual, horizon ${horizon} s",
            (24, 9),
            [
                (ACTUAL, "actual"),
                (f"max(prescaler_forecast{{{HORIZON}}} offset ${{horizon}}s)", "upper quantile"),
                (f"min(prescaler_forecast{{{HORIZON}}} offset ${{horizon}}s)", "lower quantile"),
                (f"prescaler_forecast{{{HORIZON}}} offset ${{horizon}}s", "q{{quantile}}"),
            ],
            description=(
                "Each forecast is shifted forward by its horizon (`offset`), so at time t "
                "it shows what the scaler predicted for t at t - horizon, next to what "
                "came (`prescaler_demand`: the gateway's rate where the object has "
                "`gatewayRateQuery` and it is known, as the forecast learns it; else "
                "vLLM's arrivals). The band spans the lowest to the highest "
                "exported quantile."
            ),
        )
        .override_by_name(
            "upper quantile",
            field_overrides(
                {
                    "custom.fillBelowTo": "lower quantile",
                    "custom.lineWidth": 0,
                    "custom.fillOpacity": 25,
                }
            ),
        )
        .override_by_name(
            "lower quantile",
            field_overrides({"custom.lineWidth": 0, "custom.fillOpacity": 0}),
        )
        .override_by_name(
            "actual",
            field_overrides(
                {"custom.lineWidth": 3, "color": {"mode": "fixed", "fixedColor": "orange"}}
            ),
        )
        .repeat("horizon")
        .repeat_direction("v")
    )


def forecast_accuracy() -> Json:
    """What the scaler forecast, what came, and how wrong it was."""
    lead_time = [(f"prescaler_lead_time_seconds{{{SO}}}", "lead time")]
    panels: list[Any] = [
        dashboard_builder.Row("Forecast vs actual (one panel per horizon)"),
        _forecast_vs_actual(),
        dashboard_builder.Row("Error and calibration"),
        timeseries_panel(
            "Absolute percentage error by horizon",
            (12, 8),
            [(f"prescaler_forecast_abs_percentage_error{{{SIGNAL}}}", "{{horizon_seconds}} s")],
            unit=FRACTION_UNIT,
            minimum=0,
            description="|forecast - actual| / actual per horizon, as exported by the scaler.",
        ),
        stat_panel(
            "Mean absolute percentage error over the time range",
            (12, 8),
            [
                (
                    "avg by (horizon_seconds) (avg_over_time("
                    f"prescaler_forecast_abs_percentage_error{{{SIGNAL}}}[$__range]))",
                    "{{horizon_seconds}} s",
                )
            ],
            unit=FRACTION_UNIT,
            instant=True,
        ),
        timeseries_panel(
            "Quantile coverage",
            (12, 8),
            [(f"prescaler_forecast_coverage{{{SIGNAL}}}", "q{{quantile}}")],
            unit=FRACTION_UNIT,
            minimum=0,
            maximum=1,
            description=(
                "Share of actuals at or below each forecast quantile. A calibrated "
                "q0.9 sits near 0.9: lower means the scaler under-provisions bursts, "
                "higher means it pays for headroom it does not need."
            ),
        ),
        stat_panel(
            "Lead time in use",
            (6, 8),
            lead_time,
            unit="s",
            description="Node + pod start + model load: how far ahead the scaler sizes the fleet.",
        ),
        timeseries_panel("Lead time over time", (6, 8), lead_time, unit="s", minimum=0),
    ]
    variables = [
        *scaledobject_variables(),
        query_variable(
            "signal",
            "Signal",
            f"label_values(prescaler_forecast{{{SO}}}, signal)",
            regex=SIGNAL_REGEX,
        ),
        query_variable(
            "horizon",
            "Horizon (s)",
            f"label_values(prescaler_forecast{{{SIGNAL}}}, horizon_seconds)",
            multi=True,
            include_all=True,
        ),
    ]
    return assemble(
        new_dashboard("prescaler-forecast-accuracy", "prescaler / Forecast accuracy"),
        variables,
        panels,
    )
