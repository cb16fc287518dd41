"""``prescaler doctor``: runs every check for one ScaledObject and prints one line each.

The order follows the loop: the trigger's bounds, the series its queries
return, the scaler's answer (fresh or held), whether it moved with demand
over the window, what the HPA reads, and room under ``maxReplicaCount``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from decision.settings import ScalerSettings, SettingsError, parse_settings
from prescaler.doctor import checks
from prescaler.doctor.checks import Finding, ScalerAnswer
from prescaler.doctor.fetch import FetchError, PromClient, read_url
from prescaler.doctor.gather import (
    ScalerMetrics,
    answer_history,
    decision_deltas,
    demand_expr,
    keda_query,
    prescaler_series,
    read_scaler_metrics,
)
from prescaler.doctor.inputs import (
    HpaView,
    InputError,
    ObjectView,
    TriggerView,
    parse_hpa,
    parse_scaledobject,
)

__all__ = ["DoctorOptions", "run_doctor"]


@dataclass(frozen=True)
class DoctorOptions:
    scaledobject: Path
    prometheus: str | None = None
    scaler: str | None = None
    scaler_metrics: str | None = None
    hpa: Path | None = None
    name: str | None = None
    window_s: float = 3600.0
    settle_s: float = 12.0
    rate_window_s: float = 120.0
    timeout_s: float = 10.0


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from exc


def _metrics_url(opts: DoctorOptions) -> str | None:
    if opts.scaler_metrics:
        return opts.scaler_metrics
    if not opts.scaler:
        return None
    host = opts.scaler.removeprefix("dns:///").rsplit(":", 1)[0]
    return f"http://{host}:9091/metrics"


def _prometheus_url(opts: DoctorOptions, obj: ObjectView) -> str:
    if opts.prometheus:
        return opts.prometheus
    for t in obj.triggers:
        address = t.metadata.get("prometheusAddress") or t.metadata.get("serverAddress")
        if address:
            return address
    raise InputError("no --prometheus, and no trigger names a Prometheus address")


class _Scaler:
    """The scaler's /metrics, read once before the checks and once ``settle_s`` after."""

    def __init__(self, opts: DoctorOptions, obj: ObjectView) -> None:
        self.opts, self.obj = opts, obj
        self.url = _metrics_url(opts)
        self.error: str | None = None
        self.after: ScalerMetrics | None = None
        self.started = time.monotonic()
        self.before: ScalerMetrics | None = self._scrape()

    def _scrape(self) -> ScalerMetrics | None:
        if self.url is None:
            return None
        try:
            text = read_url(self.url, self.opts.timeout_s)
            return read_scaler_metrics(text, self.obj.namespace, self.obj.name)
        except FetchError as exc:
            self.error = str(exc)
            return None

    def settle(self, sleep: Callable[[float], None]) -> None:
        if self.before is None:
            return
        left = self.opts.settle_s - (time.monotonic() - self.started)
        if left > 0:
            sleep(left)
        self.after = self._scrape()


def run_doctor(opts: DoctorOptions, sleep: Callable[[float], None] = time.sleep) -> list[Finding]:
    """Every finding for the ScaledObject in ``opts.scaledobject`` (raises InputError
    on a file that is not what it should be)."""
    obj = parse_scaledobject(_read(opts.scaledobject), str(opts.scaledobject), opts.name)
    hpa = parse_hpa(_read(opts.hpa), str(opts.hpa), obj.hpa_name) if opts.hpa else None
    prom = PromClient(_prometheus_url(opts, obj), opts.timeout_s)
    scaler = _Scaler(opts, obj)
    end = time.time()
    start = end - opts.window_s
    step = max(15.0, opts.window_s / 120)
    findings: list[Finding] = []
    later: list[Callable[[], list[Finding]]] = []
    for trigger in obj.triggers:
        try:
            if trigger.is_prescaler:
                found, after = _prescaler_trigger(opts, obj, hpa, trigger, prom, scaler,
                                                  (start, end, step))  # fmt: skip
                findings += found
                if after is not None:
                    later.append(after)
            elif trigger.type == "prometheus":
                findings += _keda_trigger(opts, obj, hpa, trigger, prom, (start, end, step))
            else:
                findings.append(
                    Finding("OK", "series", trigger.label, f"not checked (type {trigger.type})")
                )
        except FetchError as exc:
            findings.append(
                Finding(
                    "FAIL",
                    "prometheus",
                    trigger.label,
                    f"cannot query Prometheus: {exc}",
                    "give --prometheus a URL this machine reaches (kubectl -n monitoring "
                    "port-forward svc/<prometheus> 9090)",
                )
            )
    scaler.settle(sleep)
    for after in later:
        findings += after()
    rank = {t.label: t.index for t in obj.triggers}
    return sorted(
        findings,
        key=lambda f: (rank.get(f.subject.split(" ")[0], len(rank)), _ORDER.get(f.check, 99)),
    )


_ORDER = {
    name: i
    for i, name in enumerate(
        ("prometheus", "metadata", "bounds", "series", "answer", "movement", "hpa", "max")
    )
}
"""The report's order within a trigger: along the loop, from what it reads to what it asks."""


Window = tuple[float, float, float]


