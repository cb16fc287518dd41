"""The Kubernetes HorizontalPodAutoscaler (autoscaling/v2), over External metrics.

Why a faithful emulation rather than "ceil(usage / target)": the replica count
an autoscaler reaches, and when, depends on details such as which replica
count the ratio divides by (status, not ready pods), inclusive tolerance
bounds, strict stabilization windows, float64 rounding of Percent policies and
the difference between ``behavior: nil`` and a defaulted behavior. Each rule
here follows kubernetes/kubernetes ``pkg/controller/podautoscaler/
horizontal.go`` and ``replica_calculator.go``, and
``pkg/apis/autoscaling/v2/defaults.go`` for the API defaults; docs/control-plane.md
states them in words with worked examples.

Times are seconds of simulated time; internally they are compared as integer
nanoseconds, as Go's ``time.Time`` does, so window boundaries are exact.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "DEFAULT_SCALE_DOWN_POLICIES",
    "DEFAULT_SCALE_UP_POLICIES",
    "Hpa",
    "HpaBehavior",
    "HpaConfig",
    "HpaMetric",
    "HpaPolicy",
    "HpaRules",
    "quantize_milli",
]

PolicyType = Literal["Pods", "Percent"]
SelectPolicy = Literal["Max", "Min", "Disabled"]
TargetType = Literal["AverageValue", "Value"]

_POLICY_TYPES = ("Pods", "Percent")
_SELECT_POLICIES = ("Max", "Min", "Disabled")
_TARGET_TYPES = ("AverageValue", "Value")
_MAX_WINDOW_S = 3600.0
_MAX_PERIOD_S = 1800.0
_NS = 1_000_000_000

# Legacy (behavior: nil) scale-up limit: max(2 * current, 4) (horizontal.go
# scaleUpLimitFactor / scaleUpLimitMinimum).
_LEGACY_UP_FACTOR = 2.0
_LEGACY_UP_MINIMUM = 4.0


def _ns(seconds: float) -> int:
    """Seconds to integer nanoseconds, so comparisons are exact like Go's."""
    return round(seconds * _NS)


def quantize_milli(value: float) -> int:
    """A metric value as the integer milli-units the HPA computes with.

    KEDA formats values with three decimals (``%.3f``, correctly rounded) and
    the HPA reads ``MilliValue()``; NaN and Inf become 0 (kedacore/keda
    ``pkg/scalers/scaler.go``). Negative values are clamped to 0 here: a
    negative proposal would be discarded by the HPA anyway.
    """
    if math.isnan(value) or math.isinf(value) or value <= 0.0:
        return 0
    return round(float(f"{value:.3f}") * 1000.0)


@dataclass(frozen=True)
class HpaPolicy:
    """One scaling policy: at most ``value`` pods or percent per ``period_s``."""

    type: PolicyType
    value: int
    period_s: float

    def __post_init__(self) -> None:
        if self.type not in _POLICY_TYPES:
            raise ValueError(f"HpaPolicy.type must be 'Pods' or 'Percent', got {self.type!r}")
        if isinstance(self.value, bool) or not isinstance(self.value, int) or self.value <= 0:
            raise ValueError(f"HpaPolicy.value must be an int > 0, got {self.value!r}")
        if not (1.0 <= self.period_s <= _MAX_PERIOD_S):
            raise ValueError(f"HpaPolicy.period_s must be in [1, 1800], got {self.period_s!r}")


