"""Roofline step-time model of one vLLM scheduler iteration.

One iteration streams the weights (and the KV cache its attention reads) from
device memory and does the batch's FLOPs; the slower bounds the step. Real
kernels bend smoothly between the two regimes (Vidur's A100 profile, between
64 and 256 batched tokens), so they are joined by a soft maximum
``(m^k + c^k)^(1/k)``; ``k = 2`` reproduces that knee within a few per cent:

    t = overhead + softmax_k(compute, memory) + tensor-parallel all-reduces
    memory  = (weights/tp + KV read + KV written + activations) / (eta_mem * BW)
    compute = (linear + LM head + attention FLOPs) / tp / (eta_compute * TFLOP/s)

Every term is non-decreasing in prefill tokens, decode sequences and context
tokens, so the step time is too (a property test checks it).
"""

from __future__ import annotations

from engine.hardware import HardwareSpec
from engine.models import ModelSpec

PRECISIONS: tuple[str, ...] = ("bf16", "fp8", "awq")

# AWQ: 4-bit weights with one fp16 scale and zero per group of 128 weights.
_AWQ_BYTES_PER_PARAM = 0.5 + 4.0 / 128
# Marlin/AWQ kernels dequantise on the fly: somewhat below bf16 GEMM speed.
_AWQ_COMPUTE_FACTOR = 0.8
KV_DTYPE_BYTES = 2.0  # KV cache stays bf16 (vLLM's kv_cache_dtype="auto")
ACT_DTYPE_BYTES = 2.0


def check_precision(precision: str, hardware: HardwareSpec) -> None:
    """Raise ValueError if ``precision`` is unknown or the chip cannot run it."""
    if precision not in PRECISIONS:
        raise ValueError(
            f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}"
        )
    if precision == "fp8" and hardware.fp8_tflops is None:
        raise ValueError(
            f"precision 'fp8' needs FP8 tensor cores; {hardware.name} has none "
            "(fp8 is offered on h100 and l4)"
        )
    if precision == "awq" and hardware.static_kv:
        raise ValueError(f"precision 'awq' is not supported on {hardware.name}")


