"""The HorizontalPodAutoscaler's configuration as the simulator reads it:
behavior rules and policies, metric targets, the API's defaults and their
validation (kubernetes/kubernetes ``pkg/apis/autoscaling/v2/defaults.go``).

Apart from the controller (``simulations.autoscaling.hpa``) so the ScaledObject reader
and the tuner build and check configurations without the controller's state.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from engine.validate import int_at_least

__all__ = [
    "DEFAULT_SCALE_DOWN_POLICIES",
    "DEFAULT_SCALE_UP_POLICIES",
    "LEGACY_UP_FACTOR",
    "LEGACY_UP_MINIMUM",
    "NS_PER_S",
    "HpaBehavior",
    "HpaConfig",
    "HpaMetric",
    "HpaPolicy",
    "HpaRules",
    "quantize_milli",
    "to_ns",
]

PolicyType = Literal["Pods", "Percent"]
SelectPolicy = Literal["Max", "Min", "Disabled"]
TargetType = Literal["AverageValue", "Value"]

_POLICY_TYPES = ("Pods", "Percent")
_SELECT_POLICIES = ("Max", "Min", "Disabled")
_TARGET_TYPES = ("AverageValue", "Value")
_MAX_WINDOW_S = 3600.0
_MAX_PERIOD_S = 1800.0
NS_PER_S = 1_000_000_000

# Legacy (behavior: nil) scale-up limit: max(2 * current, 4) (horizontal.go
# scaleUpLimitFactor / scaleUpLimitMinimum).
LEGACY_UP_FACTOR = 2.0
LEGACY_UP_MINIMUM = 4.0


def to_ns(seconds: float) -> int:
    """Seconds to integer nanoseconds, so comparisons are exact like Go's."""
    return round(seconds * NS_PER_S)


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
        if not int_at_least(self.value, 1):
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
