"""KEDA's part of a ScaledObject: activation (0 <-> N), cooldown, idle, fallback.

Apart from the HPA because KEDA writes the scale subresource itself for 0 <->
max(min, 1), idle and cooldown, bypassing the HPA's behavior. The rules
follow kedacore/keda's ``scale_scaledobjects.go``, ``fallback.go`` and
``scale_handler.go``; docs/control-plane.md states them with worked examples.
Each trigger has its own failure count; a poll is active when any trigger is.
Times compare as integer nanoseconds, like Go's ``time.Time``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from engine.validate import int_at_least

__all__ = ["FallbackBehavior", "Keda", "KedaConfig", "TriggerPoll"]

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
        _check_int("KedaConfig.min_replica_count", self.min_replica_count, 0)
        _check_int("KedaConfig.max_replica_count", self.max_replica_count, 1)
        if self.max_replica_count < self.min_replica_count:
            raise ValueError(
                f"KedaConfig.max_replica_count ({self.max_replica_count}) must be >= "
                f"min_replica_count ({self.min_replica_count})"
            )
        if self.idle_replica_count is not None:
            _check_int("KedaConfig.idle_replica_count", self.idle_replica_count, 0)
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
            _check_int("KedaConfig.fallback_failure_threshold", self.fallback_failure_threshold, 0)
        if self.fallback_replicas is not None:
            _check_int("KedaConfig.fallback_replicas", self.fallback_replicas, 0)
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


@dataclass(frozen=True)
class TriggerPoll:
    """One trigger's answer to a poll: IsActive, or an error (then ``active`` is ignored)."""

    active: bool
    error: bool = False


class Keda:
    """One ScaledObject's KEDA-side state: lastActiveTime and each trigger's failure count."""

    def __init__(self, config: KedaConfig, created_s: float = 0.0, *, triggers: int = 1) -> None:
        if not isinstance(config, KedaConfig):
            raise ValueError("Keda needs a KedaConfig")
        if not math.isfinite(created_s):
            raise ValueError(f"created_s must be finite, got {created_s!r}")
        _check_int("triggers", triggers, 1)
        self.config = config
        self.created_s = created_s
        self.last_active_s: float | None = None
        self.failure_counts: list[int] = [0] * triggers
        """Consecutive failures per trigger (poll and HPA path alike)."""

    # -- public -----------------------------------------------------------------

    def in_fallback(self, trigger: int) -> bool:
        """Whether ``trigger``'s failures are strictly above the threshold."""
        threshold = self.config.fallback_failure_threshold
        return threshold is not None and self.failure_counts[trigger] > threshold

    def poll(self, now: float, *, spec: int, active: bool, error: bool = False) -> int | None:
        """One polling-loop pass of a one-trigger ScaledObject; see :meth:`poll_triggers`.

        ``active`` is the trigger's IsActive; ``error`` that GetMetrics/IsActive
        failed (then ``active`` is unknown and ignored).
        """
        return self.poll_triggers(now, spec=spec, results=(TriggerPoll(active, error),))

    def poll_triggers(
        self,
        now: float,
        *,
        spec: int,
        results: Sequence[TriggerPoll],
        active: Callable[[], bool] | None = None,
    ) -> int | None:
        """One polling-loop pass: the spec KEDA writes directly, or None.

        ``spec`` is the Deployment's spec.replicas; ``results`` each trigger's
        answer in trigger order. A trigger's failure counts toward the fallback
        threshold and its success resets its own count; a trigger in fallback
        is seen as active and not in error. The ScaledObject is active when any
        trigger is, and errored when any trigger errored outside fallback.
        ``active``, called once the counts are updated, replaces that activity
        (``scalingModifiers``: the composite value against
        ``activationTarget``); an error still makes it inactive.
        """
        _check_spec(spec)
        if len(results) != len(self.failure_counts):
            raise ValueError(
                f"poll: {len(self.failure_counts)} trigger(s), got {len(results)} result(s)"
            )
        any_active = error = False
        for i, result in enumerate(results):
            if result.error:
                self.failure_counts[i] += 1
                if self.in_fallback(i):
                    any_active = True
                else:
                    error = True
            else:
                self.failure_counts[i] = 0
                any_active = any_active or result.active
        if active is not None:
            any_active = not error and active()
        return self._request_scale(now, spec, active=any_active, error=error)

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
        trigger: int = 0,
    ) -> float | None:
        """The metric the HPA path gets for one trigger, through fallback.

        A failure (``value`` None) adds 1 to that trigger's failure count, a
        success resets it and passes the value through. Past the threshold (strictly greater)
        KEDA answers ``target * R`` (AverageValue) or ``target * R / ready``
        (Value; None when no pod is ready), truncated to milli-units; otherwise
        the failure reaches the HPA as None.
        """
        _check_spec(spec)
        if value is not None:
            self.failure_counts[trigger] = 0
            return value
        self.failure_counts[trigger] += 1
        if not self.in_fallback(trigger):
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

    def fallback_value(
        self,
        *,
        spec: int,
        target: float,
        metric_type: Literal["AverageValue", "Value"] = "AverageValue",
        ready: int | None = None,
    ) -> float | None:
        """The synthetic metric fallback serves now (None: no fallback block, or
        a Value target with no ready pod), whatever the failure counts."""
        if not self.config.has_fallback:
            return None
        replicas = float(self._fallback_replicas(spec))
        if metric_type == "Value":
            if not ready:
                return None
            replicas /= float(ready)
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


def _check_int(name: str, value: object, minimum: int) -> None:
    if not int_at_least(value, minimum):
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")


def _check_spec(spec: int) -> None:
    if isinstance(spec, bool) or not isinstance(spec, int) or spec < 0:
        raise ValueError(f"spec must be an int >= 0, got {spec!r}")
