"""How many KV-cache blocks a replica gets, the way vLLM sizes them at start-up.

vLLM profiles a forward pass at ``max_num_batched_tokens``, then gives the KV
cache whatever is left of ``gpu_memory_utilization x total memory`` after the
weights, that activation peak, non-torch allocations (CUDA context, NCCL) and
the CUDA-graph pool (docs/facts.md section 5). Each tensor-parallel rank holds its
share of the KV heads, so capacity is computed per device. Inferentia2 has no
paged cache: its KV is a static tensor of compiled batch x sequence.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.hardware import GIB, HardwareSpec
from engine.models import ModelSpec
from engine.steptime import kv_bytes_per_token_per_device, weight_bytes

NON_TORCH_GIB = 0.35  # CUDA context, NCCL buffers (docs/facts.md section 5)
CUDA_GRAPH_GIB = 0.5  # recent vLLM reserves graph memory before sizing the cache
LOGITS_DTYPE_BYTES = 4.0  # the sampler's fp32 logits


@dataclass(frozen=True)
class KvBudget:
    """The arithmetic behind a KV capacity, per device, in bytes (for reports)."""

    budget: float
    weights: float
    activations: float
    reserved: float
    kv_bytes_per_block: float

    @property
    def kv_bytes(self) -> float:
        return self.budget - self.weights - self.activations - self.reserved

    @property
    def blocks(self) -> int:
        return max(0, int(self.kv_bytes // self.kv_bytes_per_block))


def activation_peak_bytes(
    model: ModelSpec, tp: int, max_num_batched_tokens: int, max_num_seqs: int
) -> float:
    """Peak activation memory of the profiling forward pass, per device."""
    per_token = 2.0 * (2 * model.intermediate / tp + 6 * model.hidden)
    logits = max_num_seqs * model.vocab * LOGITS_DTYPE_BYTES / tp
    return max_num_batched_tokens * per_token + logits


def paged_kv_budget(
    model: ModelSpec,
    hardware: HardwareSpec,
    tp: int,
    precision: str,
    gpu_memory_utilization: float,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    block_size: int,
) -> KvBudget:
    """vLLM's start-up memory split on one device."""
    return KvBudget(
        budget=gpu_memory_utilization * hardware.memory_bytes,
        weights=weight_bytes(model, precision) / tp,
        activations=activation_peak_bytes(model, tp, max_num_batched_tokens, max_num_seqs),
        reserved=(NON_TORCH_GIB + CUDA_GRAPH_GIB) * GIB,
        kv_bytes_per_block=block_size * kv_bytes_per_token_per_device(model, tp),
    )


def check_weights_fit(
    model: ModelSpec,
    hardware: HardwareSpec,
    tp: int,
    precision: str,
    gpu_memory_utilization: float,
    instance_type: str,
) -> None:
    """Raise a ValueError that says what does not fit, and by how much."""
    per_device = weight_bytes(model, precision) / tp
    budget = gpu_memory_utilization * hardware.memory_bytes
    if hardware.static_kv:
        budget = hardware.memory_bytes
    if per_device >= budget:
        raise ValueError(
            f"{model.name} in {precision} does not fit on {instance_type}: its weights need "
            f"{per_device / GIB:.1f} GiB per device at TP {tp}, but one {hardware.name} offers "
            f"{budget / GIB:.1f} GiB"
            + ("" if hardware.static_kv else f" (gpu_memory_utilization {gpu_memory_utilization})")
            + "; use a quantised variant (awq, fp8), more devices, or a larger accelerator"
        )