@dataclass(frozen=True)
class HpaRules:
    """One direction of ``spec.behavior`` (scaleUp or scaleDown), already defaulted.

    ``stabilization_window_s`` None means "the controller's flag": for scale
    down that is ``HpaConfig.downscale_stabilization_s``; for scale up the API
    default is 0 (the API always fills it, so None is read as 0).
    ``tolerance`` None means the controller's ``HpaConfig.tolerance``.
    """

    stabilization_window_s: float | None
    select_policy: SelectPolicy
    policies: tuple[HpaPolicy, ...]
    tolerance: float | None = None

    def __post_init__(self) -> None:
        w = self.stabilization_window_s
        if w is not None and not (0.0 <= w <= _MAX_WINDOW_S):
            raise ValueError(f"stabilization_window_s must be in [0, 3600], got {w!r}")
        if self.select_policy not in _SELECT_POLICIES:
            raise ValueError(
                f"select_policy must be 'Max', 'Min' or 'Disabled', got {self.select_policy!r}"
            )
        if not isinstance(self.policies, tuple) or not self.policies:
            raise ValueError("policies must be a non-empty tuple of HpaPolicy")
        for p in self.policies:
            if not isinstance(p, HpaPolicy):
                raise ValueError(f"policies must hold HpaPolicy items, got {p!r}")
        if self.tolerance is not None and not (0.0 <= self.tolerance < math.inf):
            raise ValueError(f"tolerance must be >= 0, got {self.tolerance!r}")

    @property
    def longest_period_s(self) -> float:
        """The longest policy period: scale events older than this are reusable."""
        return max(p.period_s for p in self.policies)


DEFAULT_SCALE_UP_POLICIES: tuple[HpaPolicy, ...] = (
    HpaPolicy("Pods", 4, 15.0),
    HpaPolicy("Percent", 100, 15.0),
)
"""API default scaleUp policies (pkg/apis/autoscaling/v2/defaults.go)."""
DEFAULT_SCALE_DOWN_POLICIES: tuple[HpaPolicy, ...] = (HpaPolicy("Percent", 100, 15.0),)
"""API default scaleDown policies (pkg/apis/autoscaling/v2/defaults.go)."""

_RULE_KEYS = frozenset({"stabilizationWindowSeconds", "selectPolicy", "policies", "tolerance"})
_POLICY_KEYS = frozenset({"type", "value", "periodSeconds"})


def _parse_quantity(raw: Any, where: str) -> float:
    """A Kubernetes Quantity as a float: a number, "0.05" or milli form "50m"."""
    if isinstance(raw, bool):
        raise ValueError(f"{where}: expected a quantity, got {raw!r}")
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str):
        text = raw.strip()
        try:
            if text.endswith("m"):
                return float(text[:-1]) / 1000.0
            return float(text)
        except ValueError:
            pass
    raise ValueError(f"{where}: cannot parse quantity {raw!r} (use a number, '0.05' or '50m')")


