"""The Kubernetes HorizontalPodAutoscaler (autoscaling/v2), over External metrics.

Faithful rather than "ceil(usage / target)" because when and where an
autoscaler lands depends on details (the status replica count, inclusive
tolerance, strict stabilization windows, Percent rounding, ``behavior: nil``).
The rules follow kubernetes' ``horizontal.go``, ``replica_calculator.go`` and
the v2 defaults; docs/control-plane.md states them with worked examples.
Times compare as integer nanoseconds, like Go's ``time.Time``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from simulations.autoscaling.hpa_config import (
    LEGACY_UP_FACTOR,
    LEGACY_UP_MINIMUM,
    NS_PER_S,
    HpaBehavior,
    HpaConfig,
    HpaPolicy,
    HpaRules,
    TargetType,
    quantize_milli,
    to_ns,
)

__all__ = ["Hpa"]


class _Recommendation:
    """A timestamped raw recommendation (horizontal.go timestampedRecommendation)."""

    __slots__ = ("t_ns", "value")

    def __init__(self, value: int, t_ns: int) -> None:
        self.value = value
        self.t_ns = t_ns


class _ScaleEvent:
    """A past scale change (horizontal.go timestampedScaleEvent); slots are reused."""

    __slots__ = ("change", "outdated", "t_ns")

    def __init__(self, change: int, t_ns: int) -> None:
        self.change = change
        self.t_ns = t_ns
        self.outdated = False


class Hpa:
    """The controller state of one HPA: recommendation and scale-event history.

    The history lives in the controller's memory, per HPA, exactly as upstream
    keeps it; ``sync`` is one ``reconcileAutoscaler`` call.
    """

    def __init__(self, config: HpaConfig) -> None:
        if not isinstance(config, HpaConfig):
            raise ValueError("Hpa needs an HpaConfig")
        self.config = config
        self._recommendations: list[_Recommendation] | None = None
        self._up_events: list[_ScaleEvent] = []
        self._down_events: list[_ScaleEvent] = []
        self._targets = tuple((m.target_type, quantize_milli(m.target)) for m in config.metrics)
        behavior = config.behavior
        tol = config.tolerance
        self._tol_up = tol
        self._tol_down = tol
        if behavior is not None:
            if behavior.scale_up.tolerance is not None:
                self._tol_up = behavior.scale_up.tolerance
            if behavior.scale_down.tolerance is not None:
                self._tol_down = behavior.scale_down.tolerance
            up_w = behavior.scale_up.stabilization_window_s
            down_w = behavior.scale_down.stabilization_window_s
            self._up_window_ns = to_ns(up_w if up_w is not None else 0.0)
            self._down_window_ns = to_ns(
                down_w if down_w is not None else config.downscale_stabilization_s
            )
        else:
            self._up_window_ns = 0
            self._down_window_ns = to_ns(config.downscale_stabilization_s)

    # -- public -----------------------------------------------------------------

    @property
    def recommendations(self) -> tuple[tuple[int, float], ...]:
        """The stored raw recommendations as (replicas, time_s), for inspection."""
        recs = self._recommendations or []
        return tuple((r.value, r.t_ns / NS_PER_S) for r in recs)

    def sync(self, now: float, *, spec: int, status: int, ready: int, usage: float | None) -> int:
        """One reconcile of an HPA with one metric; see :meth:`sync_metrics`.

        ``usage`` is the summed metric value or None when the metric failed
        (the HPA then holds and records nothing).
        """
        return self.sync_metrics(now, spec=spec, status=status, ready=ready, usages=(usage,))

    def sync_metrics(
        self, now: float, *, spec: int, status: int, ready: int, usages: Sequence[float | None]
    ) -> int:
        """One reconcile; returns the new spec (== ``spec`` when nothing changes).

        ``spec`` is the Deployment's spec.replicas, ``status`` its status.replicas
        (non-terminating pods, Pending included), ``ready`` the Running+Ready
        pods, ``usages`` each metric's summed value in :attr:`HpaConfig.metrics`
        order, None for a metric that failed. The desired count is the largest
        valid proposal; when every metric failed, or some failed and that
        largest proposal is below ``spec``, the HPA holds and records nothing
        (computeReplicasForMetrics). At spec 0 the HPA does nothing: KEDA owns
        0 <-> N.
        """
        for name, v in (("spec", spec), ("status", status), ("ready", ready)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"Hpa.sync: {name} must be an int >= 0, got {v!r}")
        if not math.isfinite(now):
            raise ValueError(f"Hpa.sync: now must be finite, got {now!r}")
        if len(usages) != len(self._targets):
            raise ValueError(
                f"Hpa.sync: {len(self._targets)} metric(s) configured, got {len(usages)} usage(s)"
            )
        now_ns = to_ns(now)
        cfg = self.config
        if self._recommendations is None:  # recordInitialRecommendation
            self._recommendations = [_Recommendation(spec, now_ns)]

        if spec == 0:
            return 0  # ScalingActive=False / ScalingDisabled
        if spec > cfg.max_replicas:
            desired = cfg.max_replicas
        elif spec < cfg.min_replicas:
            desired = cfg.min_replicas
        else:
            proposal = self._largest_proposal(spec, status, ready, usages)
            if proposal is None:
                return spec  # FailedGetExternalMetric / FailedComputeMetricsReplicas: hold
            desired = max(0, proposal)
            if cfg.behavior is None:
                desired = self._normalize_legacy(now_ns, spec, desired)
            else:
                desired = self._normalize_with_behavior(now_ns, spec, desired, cfg.behavior)
        if desired != spec and cfg.behavior is not None:
            self._store_scale_event(now_ns, cfg.behavior, spec, desired)
        return desired

    def _largest_proposal(
        self, spec: int, status: int, ready: int, usages: Sequence[float | None]
    ) -> int | None:
        """computeReplicasForMetrics: the max valid proposal, or None to hold."""
        largest: int | None = None
        invalid = 0
        for (target_type, target_milli), usage in zip(self._targets, usages, strict=True):
            proposal = (
                None
                if usage is None
                else self._proposal(spec, status, ready, usage, target_type, target_milli)
            )
            if proposal is None:
                invalid += 1
            elif largest is None or proposal > largest:
                largest = proposal
        if largest is None or (invalid > 0 and largest < spec):
            return None
        return largest

    # -- per-metric proposal (replica_calculator.go) ------------------------------

    def _within(self, ratio: float) -> bool:
        """Tolerances.isWithin: both bounds inclusive; NaN is never within."""
        return (1.0 - self._tol_down) <= ratio <= (1.0 + self._tol_up)

    def _proposal(
        self,
        spec: int,
        status: int,
        ready: int,
        usage: float,
        target_type: TargetType,
        target_milli: int,
    ) -> int | None:
        """One metric's proposal; None when the replica calculator errors."""
        usage_m = float(quantize_milli(usage))
        target_m = float(target_milli)
        if target_type == "AverageValue":
            # GetExternalPerPodMetricReplicas, divided by status replicas.
            if status == 0:
                # usage/0 is +Inf (or NaN at 0): never within the tolerance.
                return math.ceil(usage_m / target_m)
            ratio = usage_m / (target_m * float(status))
            if self._within(ratio):
                return status
            return math.ceil(usage_m / target_m)
        # Value: GetExternalMetricReplicas -> getUsageRatioReplicaCount (spec > 0 here).
        ratio = usage_m / target_m
        if self._within(ratio):
            return spec
        if status == 0 and ready == 0:
            return None  # "no pods returned by selector": an error, so hold
        return math.ceil(ratio * float(ready))

    # -- normalization ------------------------------------------------------------

    def _normalize_legacy(self, now_ns: int, current: int, desired: int) -> int:
        """behavior nil: 5-minute max window (boundary included), up limit max(2c, 4)."""
        recs = self._recommendations
        assert recs is not None
        cutoff = now_ns - self._down_window_ns
        stabilized = desired
        old_index = -1
        for i, rec in enumerate(recs):
            if rec.t_ns < cutoff:
                old_index = i
            elif rec.value > stabilized:
                stabilized = rec.value
        if old_index >= 0:
            recs[old_index] = _Recommendation(desired, now_ns)
        else:
            recs.append(_Recommendation(desired, now_ns))
        up_limit = int(max(LEGACY_UP_FACTOR * float(current), LEGACY_UP_MINIMUM))
        maximum = min(self.config.max_replicas, up_limit)
        if stabilized < self.config.min_replicas:
            return self.config.min_replicas
        if stabilized > maximum:
            return maximum
        return stabilized

    def _normalize_with_behavior(
        self, now_ns: int, current: int, desired: int, behavior: HpaBehavior
    ) -> int:
        stabilized = self._stabilize_with_behavior(now_ns, current, desired)
        return self._rate_limit(now_ns, current, stabilized, behavior)

    def _stabilize_with_behavior(self, now_ns: int, current: int, desired: int) -> int:
        """Up: lowest recommendation in the up window; down: highest in the down window."""
        recs = self._recommendations
        assert recs is not None
        up_cutoff = now_ns - self._up_window_ns
        down_cutoff = now_ns - self._down_window_ns
        up_rec = desired
        down_rec = desired
        old_index = -1
        for i, rec in enumerate(recs):
            if rec.t_ns > up_cutoff:
                up_rec = min(up_rec, rec.value)
            if rec.t_ns > down_cutoff:
                down_rec = max(down_rec, rec.value)
            if rec.t_ns < up_cutoff and rec.t_ns < down_cutoff:
                old_index = i
        recommendation = current
        if recommendation < up_rec:
            recommendation = up_rec
        if recommendation > down_rec:
            recommendation = down_rec
        # The raw (unstabilized) desired value is what gets recorded.
        if old_index >= 0:
            recs[old_index] = _Recommendation(desired, now_ns)
        else:
            recs.append(_Recommendation(desired, now_ns))
        return recommendation

    @staticmethod
    def _changes_in_period(events: list[_ScaleEvent], cutoff_ns: int) -> int:
        """getReplicasChangePerPeriod: strict ``t > now - period``, outdated flag ignored."""
        return sum(e.change for e in events if e.t_ns > cutoff_ns)

    def _period_start(self, now_ns: int, current: int, policy: HpaPolicy) -> int:
        cutoff = now_ns - to_ns(policy.period_s)
        added = self._changes_in_period(self._up_events, cutoff)
        deleted = self._changes_in_period(self._down_events, cutoff)
        return current - added + deleted

    def _policy_limit(self, now_ns: int, current: int, rules: HpaRules, up: bool) -> int:
        """The limit ``rules`` put on a change from ``current``: each policy's from the
        replicas at its period's start (``Pods`` adds or takes its value, ``Percent``
        scales by it), the largest change for ``selectPolicy: Max`` and the smallest for
        ``Min`` (calculateScaleUpLimitWithScalingRules and
        calculateScaleDownLimitWithBehaviors); ``current`` when ``Disabled``."""
        if rules.select_policy == "Disabled":
            return current
        limits = []
        for p in rules.policies:
            start = self._period_start(now_ns, current, p)
            if p.type == "Pods":
                limits.append(start + p.value if up else start - p.value)
            elif up:  # ceil in float64, as Go does
                limits.append(math.ceil(float(start) * (1.0 + float(p.value) / 100.0)))
            else:  # int32() conversion truncates toward zero
                limits.append(int(float(start) * (1.0 - float(p.value) / 100.0)))
        largest_change = (rules.select_policy == "Max") == up
        return max(limits) if largest_change else min(limits)

    def _rate_limit(self, now_ns: int, current: int, desired: int, behavior: HpaBehavior) -> int:
        """convertDesiredReplicasWithBehaviorRate: policies, selectPolicy, then min/max."""
        cfg = self.config
        if desired > current:
            limit = max(self._policy_limit(now_ns, current, behavior.scale_up, True), current)
            return min(desired, min(cfg.max_replicas, limit))
        if desired < current:
            limit = min(self._policy_limit(now_ns, current, behavior.scale_down, False), current)
            return max(desired, max(cfg.min_replicas, limit))
        return desired

    def _store_scale_event(
        self, now_ns: int, behavior: HpaBehavior, previous: int, new: int
    ) -> None:
        """storeScaleEvent: mark events older than the longest period, reuse a slot."""
        if new > previous:
            events, rules, change = self._up_events, behavior.scale_up, new - previous
        else:
            events, rules, change = self._down_events, behavior.scale_down, previous - new
        cutoff = now_ns - to_ns(rules.longest_period_s)
        for e in events:
            if e.t_ns < cutoff:
                e.outdated = True
        for i, e in enumerate(events):
            if e.outdated:
                events[i] = _ScaleEvent(change, now_ns)
                return
        events.append(_ScaleEvent(change, now_ns))
