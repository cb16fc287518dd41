"""The limits a vLLM V1 scheduler works within, and what the replica needs
from a profile.

Kept as a Protocol so the replica depends on the shape of a profile (the
vLLM settings, the KV capacity and the step-time model), not on the profile
catalogue: tests and callers can pass any object with these attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class VllmSettingsLike(Protocol):
    @property
    def max_model_len(self) -> int: ...
    @property
    def max_num_seqs(self) -> int: ...
    @property
    def max_num_batched_tokens(self) -> int: ...
    @property
    def block_size(self) -> int: ...
    @property
    def enable_chunked_prefill(self) -> bool: ...


class ProfileLike(Protocol):
    """The part of `engine.profiles.Profile` the replica uses."""

    @property
    def vllm(self) -> VllmSettingsLike: ...

    @property
    def kv_blocks(self) -> int: ...

    def step_time_s(self, prefill_tokens: int, decode_seqs: int, context_tokens: int) -> float:
        """Seconds one engine iteration takes for this batch."""
        ...


@dataclass(frozen=True, slots=True)
class SchedulerLimits:
    """vLLM's scheduler knobs, validated once (the replica trusts them after)."""

    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    enable_chunked_prefill: bool
    num_gpu_blocks: int

    def __post_init__(self) -> None:
        for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size",
                     "num_gpu_blocks"):  # fmt: skip
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"scheduler limit {name} must be a positive integer, got {value!r}"
                )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                "with chunked prefill disabled, max_num_batched_tokens "
                f"({self.max_num_batched_tokens}) must be >= max_model_len ({self.max_model_len}), "
                "as vLLM requires"
            )

    @classmethod
    def from_profile(cls, profile: ProfileLike) -> SchedulerLimits:
        v = profile.vllm
        return cls(
            max_model_len=int(v.max_model_len),
            max_num_seqs=int(v.max_num_seqs),
            max_num_batched_tokens=int(v.max_num_batched_tokens),
            block_size=int(v.block_size),
            enable_chunked_prefill=bool(v.enable_chunked_prefill),
            num_gpu_blocks=int(profile.kv_blocks),
        )

    @property
    def kv_tokens(self) -> int:
        return self.num_gpu_blocks * self.block_size