def weight_bytes(model: ModelSpec, precision: str) -> float:
    """Bytes of weights in device memory for the whole model (all TP ranks together).

    Quantised formats quantise the linear layers only; embeddings and the LM
    head stay bf16, as in vLLM's fp8 and AWQ checkpoints.
    """
    other = (model.params_b - model.linear_params_b) * 1e9 * 2.0
    linear = model.linear_params_b * 1e9
    if precision == "bf16":
        return linear * 2.0 + other
    if precision == "fp8":
        return linear * 1.0 + other
    if precision == "awq":
        return linear * _AWQ_BYTES_PER_PARAM + other
    raise ValueError(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")


def linear_weight_bytes(model: ModelSpec, precision: str) -> float:
    """Bytes of the transformer layers' linear weights only (no embeddings/LM head)."""
    per_param = {"bf16": 2.0, "fp8": 1.0, "awq": _AWQ_BYTES_PER_PARAM}[precision]
    return model.linear_params_b * 1e9 * per_param


def effective_flops(hardware: HardwareSpec, precision: str) -> float:
    """FLOP/s one device sustains for this precision (peak x efficiency)."""
    if precision == "fp8":
        if hardware.fp8_tflops is None:
            raise ValueError(f"{hardware.name} has no FP8 tensor cores")
        peak = hardware.fp8_tflops
    elif precision == "awq":
        peak = hardware.bf16_tflops * _AWQ_COMPUTE_FACTOR
    else:
        peak = hardware.bf16_tflops
    return peak * 1e12 * hardware.eta_compute


def effective_bandwidth(hardware: HardwareSpec) -> float:
    """Bytes/s one device sustains."""
    return hardware.bandwidth_gbps * 1e9 * hardware.eta_mem


def kv_bytes_per_token_per_device(model: ModelSpec, tp: int) -> float:
    """KV bytes one device holds per token: KV heads are split across TP ranks
    (and replicated when there are fewer KV heads than ranks)."""
    heads = max(1, -(-model.kv_heads // tp))
    return 2.0 * model.layers * heads * model.head_dim * KV_DTYPE_BYTES


def activation_traffic_per_token(model: ModelSpec, tp: int) -> float:
    """Activation bytes read and written per batched token per device, all layers.

    Each layer reads and writes a few hidden-sized vectors (replicated on every
    rank) and the MLP's intermediate vectors (split across ranks).
    """
    per_layer = 6 * model.hidden + 3 * model.intermediate / tp
    return model.layers * per_layer * ACT_DTYPE_BYTES


def soft_max(a: float, b: float, knee: float) -> float:
    """The p-norm of (a, b): max(a, b) <= result <= 2^(1/knee) max(a, b)."""
    top = max(a, b)
    if top <= 0.0:
        return 0.0
    return float(top * ((a / top) ** knee + (b / top) ** knee) ** (1.0 / knee))


def attention_pairs(prefill_tokens: int, context_tokens: int) -> float:
    """(query, key) pairs attention computes this step.

    Decode rows read their whole context once (``context_tokens`` counts it);
    a prefill chunk also attends causally within itself (about n^2 / 2 pairs,
    bounded by the context it reads). Non-decreasing in both arguments.
    """
    return context_tokens + prefill_tokens * min(prefill_tokens, context_tokens) / 2.0


def _negative(prefill_tokens: int, decode_seqs: int, context_tokens: int) -> None:
    raise ValueError(
        "step_time_s: prefill_tokens, decode_seqs and context_tokens must be >= 0, got "
        f"{prefill_tokens}, {decode_seqs}, {context_tokens}"
    )


def step_time_s(
    model: ModelSpec,
    hardware: HardwareSpec,
    tp: int,
    precision: str,
    prefill_tokens: int,
    decode_seqs: int,
    context_tokens: int,
) -> float:
    """Seconds of one scheduler iteration (see the module docstring).

    ``context_tokens`` is the total number of KV tokens attention reads this
    step, over all sequences of the batch. An empty step takes no time.
    """
    if prefill_tokens < 0 or decode_seqs < 0 or context_tokens < 0:
        _negative(prefill_tokens, decode_seqs, context_tokens)
    tokens = prefill_tokens + decode_seqs
    if tokens == 0:
        return 0.0
    sampled = decode_seqs + (1 if prefill_tokens > 0 else 0)
    kv_token = kv_bytes_per_token_per_device(model, tp)

    memory_bytes = (
        weight_bytes(model, precision) / tp
        + (context_tokens + tokens) * kv_token
        + tokens * activation_traffic_per_token(model, tp)
    )
    flops = (
        model.linear_flops_per_token() * tokens
        + 2.0 * model.lm_head_params * sampled
        + model.attention_flops_per_pair() * attention_pairs(prefill_tokens, context_tokens)
    ) / tp
    t_memory = memory_bytes / effective_bandwidth(hardware)
    t_compute = flops / effective_flops(hardware, precision)
    return (
        hardware.step_overhead_s
        + soft_max(t_memory, t_compute, hardware.knee)
        + (allreduce_time_s(model, hardware, tp, tokens))
    )


class StepTimer:
    """:func:`step_time_s` for one (model, hardware, tp, precision), constants folded.

    The simulator asks for a step time several times per scheduler event, and
    the reference function re-derives a dozen per-profile constants (weights,
    KV bytes per token, effective bandwidth...) through as many calls each
    time. This holds them once and evaluates the very same expressions in the
    same order, so every result is bit-identical to :func:`step_time_s`
    (tested), several times faster.
    """

    __slots__ = (
        "_act",
        "_allreduce_latency",
        "_args",
        "_attn",
        "_bandwidth",
        "_flops",
        "_hidden",
        "_interconnect",
        "_inv_knee",
        "_knee",
        "_kv_token",
        "_layers2",
        "_lin",
        "_lm2",
        "_overhead",
        "_tp",
        "_weights",
    )

    def __init__(self, model: ModelSpec, hardware: HardwareSpec, tp: int, precision: str) -> None:
        self._args = (model, hardware, tp, precision)
        self._tp = tp
        self._weights = weight_bytes(model, precision) / tp
        self._kv_token = kv_bytes_per_token_per_device(model, tp)
        self._act = activation_traffic_per_token(model, tp)
        self._lin = model.linear_flops_per_token()
        # ``2.0 * lm_head_params * sampled`` evaluates left to right: folding the
        # first product keeps the result bit for bit
        self._lm2 = 2.0 * model.lm_head_params
        self._attn = model.attention_flops_per_pair()
        self._bandwidth = effective_bandwidth(hardware)
        self._flops = effective_flops(hardware, precision)
        self._overhead = hardware.step_overhead_s
        self._knee = hardware.knee
        self._inv_knee = 1.0 / hardware.knee
        self._hidden = model.hidden
        self._layers2 = 2.0 * model.layers
        self._allreduce_latency = hardware.allreduce_latency_s
        self._interconnect = hardware.interconnect_gbps * 1e9

    def __reduce__(self) -> tuple[object, ...]:
        """Pickle as the constructor's arguments: folding them again gives the same
        constants (slots have no ``__dict__``, and a compiled class no bare ``__new__``)."""
        return (StepTimer, self._args)

    def time_s(self, prefill_tokens: int, decode_seqs: int, context_tokens: int) -> float:
        """Seconds of one scheduler iteration (same contract as :func:`step_time_s`)."""
        if prefill_tokens < 0 or decode_seqs < 0 or context_tokens < 0:
            _negative(prefill_tokens, decode_seqs, context_tokens)
        tokens = prefill_tokens + decode_seqs
        if tokens == 0:
            return 0.0
        if prefill_tokens > 0:
            sampled = decode_seqs + 1
            pairs = context_tokens + prefill_tokens * min(prefill_tokens, context_tokens) / 2.0
        else:
            sampled = decode_seqs
            # the reference adds ``0 * min(0, c) / 2.0`` (== 0.0): c + 0.0 is c as a float
            pairs = context_tokens + 0.0
        tp = self._tp
        memory_bytes = (
            self._weights + (context_tokens + tokens) * self._kv_token + tokens * self._act
        )
        flops = (self._lin * tokens + self._lm2 * sampled + self._attn * pairs) / tp
        a = memory_bytes / self._bandwidth
        b = flops / self._flops
        # soft_max: the larger term over itself is exactly 1.0, and so is 1.0 to
        # any power (C99 pow), so one division and one power are spared
        if a >= b:
            soft = 0.0 if a <= 0.0 else float(a * (1.0 + (b / a) ** self._knee) ** self._inv_knee)
        else:
            soft = 0.0 if b <= 0.0 else float(b * ((a / b) ** self._knee + 1.0) ** self._inv_knee)
        if tp <= 1:
            allreduce = 0.0
        else:
            payload = tokens * self._hidden * ACT_DTYPE_BYTES * 2.0 * (tp - 1) / tp
            allreduce = self._layers2 * (self._allreduce_latency + payload / self._interconnect)
        return self._overhead + soft + allreduce


def allreduce_time_s(model: ModelSpec, hardware: HardwareSpec, tp: int, tokens: int) -> float:
    """Two ring all-reduces of the hidden state per layer (attention out, MLP down)."""
    if tp <= 1:
        return 0.0
    payload = tokens * model.hidden * ACT_DTYPE_BYTES * 2.0 * (tp - 1) / tp
    per_call = hardware.allreduce_latency_s + payload / (hardware.interconnect_gbps * 1e9)
    return 2.0 * model.layers * per_call


def linear_time_s(
    model: ModelSpec, hardware: HardwareSpec, tp: int, precision: str, tokens: int
) -> float:
    """Kernel time of the transformer layers' linear ops alone for ``tokens`` batched tokens.

    No attention, LM head, sampler, launch overhead or all-reduce: the quantity
    Vidur profiles (docs/facts.md sections 3-4), so the bench can compare like with like.
    """
    if tokens < 0:
        raise ValueError(f"linear_time_s: tokens must be >= 0, got {tokens}")
    if tokens == 0:
        return 0.0
    memory_bytes = linear_weight_bytes(
        model, precision
    ) / tp + tokens * activation_traffic_per_token(model, tp)
    flops = model.linear_flops_per_token() * tokens / tp
    return soft_max(
        memory_bytes / effective_bandwidth(hardware),
        flops / effective_flops(hardware, precision),
        hardware.knee,
    )
