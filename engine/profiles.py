"""Replica profiles: a model on an instance type, with vLLM settings, prices and start-up.

A profile is everything the simulator, the emulator and the scaler need to
know about one replica: how long a scheduler iteration takes for a given
batch (``step_time_s``), how many KV tokens fit (``kv_blocks``), what an hour
costs (on-demand and spot) and how long a cold start takes.

Naming: ``<model>[-<precision>][-tp<N>]@<instance type>``. The precision
suffix is absent for bf16; the ``-tp<N>`` suffix appears only where a replica
uses fewer devices than the instance has and could be confused with another
layout (``llama-3-8b-tp2@g5.12xlarge``). Single-device replicas on 8-GPU
instances (p4de, p5) are priced per device: instance price / 8 x tp.
Names not in the catalogue but of that form are built on demand, so
``llama-3-70b@g5.12xlarge`` fails with the reason (bf16 70B does not fit in
4 x 24 GB) instead of "unknown".
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from engine.hardware import INSTANCES, HardwareSpec, InstanceType
from engine.kvcache_capacity import KvBudget, check_weights_fit, paged_kv_budget
from engine.models import LLAMA_2_7B, LLAMA_3_8B, LLAMA_3_70B, MISTRAL_7B, MODELS, ModelSpec
from engine.steptime import (
    KV_DTYPE_BYTES,
    PRECISIONS,
    StepTimer,
    check_precision,
    linear_time_s,
    weight_bytes,
)
from engine.throughput import (
    SHAREGPT_MIX,
    RequestMix,
    SaturatedThroughput,
    saturated_throughput,
)


@dataclass(frozen=True)
class StartupTimes:
    """Cold-start phases of a replica on a new node, in seconds (docs/facts.md section 6).

    ``node_ready_s``: Karpenter launch until the device plugin advertises the
    accelerator; ``image_pull_s``: pull and extract the serving image;
    ``model_load_s``: vLLM start until the readiness probe passes (weights,
    compile, CUDA graphs). Defaults elsewhere are the *optimised* case
    (pre-cached images, compile cache), about 2.5 min in total for 8B.
    """

    node_ready_s: float
    image_pull_s: float
    model_load_s: float

    def __post_init__(self) -> None:
        for name in ("node_ready_s", "image_pull_s", "model_load_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"StartupTimes: {name} must be >= 0, got {getattr(self, name)}")

    @property
    def total_s(self) -> float:
        return self.node_ready_s + self.image_pull_s + self.model_load_s


@dataclass(frozen=True)
class VllmSettings:
    """The vLLM engine arguments that change capacity and speed, validated like vLLM does."""

    gpu_memory_utilization: float = 0.9
    max_model_len: int = 8192
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    enable_chunked_prefill: bool = True
    num_gpu_blocks: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.block_size not in (1, 8, 16, 32, 64, 128):
            raise ValueError(
                f"block_size must be one of 1, 8, 16, 32, 64, 128, got {self.block_size}"
            )
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= "
                f"max_num_seqs ({self.max_num_seqs})"
            )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"without chunked prefill, max_num_batched_tokens ({self.max_num_batched_tokens}) "
                f"must be >= max_model_len ({self.max_model_len}): a whole prompt must fit one step"
            )
        if self.num_gpu_blocks is not None and (
            isinstance(self.num_gpu_blocks, bool)
            or not isinstance(self.num_gpu_blocks, int)
            or self.num_gpu_blocks < 1
        ):
            raise ValueError(
                f"num_gpu_blocks must be None or an integer >= 1, got {self.num_gpu_blocks!r}"
            )


@dataclass(frozen=True)
class Profile:
    """One replica: model x instance x parallelism x precision x vLLM settings."""

    name: str
    model: ModelSpec
    hardware: HardwareSpec
    instance_type: str
    tp: int
    precision: str
    vllm: VllmSettings
    price_on_demand_per_hour: float
    price_spot_per_hour: float
    startup: StartupTimes
    notes: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.tp, bool) or not isinstance(self.tp, int) or self.tp < 1:
            raise ValueError(f"profile {self.name!r}: tp must be an integer >= 1, got {self.tp!r}")
        check_precision(self.precision, self.hardware)
        if self.price_on_demand_per_hour < 0 or self.price_spot_per_hour < 0:
            raise ValueError(f"profile {self.name!r}: prices must be >= 0")
        if self.vllm.max_model_len > self.model.max_position:
            raise ValueError(
                f"profile {self.name!r}: max_model_len {self.vllm.max_model_len} exceeds "
                f"{self.model.name}'s context of {self.model.max_position} tokens"
            )
        check_weights_fit(
            self.model,
            self.hardware,
            self.tp,
            self.precision,
            self.vllm.gpu_memory_utilization,
            self.instance_type,
        )
        if self.hardware.static_kv:
            kv = self.kv_tokens * self.model.kv_bytes_per_token(KV_DTYPE_BYTES) / self.tp
            if weight_bytes(self.model, self.precision) / self.tp + kv > self.hardware.memory_bytes:
                raise ValueError(
                    f"profile {self.name!r}: compiled shape {self.vllm.max_num_seqs} x "
                    f"{self.vllm.max_model_len} tokens of static KV does not fit beside the "
                    f"weights in {self.hardware.memory_gib} GiB"
                )
            return
        if self.kv_blocks < 1 or self.kv_tokens < self.vllm.max_model_len:
            raise ValueError(
                f"profile {self.name!r}: the KV cache holds {self.kv_tokens} tokens, fewer than "
                f"max_model_len {self.vllm.max_model_len} (vLLM refuses to start); lower "
                "max_model_len or max_num_batched_tokens, or raise gpu_memory_utilization"
            )

    # -- capacity -------------------------------------------------------------
    @cached_property
    def kv_budget(self) -> KvBudget | None:
        """vLLM's start-up memory split on one device; None on static-KV chips."""
        if self.hardware.static_kv:
            return None
        v = self.vllm
        return paged_kv_budget(
            self.model,
            self.hardware,
            self.tp,
            self.precision,
            v.gpu_memory_utilization,
            v.max_num_batched_tokens,
            v.max_num_seqs,
            v.block_size,
        )

    @cached_property
    def kv_blocks(self) -> int:
        """KV-cache blocks of ``block_size`` tokens.

        ``num_gpu_blocks`` if set (a measured value wins); on Inferentia2 the
        static compiled shape, max_num_seqs x max_model_len; otherwise derived
        from memory like vLLM's profiling run does.
        """
        v = self.vllm
        if v.num_gpu_blocks is not None:
            return v.num_gpu_blocks
        if self.hardware.static_kv:
            return v.max_num_seqs * -(-v.max_model_len // v.block_size)
        budget = self.kv_budget
        assert budget is not None
        return budget.blocks

    @property
    def kv_tokens(self) -> int:
        return self.kv_blocks * self.vllm.block_size

    @property
    def devices(self) -> int:
        return self.tp

    # -- speed ----------------------------------------------------------------
    @cached_property
    def step_time_s(self) -> Callable[[int, int, int], float]:
        """``step_time_s(prefill_tokens, decode_seqs, context_tokens)``: seconds of
        one scheduler iteration.

        ``prefill_tokens``: prompt tokens computed this step (all chunks);
        ``decode_seqs``: sequences generating one token; ``context_tokens``:
        total KV tokens attention reads this step. Non-decreasing in each.
        The folded timer's own method, not a wrapper around it: the simulator
        calls it a few times per engine event, and one call layer less is a
        measurable share of a run.
        """
        return self._step_timer.time_s

    @cached_property
    def _step_timer(self) -> StepTimer:
        """``engine.steptime.step_time_s`` with this profile's constants folded once
        (bit-identical; the simulator calls it several times per scheduler event)."""
        return StepTimer(self.model, self.hardware, self.tp, self.precision)

    def linear_time_s(self, tokens: int) -> float:
        """Linear-ops-only kernel time (no attention, overhead, LM head): Vidur's quantity."""
        return linear_time_s(self.model, self.hardware, self.tp, self.precision, tokens)

    def decode_itl_s(self, batch: int, context_per_seq: int) -> float:
        """Inter-token latency of a pure decode step of ``batch`` sequences."""
        return self.step_time_s(0, batch, batch * context_per_seq)

    def saturated_throughput(
        self, mix: RequestMix = SHAREGPT_MIX, *, chunked_prefill: bool | None = None
    ) -> SaturatedThroughput:
        """Steady-state tokens/s of this replica kept full with ``mix`` (see engine.throughput).

        A sustainable per-replica capacity for sizing; ``chunked_prefill``
        defaults to the profile's vLLM setting.
        """
        v = self.vllm
        chunked = v.enable_chunked_prefill if chunked_prefill is None else chunked_prefill
        return saturated_throughput(
            self,
            kv_tokens=self.kv_tokens,
            max_num_seqs=v.max_num_seqs,
            block_size=v.block_size,
            mix=mix,
            chunked_prefill=chunked,
        )

    # -- derived --------------------------------------------------------------
    def with_vllm(self, **overrides: Any) -> Profile:
        """A copy with some vLLM settings replaced; everything is validated again."""
        known = {f.name for f in dataclasses.fields(VllmSettings)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(
                f"unknown vLLM setting(s) {', '.join(unknown)}; "
                f"expected some of {', '.join(sorted(known))}"
            )
        return dataclasses.replace(self, vllm=dataclasses.replace(self.vllm, **overrides))


# -- catalogue -------------------------------------------------------------------

# Optimised cold-start defaults (docs/facts.md section 6: about 2.5 min total
# for 8B on a new node): Karpenter node to allocatable GPU 60 s (30-40 s best
# case plus the device plugin), image pull 30 s (pre-cached/lazy-loaded image),
# vLLM start 60 s with compile and weight caches (60-90 s).
_STARTUP_SMALL_GPU = StartupTimes(node_ready_s=60.0, image_pull_s=30.0, model_load_s=60.0)
# Large instances boot slower in EC2 (https://github.com/awslabs/amazon-eks-ami/issues/1099).
_STARTUP_BIG_GPU = StartupTimes(node_ready_s=90.0, image_pull_s=30.0, model_load_s=60.0)
# 70B at TP 8: P2P check 60 s + weights 10 s + dynamo 15 s + compile 70 s +
# graphs 60 s (https://github.com/vllm-project/vllm/issues/19824).
_STARTUP_70B_P5 = StartupTimes(node_ready_s=90.0, image_pull_s=30.0, model_load_s=215.0)
# 70B AWQ (about 40 GB) on 4 x A10G: no NVLink P2P check, but 40 GB from the
# cache volume plus compile and graphs for 4 ranks: estimated 150 s.
_STARTUP_70B_G5 = StartupTimes(node_ready_s=60.0, image_pull_s=30.0, model_load_s=150.0)
# Inferentia2 with pre-compiled Neuron artefacts: about 40 s of weight load
# (https://github.com/aws-neuron/transformers-neuronx/issues/80) plus runtime start: 60 s.
_STARTUP_INF2 = StartupTimes(node_ready_s=60.0, image_pull_s=30.0, model_load_s=60.0)

# 24 GB cards: Llama-3's 8k context fits; 8192 batched tokens matches vLLM V1's default.
_VLLM_24GB = VllmSettings(max_model_len=8192, max_num_seqs=256, max_num_batched_tokens=8192)
_VLLM_80GB = VllmSettings(max_model_len=8192, max_num_seqs=256, max_num_batched_tokens=8192)
_VLLM_80GB_MISTRAL = VllmSettings(
    max_model_len=32768, max_num_seqs=256, max_num_batched_tokens=8192
)
_VLLM_L2_7B = VllmSettings(max_model_len=4096, max_num_seqs=256, max_num_batched_tokens=4096)
# Inferentia2: static KV compiled for batch 8 x 4096 tokens (within the
# optimum-neuron benchmark configs, BS 1-48 x 4096), 4 GiB beside 15 GiB of weights.
_VLLM_INF2 = VllmSettings(max_model_len=4096, max_num_seqs=8, max_num_batched_tokens=4096)


@dataclass(frozen=True)
class _Entry:
    model: ModelSpec
    instance: str
    precision: str
    tp: int
    vllm: VllmSettings
    startup: StartupTimes
    tp_suffix: bool = False
    notes: str = ""


def _profile_name(model: ModelSpec, precision: str, tp: int, instance: str, tp_suffix: bool) -> str:
    name = model.name
    if precision != "bf16":
        name += f"-{precision}"
    if tp_suffix:
        name += f"-tp{tp}"
    return f"{name}@{instance}"


def build_profile(
    model: ModelSpec | str,
    instance_type: str,
    *,
    precision: str = "bf16",
    tp: int | None = None,
    vllm: VllmSettings | None = None,
    startup: StartupTimes | None = None,
    tp_suffix: bool = False,
    notes: str = "",
) -> Profile:
    """Construct (and validate) a profile from a model and an instance type.

    ``tp`` defaults to the fewest devices of the instance whose memory holds
    the weights (the whole instance if none does, so the error says why).
    """
    if isinstance(model, str):
        if model not in MODELS:
            raise ValueError(f"unknown model {model!r}; known models: {', '.join(sorted(MODELS))}")
        model = MODELS[model]
    if instance_type not in INSTANCES:
        raise ValueError(
            f"unknown instance type {instance_type!r}; known: {', '.join(sorted(INSTANCES))}"
        )
    inst: InstanceType = INSTANCES[instance_type]
    if precision not in PRECISIONS:
        raise ValueError(
            f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}"
        )
    if tp is None:
        tp = _default_tp(model, inst, precision)
    if tp > inst.devices:
        raise ValueError(f"tp {tp} exceeds the {inst.devices} device(s) of {instance_type}")
    if vllm is None:
        vllm = _default_vllm(model, inst.hardware)
    if startup is None:
        startup = _default_startup(model, instance_type)
    share = inst.share(tp)
    return Profile(
        name=_profile_name(model, precision, tp, instance_type, tp_suffix),
        model=model,
        hardware=inst.hardware,
        instance_type=instance_type,
        tp=tp,
        precision=precision,
        vllm=vllm,
        price_on_demand_per_hour=round(inst.price_on_demand_per_hour * share, 6),
        price_spot_per_hour=round(inst.price_spot_per_hour * share, 6),
        startup=startup,
        notes=notes or f"spot: {inst.spot_note}",
    )


def _default_tp(model: ModelSpec, inst: InstanceType, precision: str) -> int:
    for tp in (1, 2, 4, 8):
        if tp > inst.devices:
            break
        # Leave room for at least a few GiB of KV beside the weights.
        if weight_bytes(model, precision) / tp < 0.75 * inst.hardware.memory_bytes:
            return tp
    return inst.devices


def _default_vllm(model: ModelSpec, hardware: HardwareSpec) -> VllmSettings:
    if hardware.static_kv:
        return _VLLM_INF2
    max_len = min(model.max_position, 32768 if hardware.memory_gib > 40 else 8192)
    return VllmSettings(max_model_len=max_len, max_num_seqs=256, max_num_batched_tokens=8192)


def _default_startup(model: ModelSpec, instance_type: str) -> StartupTimes:
    if instance_type.startswith("inf2"):
        return _STARTUP_INF2
    big = instance_type.startswith(("p4", "p5"))
    if model.params_b > 30:
        return _STARTUP_70B_P5 if big else _STARTUP_70B_G5
    return _STARTUP_BIG_GPU if big else _STARTUP_SMALL_GPU


_CATALOGUE: tuple[_Entry, ...] = (
    # A10G
    _Entry(LLAMA_3_8B, "g5.xlarge", "bf16", 1, _VLLM_24GB, _STARTUP_SMALL_GPU),
    _Entry(LLAMA_3_8B, "g5.2xlarge", "bf16", 1, _VLLM_24GB, _STARTUP_SMALL_GPU),
    _Entry(MISTRAL_7B, "g5.xlarge", "bf16", 1, _VLLM_24GB, _STARTUP_SMALL_GPU),
    _Entry(MISTRAL_7B, "g5.2xlarge", "bf16", 1, _VLLM_24GB, _STARTUP_SMALL_GPU),
    _Entry(
        LLAMA_3_8B,
        "g5.12xlarge",
        "bf16",
        2,
        _VLLM_24GB,
        _STARTUP_SMALL_GPU,
        tp_suffix=True,
        notes="2 of the instance's 4 A10G (priced as half the instance); the arc53 TP=2 point",
    ),
    _Entry(LLAMA_3_70B, "g5.12xlarge", "awq", 4, _VLLM_24GB, _STARTUP_70B_G5),
    _Entry(
        LLAMA_2_7B,
        "g5.2xlarge",
        "bf16",
        1,
        _VLLM_L2_7B,
        _STARTUP_SMALL_GPU,
        notes="calibration proxy: the A10G TGI measurements used Llama-2-7B",
    ),
    # L4
    _Entry(LLAMA_3_8B, "g6.xlarge", "bf16", 1, _VLLM_24GB, _STARTUP_SMALL_GPU),
    _Entry(LLAMA_3_8B, "g6.xlarge", "fp8", 1, _VLLM_24GB, _STARTUP_SMALL_GPU),
    _Entry(MISTRAL_7B, "g6.xlarge", "bf16", 1, _VLLM_24GB, _STARTUP_SMALL_GPU),
    # A100-80G (one GPU of a p4de, priced per GPU)
    _Entry(LLAMA_3_8B, "p4de.24xlarge", "bf16", 1, _VLLM_80GB, _STARTUP_BIG_GPU),
    _Entry(MISTRAL_7B, "p4de.24xlarge", "bf16", 1, _VLLM_80GB_MISTRAL, _STARTUP_BIG_GPU),
    # H100 (one GPU of a p5, priced per GPU)
    _Entry(LLAMA_3_8B, "p5.48xlarge", "bf16", 1, _VLLM_80GB, _STARTUP_BIG_GPU),
    _Entry(LLAMA_3_8B, "p5.48xlarge", "fp8", 1, _VLLM_80GB, _STARTUP_BIG_GPU),
    _Entry(MISTRAL_7B, "p5.48xlarge", "bf16", 1, _VLLM_80GB_MISTRAL, _STARTUP_BIG_GPU),
    _Entry(LLAMA_3_70B, "p5.48xlarge", "bf16", 8, _VLLM_80GB, _STARTUP_70B_P5),
    _Entry(LLAMA_3_70B, "p5.48xlarge", "fp8", 8, _VLLM_80GB, _STARTUP_70B_P5),
    # Inferentia2 (one chip, two NeuronCores, treated as one device)
    _Entry(LLAMA_3_8B, "inf2.xlarge", "bf16", 1, _VLLM_INF2, _STARTUP_INF2),
    _Entry(LLAMA_3_8B, "inf2.8xlarge", "bf16", 1, _VLLM_INF2, _STARTUP_INF2),
    _Entry(MISTRAL_7B, "inf2.xlarge", "bf16", 1, _VLLM_INF2, _STARTUP_INF2),
)


def _build_catalogue() -> dict[str, Profile]:
    out: dict[str, Profile] = {}
    for e in _CATALOGUE:
        p = build_profile(
            e.model,
            e.instance,
            precision=e.precision,
            tp=e.tp,
            vllm=e.vllm,
            startup=e.startup,
            tp_suffix=e.tp_suffix,
            notes=e.notes,
        )
        if p.name in out:
            raise ValueError(f"duplicate profile name {p.name!r}")
        out[p.name] = p
    return out


PROFILES: dict[str, Profile] = _build_catalogue()

_NAME_RE = re.compile(
    r"^(?P<model>[a-z0-9.]+(?:-[a-z0-9.]+)*?)(?:-(?P<precision>bf16|fp8|awq))?"
    r"(?:-tp(?P<tp>\d+))?@(?P<instance>[a-z0-9.]+)$"
)


def profile_names() -> list[str]:
    """Every catalogued profile name, sorted."""
    return sorted(PROFILES)


def get_profile(name: str) -> Profile:
    """The profile called ``name``.

    Catalogued names are returned as they are. Other names of the form
    ``<model>[-<precision>][-tp<N>]@<instance>`` with a known model and
    instance are built on the fly (and fail with the reason if they cannot
    run, e.g. ``llama-3-70b@g5.12xlarge``). Anything else is a ValueError
    listing every known name.
    """
    if name in PROFILES:
        return PROFILES[name]
    match = _NAME_RE.match(name)
    if match and match["model"] in MODELS and match["instance"] in INSTANCES:
        precision = match["precision"] or "bf16"
        tp = int(match["tp"]) if match["tp"] else None
        return build_profile(
            match["model"], match["instance"], precision=precision, tp=tp, tp_suffix=tp is not None
        )
    raise ValueError(f"unknown profile {name!r}; known profiles: {', '.join(profile_names())}")


# -- derived figures (the CLI prints these) --------------------------------------

SUMMARY_BATCHES: tuple[int, ...] = (1, 8, 32, 64, 128)
# Each decoding sequence is assumed to hold this much context for the ITL figures.
SUMMARY_CONTEXT_TOKENS = 1024
# Prefill throughput is quoted for one prompt of this length (or the step budget
# if smaller), attention over the prompt included.
SUMMARY_PREFILL_TOKENS = 2048


def profile_summary(profile: Profile) -> dict[str, Any]:
    """The figures ``prescaler engine profiles`` shows for one profile.

    ``itl_ms[b]`` is the decode inter-token latency with ``b`` sequences of
    ``SUMMARY_CONTEXT_TOKENS`` context each, or None where the replica cannot
    run that batch (more than ``max_num_seqs``, or more KV blocks than it has).
    """
    v = profile.vllm
    blocks_per_seq = -(-SUMMARY_CONTEXT_TOKENS // v.block_size)
    itl: dict[str, float | None] = {}
    for batch in SUMMARY_BATCHES:
        if batch > v.max_num_seqs or batch * blocks_per_seq > profile.kv_blocks:
            itl[str(batch)] = None
        else:
            itl[str(batch)] = round(1e3 * profile.decode_itl_s(batch, SUMMARY_CONTEXT_TOKENS), 3)
    chunk = min(SUMMARY_PREFILL_TOKENS, v.max_num_batched_tokens, v.max_model_len)
    prefill_rate = chunk / profile.step_time_s(chunk, 0, chunk)
    return {
        "name": profile.name,
        "model": profile.model.name,
        "hardware": profile.hardware.name,
        "instance_type": profile.instance_type,
        "tp": profile.tp,
        "itl_ms": itl,
        "prefill_tokens_per_s": round(prefill_rate, 1),
        "kv_tokens": profile.kv_tokens,
        "max_model_len": v.max_model_len,
        "price_on_demand_per_hour": profile.price_on_demand_per_hour,
        "price_spot_per_hour": profile.price_spot_per_hour,
    }


def all_profile_summaries() -> list[dict[str, Any]]:
    """``profile_summary`` of every catalogued profile, in name order."""
    return [profile_summary(get_profile(name)) for name in profile_names()]
