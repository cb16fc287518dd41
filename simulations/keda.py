"""KEDA's part of a ScaledObject: activation (0 <-> N), cooldown, idle, fallback.

Why it is separate from the HPA: KEDA writes the scale subresource directly
for 0 <-> max(min, 1), idle and cooldown, bypassing the HPA's behavior and
stabilization, while everything between min and max is the HPA's. The rules
follow kedacore/keda ``pkg/scaling/executor/scale_scaledobjects.go``
(``RequestScale``, ``scaleFromZeroOrIdle``, ``scaleToZeroOrIdle``),
``pkg/fallback/fallback.go`` (``GetMetricsWithFallback``, ``doFallback``) and
``pkg/scaling/scale_handler.go`` (the polling loop and external-push);
docs/control-plane.md states them in words with worked examples.

One KEDA trigger is modelled. Times are seconds of simulated time, compared
as integer nanoseconds like Go's ``time.Time``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = ["FallbackBehavior", "Keda", "KedaConfig"]

FallbackBehavior = Literal[
    "static", "currentReplicas", "currentReplicasIfHigher", "currentReplicasIfLower"
]
_FALLBACK_BEHAVIORS = (
    "static",
    "currentReplicas",
    "currentReplicasIfHigher",
    "currentReplicasIfLower",
)
_NS = 1_000_000_000


def _ns(seconds: float) -> int:
    return round(seconds * _NS)


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"KedaConfig.{name} must be an int >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class KedaConfig:
    """The ScaledObject fields KEDA itself acts on (defaults as in the CRD).

    ``fallback_failure_threshold`` and ``fallback_replicas`` are given
    together or not at all (the ``fallback:`` block). ``fallback_behavior``
    chooses the fallback replica count R (``static`` = fallback_replicas).
    """

    polling_interval_s: float = 30.0
    cooldown_period_s: float = 300.0
    initial_cooldown_period_s: float = 0.0
    min_replica_count: int = 0
    max_replica_count: int = 100
    idle_replica_count: int | None = None
    fallback_failure_threshold: int | None = None
    fallback_replicas: int | None = None
    fallback_behavior: FallbackBehavior = "static"

    def __post_init__(self) -> None:
        if not (0.0 < self.polling_interval_s < math.inf):
            raise ValueError(
                f"KedaConfig.polling_interval_s must be > 0, got {self.polling_interval_s!r}"
            )
        for name in ("cooldown_period_s", "initial_cooldown_period_s"):
            v = getattr(self, name)
            if not (0.0 <= v < math.inf):
                raise ValueError(f"KedaConfig.{name} must be >= 0, got {v!r}")
        _check_int("min_replica_count", self.min_replica_count, 0)
        _check_int("max_replica_count", self.max_replica_count, 1)
        if self.max_replica_count < self.min_replica_count:
            raise ValueError(
                f"KedaConfig.max_replica_count ({self.max_replica_count}) must be >= "
                f"min_replica_count ({self.min_replica_count})"
            )
        if self.idle_replica_count is not None:
            _check_int("idle_replica_count", self.idle_replica_count, 0)
            if self.idle_replica_count >= self.min_replica_count:
                raise ValueError(
                    f"KedaConfig.idle_replica_count ({self.idle_replica_count}) must be < "
                    f"min_replica_count ({self.min_replica_count})"
                )
        if (self.fallback_failure_threshold is None) != (self.fallback_replicas is None):
            raise ValueError(
                "KedaConfig.fallback_failure_threshold and fallback_replicas must be "
                "given together (the fallback block) or both be None"
            )
        if self.fallback_failure_threshold is not None:
            _check_int("fallback_failure_threshold", self.fallback_failure_threshold, 0)
        if self.fallback_replicas is not None:
            _check_int("fallback_replicas", self.fallback_replicas, 0)
        if self.fallback_behavior not in _FALLBACK_BEHAVIORS:
            raise ValueError(
                f"KedaConfig.fallback_behavior must be one of {_FALLBACK_BEHAVIORS}, "
                f"got {self.fallback_behavior!r}"
            )

    @property
    def has_fallback(self) -> bool:
        """Whether the ScaledObject has a ``fallback:`` block."""
        return self.fallback_failure_threshold is not None

    def hpa_min_replicas(self) -> int:
        """The HPA's minReplicas KEDA creates: minReplicaCount if > 0 else 1."""
        return self.min_replica_count if self.min_replica_count > 0 else 1

    def activation_replicas(self) -> int:
        """What scaleFromZeroOrIdle writes: minReplicaCount if > 0 else 1."""
        return self.hpa_min_replicas()