def _prescaler_trigger(
    opts: DoctorOptions,
    obj: ObjectView,
    hpa: HpaView | None,
    trigger: TriggerView,
    prom: PromClient,
    scaler: _Scaler,
    window: Window,
) -> tuple[list[Finding], Callable[[], list[Finding]] | None]:
    label = trigger.label
    try:
        settings = parse_settings(trigger.metadata)
    except SettingsError as exc:
        fail = Finding(
            "FAIL",
            "metadata",
            label,
            f"the scaler refuses the trigger (INVALID_ARGUMENT): {exc}",
            "correct the key it names (docs/contracts.md, trigger metadata keys)",
        )
        return [fail], None
    out = [checks.check_bounds(obj, trigger, settings.min_replicas, settings.max_replicas)]
    series = prescaler_series(prom, settings, obj.namespace, opts.rate_window_s)
    expected = hpa.current_replicas if hpa is not None else None
    if series is None:
        out.append(
            Finding(
                "OK",
                "series",
                label,
                "not a Prometheus source (metricsUrls/podSelector): the answer check covers it",
            )
        )
    else:
        out += checks.check_series(trigger, series, expected)
    start, end, step = window
    pods_matched = series is not None and bool(series.pods)
    demand_q, demand_what = demand_expr(
        settings, obj.namespace, pods_matched, max(opts.rate_window_s, 2 * step)
    )
    demand = prom.query_range(demand_q, start, end, step)
    signal = "gateway_requests_per_s" if settings.gateway_rate_query else "requests_per_s"
    history = answer_history(prom, obj.namespace, obj.name, window, signal)
    out.append(
        checks.check_movement(
            trigger,
            demand[0][1] if demand else [],
            history.series,
            opts.window_s,
            demand_what,
            f"prescaler_desired_replicas for {obj.namespace}/{obj.name}",
            seen=history.seen,
        )
    )

    def after() -> list[Finding]:
        answer = _answer(settings, scaler)
        found = [checks.check_answer(trigger, obj, answer)]
        if hpa is not None:
            found.append(checks.check_hpa(trigger, hpa, answer.value))
        capped = history.capped
        if capped is None and answer.tracked:
            capped = answer.reasons.get("max_replicas", 0.0)
        peak = history.peak if history.peak is not None else answer.value
        found.append(checks.check_max(trigger, obj, peak, capped, hpa, opts.window_s))
        return found

    return out, after


def _answer(settings: ScalerSettings, scaler: _Scaler) -> ScalerAnswer:
    """The scaler's answer for the object as its ``/metrics`` shows it."""
    if scaler.url is None:
        return ScalerAnswer(tracked=False, error="no --scaler or --scaler-metrics given")
    before, after = scaler.before, scaler.after
    if before is None or after is None:
        return ScalerAnswer(tracked=False, error=scaler.error or "its /metrics gave nothing")
    if not (before.tracked or after.tracked):
        return ScalerAnswer(tracked=False)
    source = (
        f"prometheus:{settings.prometheus_address.rstrip('/')}"
        if settings.prometheus_address
        else ("scrape" if settings.metrics_urls else "kubernetes")
    )
    # Only /metrics, never GetMetrics: the scaler registers on every call, so
    # metadata that differs from KEDA's would retune or replace the live tracker.
    value = after.desired if after.tracked else before.desired
    return ScalerAnswer(
        tracked=True,
        value=value,
        reasons=decision_deltas(before, after),
        settle_s=scaler.opts.settle_s,
        source=source,
        source_up=after.source_up.get(source),
    )


def _keda_trigger(
    opts: DoctorOptions,
    obj: ObjectView,
    hpa: HpaView | None,
    trigger: TriggerView,
    prom: PromClient,
    window: Window,
) -> list[Finding]:
    query = trigger.metadata.get("query", "")
    if not query:
        return [Finding("FAIL", "metadata", trigger.label, "the prometheus trigger has no query")]
    data = keda_query(prom, query)
    out = [checks.check_query(trigger, data)]
    start, end, step = window
    try:
        answer = prom.query_range(query, start, end, step)
    except FetchError:
        answer = []
    demand_q, demand_what = demand_expr(
        None, obj.namespace, False, max(opts.rate_window_s, 2 * step)
    )
    demand = prom.query_range(demand_q, start, end, step)
    out.append(
        checks.check_movement(
            trigger,
            demand[0][1] if demand else [],
            answer[0][1] if len(answer) == 1 else [],
            opts.window_s,
            demand_what,
            "the query",
            answer_is_query=True,
            answer_series=len(answer),
        )
    )
    if hpa is not None:
        out.append(checks.check_hpa(trigger, hpa, data.value))
    peak = None
    try:
        threshold = float(trigger.metadata.get("threshold", "nan"))
    except ValueError:
        threshold = math.nan
    values = [v for _, v in answer[0][1]] if len(answer) == 1 else []
    finite = [v for v in values if math.isfinite(v)]
    if finite and math.isfinite(threshold) and threshold > 0:
        peak = float(math.ceil(max(finite) / threshold - 1e-9))
    out.append(checks.check_max(trigger, obj, peak, None, hpa, opts.window_s))
    return out
