"""Model architectures: the few constants that decide memory traffic and FLOPs.

A replica's speed is set by how many bytes it must stream per step (weights
plus the KV cache it reads) and how many FLOPs it must do; both follow from
the architecture alone, so a model is plain data here. Figures come from the
models' Hugging Face configs (docs/facts.md section 1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer, described by what the roofline needs.

    ``params_b`` is the total parameter count (billions), embeddings and LM
    head included: it decides the weight footprint. ``linear_params_b``
    excludes the embedding table and the LM head: it decides the FLOPs per
    token of the transformer layers (the LM head runs only for sampled rows).
    """

    name: str
    hf_id: str
    params_b: float
    linear_params_b: float
    layers: int
    hidden: int
    q_heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_position: int

    def __post_init__(self) -> None:
        for field_name in (
            "layers",
            "hidden",
            "q_heads",
            "kv_heads",
            "head_dim",
            "intermediate",
            "vocab",
            "max_position",
        ):
            if getattr(self, field_name) < 1:
                raise ValueError(f"ModelSpec {self.name!r}: {field_name} must be >= 1")
        if not 0 < self.linear_params_b <= self.params_b:
            raise ValueError(
                f"ModelSpec {self.name!r}: need 0 < linear_params_b <= params_b, got "
                f"{self.linear_params_b} and {self.params_b}"
            )
        if self.q_heads % self.kv_heads:
            raise ValueError(f"ModelSpec {self.name!r}: q_heads must be a multiple of kv_heads")

    def kv_bytes_per_token(self, dtype_bytes: float = 2.0) -> float:
        """Bytes of K and V for one token over all layers (whole model, not per GPU)."""
        return 2.0 * self.layers * self.kv_heads * self.head_dim * dtype_bytes

    @property
    def lm_head_params(self) -> float:
        """Parameters of the output projection (vocab x hidden)."""
        return float(self.vocab * self.hidden)

    def linear_flops_per_token(self) -> float:
        """FLOPs of the transformer layers' matmuls for one token (2 per weight)."""
        return 2.0 * self.linear_params_b * 1e9

    def attention_flops_per_pair(self) -> float:
        """FLOPs of QK^T and PV for one (query token, key token) pair, all layers."""
        return 4.0 * self.layers * self.q_heads * self.head_dim


LLAMA_3_8B = ModelSpec(
    name="llama-3-8b",
    hf_id="meta-llama/Meta-Llama-3-8B-Instruct",
    params_b=8.03,
    linear_params_b=6.98,
    layers=32,
    hidden=4096,
    q_heads=32,
    kv_heads=8,
    head_dim=128,
    intermediate=14336,
    vocab=128256,
    max_position=8192,
)

# Llama-3-8B's transformer layers with a smaller vocabulary and a longer context.
MISTRAL_7B = replace(
    LLAMA_3_8B,
    name="mistral-7b",
    hf_id="mistralai/Mistral-7B-Instruct-v0.3",
    params_b=7.25,
    vocab=32768,
    max_position=32768,
)

LLAMA_3_70B = ModelSpec(
    name="llama-3-70b",
    hf_id="meta-llama/Meta-Llama-3-70B-Instruct",
    params_b=70.55,
    linear_params_b=68.45,
    layers=80,
    hidden=8192,
    q_heads=64,
    kv_heads=8,
    head_dim=128,
    intermediate=28672,
    vocab=128256,
    max_position=8192,
)

# Calibration proxy only: the A10G TGI measurements (docs/facts.md section 3) were
# taken with Llama-2-7B, whose multi-head attention stores 4x the KV per token
# of Llama-3-8B. Modelling it directly beats rescaling its curve.
LLAMA_2_7B = ModelSpec(
    name="llama-2-7b",
    hf_id="meta-llama/Llama-2-7b-hf",
    params_b=6.74,
    linear_params_b=6.48,
    layers=32,
    hidden=4096,
    q_heads=32,
    kv_heads=32,
    head_dim=128,
    intermediate=11008,
    vocab=32000,
    max_position=4096,
)

MODELS: dict[str, ModelSpec] = {
    m.name: m for m in (LLAMA_3_8B, MISTRAL_7B, LLAMA_3_70B, LLAMA_2_7B)
}
