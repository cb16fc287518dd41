"""A ScaledObject's triggers at run time: what KEDA's poll and the HPA's metric reads see.

Apart from the controller because the rules for several triggers (one HPA
metric each, activity as the OR, per-trigger failure counts,
``useCachedMetrics``, ``scalingModifiers``) are KEDA's and are tested here
without a run. A ``prometheus`` trigger errors on a failed query, and on an
empty or non-finite result unless ``ignoreNullValues``; the prescaler trigger
errors when its tracker has no answer (the live UNAVAILABLE), and both count
toward fallback. A Prometheus outage reaches the prescaler trigger only
through its tracker, as it does live.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from decision.reading import Reading, known_rate
from simulations.autoscaling.keda import Keda, TriggerPoll
from simulations.autoscaling.promql import PromExpr, evaluate, parse_promql, rate_windows
from simulations.autoscaling.scaledobject import ScaledObjectSpec
from simulations.autoscaling.triggers import TriggerSpec
from simulations.scrape import PrometheusView

__all__ = ["PrescalerHook", "TriggerReading", "TriggerState"]


@dataclass(frozen=True)
class TriggerReading:
    """One trigger's GetMetricsAndActivity: ``value`` None is an error."""

    value: float | None
    active: bool


@dataclass(frozen=True)
class PrescalerHook:
    """The prescaler trigger's answers, from the controller's tracker."""

    value: Callable[[], float | None]
    active: Callable[[], bool]


class TriggerState:
    """The triggers of one ScaledObject over one run (see the module docstring)."""

    def __init__(
        self,
        so: ScaledObjectSpec,
        keda: Keda,
        view: PrometheusView,
        prescaler: PrescalerHook | None = None,
    ) -> None:
        self.so = so
        self.keda = keda
        self.view = view
        self.prescaler = prescaler
        self._cache: list[float | None] = [None] * len(so.triggers)
        for trig in so.triggers:
            for window in trig.rate_windows:
                view.retain(window)
            if trig.kind == "prescaler" and prescaler is None:
                raise ValueError(f"{so.name}: a prescaler trigger needs a PrescalerHook")
        self._gateway: PromExpr | None = None
        mine = so.prescaler_trigger
        query = mine.settings.gateway_rate_query if mine and mine.settings else None
        if query:
            self._gateway = parse_promql(query, f"{so.name}: gatewayRateQuery")
            for window in rate_windows(self._gateway):
                view.retain(window)

    def prescaler_reading(self, reading: Reading | None) -> Reading | None:
        """``reading`` (the view's, for the prescaler trigger's tracker) with the
        trigger's ``gatewayRateQuery`` evaluated beside it; unchanged without one."""
        if reading is None or self._gateway is None:
            return reading
        value = evaluate(self._gateway, self.view).value if self.view.up else None
        return replace(reading, gateway_rate_rps=known_rate(value))

    # -- one trigger -----------------------------------------------------------
    def read(self, index: int, t: float) -> TriggerReading:
        """Trigger ``index``'s value and activity at simulated time ``t``."""
        trig = self.so.triggers[index]
        if trig.kind == "prescaler":
            hook = self.prescaler
            assert hook is not None
            return TriggerReading(hook.value(), hook.active())
        if trig.kind == "cron":
            assert trig.cron is not None
            return TriggerReading(trig.cron.value(t), trig.cron.inside(t))
        return self._prometheus(trig)

    def _prometheus(self, trig: TriggerSpec) -> TriggerReading:
        assert trig.expr is not None
        if not self.view.up:
            return TriggerReading(None, False)  # the HTTP query failed
        value = evaluate(trig.expr, self.view).value
        if value is None or math.isnan(value) or math.isinf(value):
            if not trig.ignore_null_values:
                return TriggerReading(None, False)
            value = 0.0
        return TriggerReading(value, value > trig.activation_threshold)

    # -- KEDA's polling loop ---------------------------------------------------
    def poll(self, t: float, *, spec: int, ready: int) -> int | None:
        """One poll: each trigger read, failures counted, RequestScale; the
        spec KEDA writes, or None."""
        triggers = self.so.triggers
        readings = [self.read(i, t) for i in range(len(triggers))]
        results = [TriggerPoll(r.active, r.value is None) for r in readings]
        mods = self.so.modifiers

        def composite_active() -> bool:
            assert mods is not None
            composite = self._composite([r.value for r in readings], spec=spec, ready=ready)
            return composite is not None and composite > mods.activation_target

        new = self.keda.poll_triggers(
            t, spec=spec, results=results, active=None if mods is None else composite_active
        )
        for i, (trig, reading) in enumerate(zip(triggers, readings, strict=True)):
            if not trig.use_cached_metrics:
                continue
            value = reading.value
            if value is None and self.keda.in_fallback(i):
                value = self.keda.fallback_value(
                    spec=spec, target=trig.target, metric_type=trig.metric_type, ready=ready
                )
            self._cache[i] = value
        return new

    # -- the HPA's metric reads (the KEDA metrics adapter) ----------------------
    def hpa_usages(self, t: float, *, spec: int, ready: int) -> tuple[float | None, ...]:
        """What the HPA reads for each of its metrics: one per trigger, or the
        composite one of ``scalingModifiers``; None is a failed read."""
        keda = self.keda
        usages: list[float | None] = []
        raw: list[float | None] = []
        for i, trig in enumerate(self.so.triggers):
            cached = self._cache[i] if trig.use_cached_metrics else None
            value = cached if cached is not None else self.read(i, t).value
            raw.append(value)
            usages.append(
                keda.metric_for_hpa(
                    value,
                    spec=spec,
                    target=trig.target,
                    metric_type=trig.metric_type,
                    ready=ready,
                    trigger=i,
                )
            )
        if self.so.modifiers is None:
            return tuple(usages)
        return (self._composite(raw, spec=spec, ready=ready),)

    def _composite(self, values: list[float | None], *, spec: int, ready: int) -> float | None:
        """The formula over the named triggers; the fallback metric while a
        trigger is in fallback; None when a trigger failed outside it."""
        mods = self.so.modifiers
        assert mods is not None
        if any(self.keda.in_fallback(i) for i in range(len(values))):
            return self.keda.fallback_value(
                spec=spec, target=mods.target, metric_type=mods.metric_type, ready=ready
            )
        named: dict[str, float] = {}
        for trig, value in zip(self.so.triggers, values, strict=True):
            if trig.name is not None and trig.name in mods.formula.names:
                if value is None:
                    return None
                named[trig.name] = value
        return mods.formula.evaluate(named)
