"""Sustainable per-replica capacity from an engine profile or from settings (pure).

The policy's ``load`` and ``forecast`` terms divide demand by what one
replica carries without hurting latency: derived from a ``profile``'s
step-time model, given as ``capacityTokensPerSecond`` (requests/s then
unknown), or else unknown here (the tracker learns it from saturated moments).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from decision.policy import ReplicaCapacity
from decision.settings import ScalerSettings

__all__ = ["DEFAULT_MIX", "RequestShape", "capacity_for", "profile_capacity"]


@dataclass(frozen=True)
class RequestShape:
    """Mean prompt and output tokens of the workload capacity is quoted for."""

    prompt_tokens: int = 1024
    output_tokens: int = 256

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ValueError("prompt_tokens and output_tokens must be >= 1")


# A chat-like mix (ShareGPT/LMSYS-style prompts with a system prompt,
# answers of a few paragraphs).
DEFAULT_MIX = RequestShape()
# 100 ms per token is about the slowest stream that still reads as fluent.
DEFAULT_ITL_BUDGET_S = 0.1


def _attr(obj: Any, path: str, default: Any) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return default
    return obj


def profile_capacity(
    profile: Any,
    *,
    kv_target: float = 0.8,
    mix: RequestShape = DEFAULT_MIX,
    itl_budget_s: float = DEFAULT_ITL_BUDGET_S,
) -> ReplicaCapacity:
    """Capacity of one replica of ``profile`` (an ``engine.profiles.Profile``).

    The largest decode batch B that keeps KV usage at or under ``kv_target``
    (the policy's ``kv_cache`` target, so the two terms agree), stays within
    vLLM's ``max_num_seqs`` and keeps one step (chunked prefill mixed in)
    within ``itl_budget_s``. In steady state B/D requests finish and start
    per step, so a step prefills B x P / D prompt tokens and decodes B::

        step     = step_time_s(B*P/D, B, B*(P + D/2))
        tokens/s = (B*P/D + B) / step          (prompt + generation)
        req/s    = (B/D) / step

    A profile whose server stalls between steps loses that share of the
    busy time: ``step`` is then the step over ``1 - share``.
    """
    if not 0 < kv_target <= 1 or itl_budget_s <= 0:
        raise ValueError("kv_target must be in (0, 1] and itl_budget_s > 0")
    p, d = mix.prompt_tokens, mix.output_tokens
    per_seq = p + d / 2 + _attr(profile, "vllm.block_size", 16) / 2
    kv_tokens = float(_attr(profile, "kv_tokens", math.inf))
    max_seqs = int(_attr(profile, "vllm.max_num_seqs", 256))
    kv_batch = math.floor(kv_target * kv_tokens / per_seq) if math.isfinite(kv_tokens) else max_seqs
    upper = max(1, min(max_seqs, kv_batch))

    def step(batch: int) -> float:
        prefill = max(0, round(batch * p / d))
        return float(profile.step_time_s(prefill, batch, int(batch * (p + d / 2))))

    # step time is non-decreasing in the batch: binary search the largest
    # batch within the ITL budget (batch 1 always counts, even if slow).
    lo, hi = 1, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if step(mid) <= itl_budget_s:
            lo = mid
        else:
            hi = mid - 1
    batch = lo
    # a profile's stalls (``EngineStalls.share``) take their part of the busy time
    t = step(batch) / (1.0 - float(_attr(profile, "stalls.share", 0.0)))
    requests = (batch / d) / t
    tokens = (batch * p / d + batch) / t
    return ReplicaCapacity(requests_per_s=requests, tokens_per_s=tokens)


@lru_cache(maxsize=256)
def _cached_profile_capacity(name: str, kv_target: float) -> ReplicaCapacity:
    from engine.profiles import get_profile

    return profile_capacity(get_profile(name), kv_target=kv_target)


def capacity_for(settings: ScalerSettings, speed: float = 1.0) -> ReplicaCapacity:
    """Capacity the settings imply: profile-derived, explicit tokens/s, or unknown.

    ``speed`` is how many model seconds pass per second of the clock the
    rates are counted on: a replica of the profile running ``speed`` times
    faster (the stack's compressed time) carries ``speed`` x the profile's
    capacity per clock second. An explicit ``capacityTokensPerSecond`` is
    already in the rates' own seconds and is left as it is.
    """
    if settings.profile is not None:
        cap = _cached_profile_capacity(settings.profile, settings.target_kv_cache_usage)
        if speed == 1.0:
            return cap
        return ReplicaCapacity(
            requests_per_s=None if cap.requests_per_s is None else cap.requests_per_s * speed,
            tokens_per_s=None if cap.tokens_per_s is None else cap.tokens_per_s * speed,
        )
    if settings.capacity_tokens_per_second is not None:
        return ReplicaCapacity(
            requests_per_s=None, tokens_per_s=settings.capacity_tokens_per_second
        )
    return ReplicaCapacity.unknown()
