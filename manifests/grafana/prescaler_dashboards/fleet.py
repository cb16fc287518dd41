"""The "Fleet" dashboard: replicas, load on vLLM, latency, and why the scaler chose each count."""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.models import dashboard as model

from prescaler_dashboards.board import (
    SO,
    VLLM,
    Json,
    assemble,
    new_dashboard,
    query_variable,
    scaledobject_variables,
)
from prescaler_dashboards.panels import stat_panel, timeseries_panel

__all__ = ["fleet"]

# prescaler_source_up as words and colours.
UP_MAPPINGS: list[model.ValueMapping] = [
    model.ValueMap(
        options={
            "0": model.ValueMappingResult(text="down", color="red", index=0),
            "1": model.ValueMappingResult(text="up", color="green", index=1),
        }
    )
]


def _kv_cache_usage(agg: str) -> str:
    """KV cache usage under V1's metric name, or V0's (and Neuron's) where V1's is absent."""
    return (
        f"{agg}(vllm:kv_cache_usage_perc{{{VLLM}}}) or {agg}(vllm:gpu_cache_usage_perc{{{VLLM}}})"
    )


def _ttft(quantile: str) -> str:
    """A quantile of time to first token over all replicas of the selected models."""
    return (
        f"histogram_quantile({quantile}, sum by (le) "
        f"(rate(vllm:time_to_first_token_seconds_bucket{{{VLLM}}}[$__rate_interval])))"
    )


def _vllm_rate(counter: str) -> str:
    """The per-second rate of a vLLM counter, summed over replicas."""
    return f"sum(rate({counter}{{{VLLM}}}[$__rate_interval]))"


def _summary_stats() -> list[Any]:
    """The top row: the numbers to read at a glance."""
    return [
        stat_panel(
            "Desired replicas", (6, 4), [(f"prescaler_desired_replicas{{{SO}}}", "desired")]
        ),
        stat_panel("Ready replicas", (6, 4), [(f"prescaler_ready_replicas{{{SO}}}", "ready")]),
        stat_panel(
            "Lead time", (6, 4), [(f"prescaler_lead_time_seconds{{{SO}}}", "lead time")], unit="s"
        ),
        stat_panel(
            "Sources up",
            (6, 4),
            [("min(prescaler_source_up)", "all sources")],
            mappings=UP_MAPPINGS,
        ),
    ]


HINDSIGHT = "prescaler_hindsight_ready_replicas"
"""The hindsight schedule's Ready replicas, backfilled by ``prescaler hindsight``
(no scaler serves it: it exists only for the ranges it was computed for)."""
LIVE = f"max by (namespace, scaledobject) (prescaler_ready_replicas{{{SO}}})"
PLAN = f"max by (namespace, scaledobject) ({HINDSIGHT}{{{SO}}})"
"""The live fleet's and the schedule's Ready replicas on the same labels (one
series each, whichever scaler replica or job exported them), so they compare."""


def _bound() -> list[Any]:
    """The live fleet against the hindsight schedule for the demand Prometheus recorded."""
    return [
        timeseries_panel(
            "Live fleet vs the hindsight schedule",
            (18, 8),
            [
                (f"prescaler_ready_replicas{{{SO}}}", "ready (live)"),
                (f"{HINDSIGHT}{{{SO}}}", "ready (hindsight schedule)"),
                (f"prescaler_hindsight_replicas{{{SO}}}", "ordered (hindsight schedule)"),
            ],
            minimum=0,
            description=(
                "The cheapest schedule perfect foresight could have run on the demand this "
                "Prometheus recorded, meeting the SLO target when replayed: written by "
                "`prescaler hindsight --prometheus ...` and backfilled with promtool "
                '(docs/simulator.md, "The hindsight schedule on the dashboard"). Empty where '
                "it was not computed."
            ),
        ),
        stat_panel(
            "Live fleet / hindsight schedule",
            (6, 8),
            [
                (
                    f"avg_over_time(({LIVE} and on(namespace, scaledobject) {PLAN})"
                    "[$__range:$__interval]) / "
                    f"avg_over_time(({PLAN} and on(namespace, scaledobject) {LIVE})"
                    "[$__range:$__interval])",
                    "ready replicas, as a multiple",
                )
            ],
            description=(
                "Mean Ready replicas of the live fleet as a multiple of the hindsight "
                "schedule's, both over the steps of the dashboard's range where both exist "
                "(the schedule may cover only part of it): 1 is the bound."
            ),
            instant=True,
        ),
    ]


def _graphs() -> list[Any]:
    """Replicas against the load on vLLM, then the scaler's view and health; two per row."""
    return [
        timeseries_panel(
            "Desired vs ready replicas",
            (12, 8),
            [
                (f"prescaler_desired_replicas{{{SO}}}", "desired (scaler)"),
                (f"prescaler_ready_replicas{{{SO}}}", "ready"),
            ],
            minimum=0,
            description="The gap is pods starting: node launch, image pull, model load.",
        ),
        timeseries_panel(
            "Queue",
            (12, 8),
            [
                (f"sum(vllm:num_requests_waiting{{{VLLM}}})", "waiting"),
                (f"sum(vllm:num_requests_running{{{VLLM}}})", "running"),
            ],
            minimum=0,
        ),
        timeseries_panel(
            "KV cache usage",
            (12, 8),
            [
                (_kv_cache_usage("max"), "max over replicas"),
                (_kv_cache_usage("avg"), "mean over replicas"),
            ],
            unit="percentunit",
            minimum=0,
            maximum=1,
            description=(
                "vLLM >= 0.9.2 exports kv_cache_usage_perc; older (and Neuron) images "
                "gpu_cache_usage_perc."
            ),
        ),
        timeseries_panel(
            "Time to first token",
            (12, 8),
            [(_ttft("0.99"), "p99"), (_ttft("0.5"), "p50")],
            unit="s",
            minimum=0,
            description="From vLLM's histogram vllm:time_to_first_token_seconds, all replicas.",
        ),
        timeseries_panel(
            "Token throughput",
            (12, 8),
            [
                (_vllm_rate("vllm:prompt_tokens_total"), "prompt"),
                (_vllm_rate("vllm:generation_tokens_total"), "generation"),
            ],
            minimum=0,
            stack=True,
        ),
        timeseries_panel(
            "Demand signals (scaler's view)",
            (12, 8),
            [(f"prescaler_demand{{{SO}}}", "{{signal}}")],
            minimum=0,
        ),
        timeseries_panel(
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
        timeseries_panel(
            "Source health",
            (12, 8),
            [("prescaler_source_up", "{{source}}")],
            minimum=0,
            maximum=1,
            description=(
                "1 while a data source answers; missing data holds replicas, never lowers them."
            ),
        ),
        timeseries_panel(
            "Preemptions",
            (12, 8),
            [(_vllm_rate("vllm:num_preemptions_total"), "preemptions/s")],
            minimum=0,
        ),
        timeseries_panel(
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


def fleet() -> Json:
    """Replicas, load on vLLM, latency, and why the scaler chose each count."""
    variables = [
        *scaledobject_variables(),
        query_variable(
            "model",
            "vLLM model",
            'label_values(vllm:num_requests_running{namespace="$namespace"}, model_name)',
            multi=True,
            include_all=True,
        ),
    ]
    return assemble(
        new_dashboard("prescaler-fleet", "prescaler / Fleet"),
        variables,
        [*_summary_stats(), *_graphs(), *_bound()],
    )
