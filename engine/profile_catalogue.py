"""The built-in catalogue as code, and ``build_profile`` for names of the catalogue's form.

The shipped profile files (``engine/profile_data/*.yaml``) are generated from
``code_catalogue()`` by ``python -m engine.profile_files --write-builtins``;
at run time the catalogue is read from those files, and a test checks that
they load into objects equal to the ones built here. ``build_profile`` also
serves names outside the catalogue (``<model>[-<precision>][-tp<N>]@<instance>``).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.hardware import INSTANCES, HardwareSpec, InstanceType
from engine.models import LLAMA_2_7B, LLAMA_3_8B, LLAMA_3_70B, MISTRAL_7B, MODELS, ModelSpec
from engine.profile_types import Profile, StartupTimes, VllmSettings
from engine.steptime import PRECISIONS, weight_bytes

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


def code_catalogue() -> dict[str, Profile]:
    """The built-in profiles as this module defines them (the shipped files are generated
    from this; a test checks that loading the files gives equal objects)."""
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
