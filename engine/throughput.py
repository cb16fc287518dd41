"""Closed-form load estimates built on a profile's step-time model.

They turn the per-iteration model into the figures published benchmarks
report (N users in a closed loop; a replica kept full), so the model can be
calibrated against them and a sustainable capacity quoted without a
simulation. Steady-state approximations: ramp-up and the final drain are
ignored, which makes them slightly optimistic.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol


class StepModel(Protocol):
    """The part of a profile these estimates need."""

    def step_time_s(self, prefill_tokens: int, decode_seqs: int, context_tokens: int) -> float: ...


@dataclass(frozen=True)
class RequestMix:
    """Mean prompt and output lengths of a workload.

    ``output_cv`` is the coefficient of variation of the output length. A
    running batch over-represents long answers (they stay longer), so its
    mean output progress is E[D^2] / (2 E[D]) = mean (1 + cv^2) / 2, not mean / 2.
    """

    prompt_tokens: float
    output_tokens: float
    output_cv: float = 0.0

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ValueError(
                f"RequestMix needs prompt_tokens >= 1 and output_tokens >= 1, got "
                f"{self.prompt_tokens} and {self.output_tokens}"
            )
        if self.output_cv < 0:
            raise ValueError(f"RequestMix output_cv must be >= 0, got {self.output_cv}")

    @property
    def inflight_context(self) -> float:
        """Mean KV tokens held by a running sequence (length-biased)."""
        return self.prompt_tokens + self.output_tokens * (1.0 + self.output_cv**2) / 2.0


# A ShareGPT-like chat mix as vLLM's benchmark_serving draws it (the arc53 L4
# run: 215 prompt and 197 output tokens per request); answers heavy-tailed.
SHAREGPT_MIX = RequestMix(prompt_tokens=215.0, output_tokens=197.0, output_cv=1.2)


@dataclass(frozen=True)
class SaturatedThroughput:
    batch: int
    step_s: float
    output_tokens_per_s: float
    input_tokens_per_s: float
    requests_per_s: float


def saturated_throughput(
    model: StepModel,
    *,
    kv_tokens: int,
    max_num_seqs: int,
    block_size: int,
    mix: RequestMix,
    chunked_prefill: bool,
) -> SaturatedThroughput:
    """Steady-state throughput of a replica that always has work queued.

    The running batch is as large as the KV cache (each sequence holding its
    in-flight context, rounded up by half a block) and ``max_num_seqs`` allow.
    Each step every running sequence decodes one token, and B / D requests
    finish and are replaced, so B x P / D prompt tokens are prefilled per step:
    inside the step with chunked prefill, as extra forward passes without it.
    """
    if kv_tokens < 1 or max_num_seqs < 1 or block_size < 1:
        raise ValueError("saturated_throughput: kv_tokens, max_num_seqs, block_size must be >= 1")
    per_seq = mix.inflight_context + block_size / 2.0
    batch = max(1, min(max_num_seqs, math.floor(kv_tokens / per_seq)))
    context = int(batch * mix.inflight_context)
    replaced = batch / mix.output_tokens  # requests finishing (and starting) per step
    prefill_tokens = round(replaced * mix.prompt_tokens)
    if chunked_prefill:
        step = model.step_time_s(prefill_tokens, batch, context)
    else:
        prompt = round(mix.prompt_tokens)
        step = model.step_time_s(0, batch, context) + replaced * model.step_time_s(
            prompt, 0, prompt
        )
    return SaturatedThroughput(
        batch=batch,
        step_s=step,
        output_tokens_per_s=batch / step,
        input_tokens_per_s=replaced * mix.prompt_tokens / step,
        requests_per_s=replaced / step,
    )