def _parse_int(raw: Any, where: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ValueError(f"{where} must be an integer, got {raw!r}")
    return raw


def _rules_from_spec(
    raw: Any,
    where: str,
    default_window: float | None,
    default_policies: tuple[HpaPolicy, ...],
) -> HpaRules:
    """Defaults filled field by field (copyHPAScalingRules): a given field wins."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where} must be a mapping, got {type(raw).__name__}")
    unknown = set(raw) - _RULE_KEYS
    if unknown:
        raise ValueError(f"{where}: unsupported field(s) {sorted(unknown)}")
    window: float | None = default_window
    if raw.get("stabilizationWindowSeconds") is not None:
        window = float(
            _parse_int(raw["stabilizationWindowSeconds"], f"{where}.stabilizationWindowSeconds")
        )
    raw_select = raw.get("selectPolicy")
    select: SelectPolicy
    if raw_select is None or raw_select == "Max":
        select = "Max"
    elif raw_select == "Min":
        select = "Min"
    elif raw_select == "Disabled":
        select = "Disabled"
    else:
        raise ValueError(f"{where}.selectPolicy must be Max, Min or Disabled, got {raw_select!r}")
    policies = default_policies
    if raw.get("policies") is not None:
        items = raw["policies"]
        if not isinstance(items, list | tuple) or not items:
            raise ValueError(f"{where}.policies must be a non-empty list")
        parsed: list[HpaPolicy] = []
        for i, item in enumerate(items):
            at = f"{where}.policies[{i}]"
            if not isinstance(item, Mapping):
                raise ValueError(f"{at} must be a mapping")
            extra = set(item) - _POLICY_KEYS
            missing = _POLICY_KEYS - set(item)
            if extra or missing:
                raise ValueError(
                    f"{at}: needs exactly type, value, periodSeconds "
                    f"(unknown {sorted(extra)}, missing {sorted(missing)})"
                )
            parsed.append(
                HpaPolicy(
                    type=item["type"],
                    value=_parse_int(item["value"], f"{at}.value"),
                    period_s=float(_parse_int(item["periodSeconds"], f"{at}.periodSeconds")),
                )
            )
        policies = tuple(parsed)
    tolerance = None
    if raw.get("tolerance") is not None:
        tolerance = _parse_quantity(raw["tolerance"], f"{where}.tolerance")
    return HpaRules(
        stabilization_window_s=window,
        select_policy=select,
        policies=policies,
        tolerance=tolerance,
    )


@dataclass(frozen=True)
class HpaBehavior:
    """``spec.behavior``: both directions, with the API defaults applied."""

    scale_up: HpaRules
    scale_down: HpaRules

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> HpaBehavior:
        """Parse a Kubernetes ``behavior:`` mapping and apply the API defaults.

        Defaults apply field by field (pkg/apis/autoscaling/v2/defaults.go):
        scaleUp window 0, Max, {Pods 4 / 15 s, Percent 100 / 15 s}; scaleDown
        window unset (the controller's 5-minute flag), Max, {Percent 100 / 15 s}.
        A given ``policies`` list replaces the default list whole.
        """
        if not isinstance(spec, Mapping):
            raise ValueError(f"behavior must be a mapping, got {type(spec).__name__}")
        unknown = set(spec) - {"scaleUp", "scaleDown"}
        if unknown:
            raise ValueError(f"behavior: unsupported field(s) {sorted(unknown)}")
        return cls(
            scale_up=_rules_from_spec(
                spec.get("scaleUp"), "behavior.scaleUp", 0.0, DEFAULT_SCALE_UP_POLICIES
            ),
            scale_down=_rules_from_spec(
                spec.get("scaleDown"), "behavior.scaleDown", None, DEFAULT_SCALE_DOWN_POLICIES
            ),
        )


@dataclass(frozen=True)
class HpaMetric:
    """The target of one External metric of the HPA (KEDA makes one per trigger)."""

    target_type: TargetType
    target: float

    def __post_init__(self) -> None:
        if self.target_type not in _TARGET_TYPES:
            raise ValueError(
                f"HpaMetric.target_type must be 'AverageValue' or 'Value', got {self.target_type!r}"
            )
        if not math.isfinite(self.target) or quantize_milli(self.target) <= 0:
            raise ValueError(f"HpaMetric.target must be >= 0.001, got {self.target!r}")


@dataclass(frozen=True)
class HpaConfig:
    """One HPA: spec fields plus the kube-controller-manager flags it runs under.

    ``tolerance``, ``downscale_stabilization_s`` and ``sync_period_s`` are the
    controller flags (defaults 0.1, 5 min, 15 s). ``behavior`` None is the
    legacy path that KEDA produces when the ScaledObject sets no behavior.
    ``target_type``/``target`` are the first metric's; ``extra_metrics`` the
    others', in trigger order (:attr:`metrics` lists them all).
    """

    min_replicas: int
    max_replicas: int
    behavior: HpaBehavior | None = None
    target_type: TargetType = "AverageValue"
    target: float = 1.0
    tolerance: float = 0.1
    downscale_stabilization_s: float = 300.0
    sync_period_s: float = 15.0
    extra_metrics: tuple[HpaMetric, ...] = ()

    @property
    def metrics(self) -> tuple[HpaMetric, ...]:
        """Every metric's target, the first one (``target_type``/``target``) first."""
        return (HpaMetric(self.target_type, self.target), *self.extra_metrics)

    def __post_init__(self) -> None:
        for name in ("min_replicas", "max_replicas"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"HpaConfig.{name} must be an int, got {v!r}")
        if self.min_replicas < 1:
            raise ValueError(
                f"HpaConfig.min_replicas must be >= 1 (scale to zero is KEDA's job), "
                f"got {self.min_replicas}"
            )
        if self.max_replicas < self.min_replicas:
            raise ValueError(
                f"HpaConfig.max_replicas ({self.max_replicas}) must be >= "
                f"min_replicas ({self.min_replicas})"
            )
        if self.behavior is not None and not isinstance(self.behavior, HpaBehavior):
            raise ValueError("HpaConfig.behavior must be an HpaBehavior or None")
        if self.target_type not in _TARGET_TYPES:
            raise ValueError(
                f"HpaConfig.target_type must be 'AverageValue' or 'Value', got {self.target_type!r}"
            )
        if not math.isfinite(self.target) or quantize_milli(self.target) <= 0:
            raise ValueError(f"HpaConfig.target must be >= 0.001, got {self.target!r}")
        if not (0.0 <= self.tolerance < math.inf):
            raise ValueError(f"HpaConfig.tolerance must be >= 0, got {self.tolerance!r}")
        if not (0.0 <= self.downscale_stabilization_s < math.inf):
            raise ValueError(
                "HpaConfig.downscale_stabilization_s must be >= 0, "
                f"got {self.downscale_stabilization_s!r}"
            )
        if not (0.0 < self.sync_period_s < math.inf):
            raise ValueError(f"HpaConfig.sync_period_s must be > 0, got {self.sync_period_s!r}")
        if not isinstance(self.extra_metrics, tuple) or not all(
            isinstance(m, HpaMetric) for m in self.extra_metrics
        ):
            raise ValueError("HpaConfig.extra_metrics must be a tuple of HpaMetric")


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
            self._up_window_ns = _ns(up_w if up_w is not None else 0.0)
            self._down_window_ns = _ns(
                down_w if down_w is not None else config.downscale_stabilization_s
            )
        else:
            self._up_window_ns = 0
            self._down_window_ns = _ns(config.downscale_stabilization_s)

    # -- public -----------------------------------------------------------------

    @property
    def recommendations(self) -> tuple[tuple[int, float], ...]:
        """The stored raw recommendations as (replicas, time_s), for inspection."""
        recs = self._recommendations or []
        return tuple((r.value, r.t_ns / _NS) for r in recs)

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
        now_ns = _ns(now)
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
        up_limit = int(max(_LEGACY_UP_FACTOR * float(current), _LEGACY_UP_MINIMUM))
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
        cutoff = now_ns - _ns(policy.period_s)
        added = self._changes_in_period(self._up_events, cutoff)
        deleted = self._changes_in_period(self._down_events, cutoff)
        return current - added + deleted

    def _rate_limit(self, now_ns: int, current: int, desired: int, behavior: HpaBehavior) -> int:
        """convertDesiredReplicasWithBehaviorRate: policies, selectPolicy, then min/max."""
        cfg = self.config
        if desired > current:
            rules = behavior.scale_up
            if rules.select_policy == "Disabled":
                limit = current
            else:
                proposals = []
                for p in rules.policies:
                    start = self._period_start(now_ns, current, p)
                    if p.type == "Pods":
                        proposals.append(start + p.value)
                    else:  # ceil in float64, as Go does
                        proposals.append(math.ceil(float(start) * (1.0 + float(p.value) / 100.0)))
                limit = max(proposals) if rules.select_policy == "Max" else min(proposals)
            limit = max(limit, current)
            maximum = min(cfg.max_replicas, limit)
            return min(desired, maximum)
        if desired < current:
            rules = behavior.scale_down
            if rules.select_policy == "Disabled":
                limit = current
            else:
                proposals = []
                for p in rules.policies:
                    start = self._period_start(now_ns, current, p)
                    if p.type == "Pods":
                        proposals.append(start - p.value)
                    else:  # int32() conversion truncates toward zero
                        proposals.append(int(float(start) * (1.0 - float(p.value) / 100.0)))
                # Max picks the biggest drop (lowest limit), Min the smallest.
                limit = min(proposals) if rules.select_policy == "Max" else max(proposals)
            limit = min(limit, current)
            minimum = max(cfg.min_replicas, limit)
            return max(desired, minimum)
        return desired

    def _store_scale_event(
        self, now_ns: int, behavior: HpaBehavior, previous: int, new: int
    ) -> None:
        """storeScaleEvent: mark events older than the longest period, reuse a slot."""
        if new > previous:
            events, rules, change = self._up_events, behavior.scale_up, new - previous
        else:
            events, rules, change = self._down_events, behavior.scale_down, previous - new
        cutoff = now_ns - _ns(rules.longest_period_s)
        for e in events:
            if e.t_ns < cutoff:
                e.outdated = True
        for i, e in enumerate(events):
            if e.outdated:
                events[i] = _ScaleEvent(change, now_ns)
                return
        events.append(_ScaleEvent(change, now_ns))