class Keda:
    """One ScaledObject's KEDA-side state: lastActiveTime and the failure count."""

    def __init__(self, config: KedaConfig, created_s: float = 0.0) -> None:
        if not isinstance(config, KedaConfig):
            raise ValueError("Keda needs a KedaConfig")
        if not math.isfinite(created_s):
            raise ValueError(f"created_s must be finite, got {created_s!r}")
        self.config = config
        self.created_s = created_s
        self.last_active_s: float | None = None
        self.failures = 0

    # -- public -----------------------------------------------------------------

    @property
    def fallback_active(self) -> bool:
        """Failures strictly above the threshold, with a fallback block."""
        threshold = self.config.fallback_failure_threshold
        return threshold is not None and self.failures > threshold

    def poll(self, now: float, *, spec: int, active: bool, error: bool = False) -> int | None:
        """One polling-loop pass: the spec KEDA writes directly, or None.

        ``spec`` is the Deployment's spec.replicas; ``active`` the trigger's
        IsActive; ``error`` that GetMetrics/IsActive failed (then ``active`` is
        unknown and ignored). A failure counts toward the fallback threshold and
        a success resets it; while fallback is active the poll sees the
        trigger as active.
        """
        _check_spec(spec)
        if error:
            self.failures += 1
            if self.fallback_active:
                return self._request_scale(now, spec, active=True, error=False)
            return self._request_scale(now, spec, active=False, error=True)
        self.failures = 0
        return self._request_scale(now, spec, active=active, error=False)

    def push_active(self, now: float, *, spec: int) -> int | None:
        """An external-push ``true`` message: RequestScale(active, no error) at once.

        It scales from 0 (or idle) to max(min, 1) and refreshes lastActiveTime,
        which extends the cooldown. A ``false`` message does nothing, so it has
        no method.
        """
        _check_spec(spec)
        return self._request_scale(now, spec, active=True, error=False)

    def metric_for_hpa(
        self,
        value: float | None,
        *,
        spec: int,
        target: float,
        metric_type: Literal["AverageValue", "Value"] = "AverageValue",
        ready: int | None = None,
    ) -> float | None:
        """The metric the HPA path gets, through fallback.

        A failure (``value`` None) adds 1 to the failure count, a success resets
        it and passes the value through. Past the threshold (strictly greater)
        KEDA answers ``target * R`` (AverageValue) or ``target * R / ready``
        (Value; None when no pod is ready), truncated to milli-units; otherwise
        the failure reaches the HPA as None.
        """
        _check_spec(spec)
        if value is not None:
            self.failures = 0
            return value
        self.failures += 1
        if not self.fallback_active:
            return None
        replicas = float(self._fallback_replicas(spec))
        if metric_type == "Value":
            if ready is None:
                raise ValueError("metric_for_hpa: a Value target needs ready=")
            if ready == 0:
                return None  # "readyReplicas is zero, cannot do fallback"
            replicas /= float(ready)
        elif metric_type != "AverageValue":
            raise ValueError(f"metric_type must be 'AverageValue' or 'Value', got {metric_type!r}")
        return int(target * 1000.0 * replicas) / 1000.0

    # -- internals ----------------------------------------------------------------

    def _fallback_replicas(self, spec: int) -> int:
        fixed = self.config.fallback_replicas
        assert fixed is not None
        behavior = self.config.fallback_behavior
        if behavior == "currentReplicas":
            return spec
        if behavior == "currentReplicasIfHigher":
            return max(spec, fixed)
        if behavior == "currentReplicasIfLower":
            return min(spec, fixed)
        return fixed

    def _request_scale(self, now: float, spec: int, *, active: bool, error: bool) -> int | None:
        """RequestScale for a Deployment (current replicas = spec.replicas)."""
        cfg = self.config
        minimum = cfg.min_replica_count
        idle = cfg.idle_replica_count
        if active:
            if (idle is not None and spec < minimum) or spec == 0:
                self.last_active_s = now  # scaleFromZeroOrIdle, on a successful write
                return cfg.activation_replicas()
            if error:
                return None  # some triggers erroring: Ready=Unknown, no update
            self.last_active_s = now
            return None
        if error and cfg.has_fallback and cfg.fallback_replicas != 0:
            return None  # fallback will act through the HPA
        if error and not cfg.has_fallback:
            return None  # errors never scale to zero
        if (idle is not None and spec > idle) or (spec > 0 and minimum == 0):
            return self._scale_to_zero_or_idle(now)
        if spec < minimum and idle is None:
            return minimum
        return None

    def _scale_to_zero_or_idle(self, now: float) -> int | None:
        """Only when lastActiveTime + cooldown is strictly before now."""
        cfg = self.config
        now_ns = _ns(now)
        if self.last_active_s is not None:
            expired = _ns(self.last_active_s) + _ns(cfg.cooldown_period_s) < now_ns
        else:
            expired = _ns(self.created_s) + _ns(cfg.initial_cooldown_period_s) < now_ns
        if not expired:
            return None  # ScalerCooldown
        return cfg.idle_replica_count if cfg.idle_replica_count is not None else 0


def _check_spec(spec: int) -> None:
    if isinstance(spec, bool) or not isinstance(spec, int) or spec < 0:
        raise ValueError(f"spec must be an int >= 0, got {spec!r}")
