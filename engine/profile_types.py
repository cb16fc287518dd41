"""The profile types: a replica's model, device, vLLM settings, prices and start-up.

Kept apart from the catalogue and the file loader so both can build these
without importing each other; ``engine.profiles`` re-exports them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from engine.hardware import HardwareSpec
from engine.kvcache_capacity import KvBudget, check_weights_fit, paged_kv_budget
from engine.models import ModelSpec
from engine.steptime import (
    KV_DTYPE_BYTES,
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
from engine.validate import int_at_least


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
class RequestOverhead:
    """Per-request time outside the scheduler's steps, in seconds (docs/profiles.md).

    On the way in (the API server's HTTP handling, tokenisation, the hop to
    the engine process) a request joins the scheduler ``in_fixed_s +
    in_per_prompt_token_s x prompt tokens`` after it arrived. On the way out
    (the hop back, detokenisation, streaming) its k-th token reaches the
    client ``out_fixed_s + k x out_per_output_token_s`` after the step that
    sampled it. Neither occupies the engine: the batch does not wait for
    them. All zero (the default, and the catalogue's: their step-time
    efficiencies were fitted to end-to-end figures that already hold this
    time) is the engine alone.
    """

    in_fixed_s: float = 0.0
    in_per_prompt_token_s: float = 0.0
    out_fixed_s: float = 0.0
    out_per_output_token_s: float = 0.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if not (value >= 0.0 and value < float("inf")):
                raise ValueError(f"request_overhead: {f.name} must be a number >= 0, got {value}")

    def ttft_s(self, prompt_tokens: int) -> float:
        """What it adds to a request's time to first token."""
        return (
            self.in_fixed_s
            + self.in_per_prompt_token_s * prompt_tokens
            + self.out_fixed_s
            + self.out_per_output_token_s
        )


NO_OVERHEAD = RequestOverhead()

#: The largest share of a server's busy time stalls may take.
MAX_STALL_SHARE = 0.9


@dataclass(frozen=True)
class EngineStalls:
    """Pauses between scheduler steps that the step-time model does not make (docs/profiles.md).

    A real server loses time between steps to what no roofline sees (a GC
    pause, a process descheduled, the API server starving the engine), and
    an idle one is slower to start. While working, ``share`` of the busy
    time goes to stalls of mean ``mean_s``; a step that would admit a
    waiting request first waits one of mean ``admit_mean_s`` with
    probability ``admit_chance`` (exponential lengths); the first step after
    ``d`` idle seconds waits ``wake_s x (1 - exp(-d / wake_tau_s))``, ``d``
    held at ``wake_max_idle_s`` where set. Each holds the batch and whatever
    arrives meanwhile. All zero (the default, the catalogue's) is the steps alone.
    """

    share: float = 0.0
    mean_s: float = 0.0
    admit_chance: float = 0.0
    admit_mean_s: float = 0.0
    #: the longest wake-up of an idle engine, in seconds
    wake_s: float = 0.0
    #: idle seconds over which the wake-up grows towards ``wake_s`` (its time constant)
    wake_tau_s: float = 0.0
    #: idle seconds past which the wake-up stops growing (0: it never stops)
    wake_max_idle_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("mean_s", "admit_mean_s", "wake_s", "wake_tau_s", "wake_max_idle_s"):
            value = getattr(self, name)
            if not (value >= 0.0 and value < float("inf")):
                raise ValueError(f"stalls: {name} must be a number >= 0, got {value}")
        if not 0.0 <= self.share <= MAX_STALL_SHARE:
            raise ValueError(f"stalls: share must be in [0, {MAX_STALL_SHARE}], got {self.share}")
        if not 0.0 <= self.admit_chance <= 1.0:
            raise ValueError(f"stalls: admit_chance must be in [0, 1], got {self.admit_chance}")
        for chance, mean in (
            ("share", "mean_s"),
            ("admit_chance", "admit_mean_s"),
            ("wake_s", "wake_tau_s"),
        ):
            if getattr(self, chance) > 0.0 and getattr(self, mean) <= 0.0:
                raise ValueError(f"stalls: {chance} above 0 needs {mean} above 0")

    @property
    def active(self) -> bool:
        """Whether the replica stalls at all (any kind, the wake-up included)."""
        return self.share > 0.0 or self.admit_chance > 0.0 or self.wake_s > 0.0

    def __repr__(self) -> str:
        # the wake-up's fields only where set: a study keyed on a profile's repr
        # (``prescaler tune`` with a profile file) is joined as before they existed
        shown = [
            f"{f.name}={getattr(self, f.name)!r}"
            for f in dataclasses.fields(self)
            if not f.name.startswith("wake_")
            or self.wake_s
            or self.wake_tau_s
            or self.wake_max_idle_s
        ]
        return f"EngineStalls({', '.join(shown)})"

    def wake_after_s(self, idle_s: float) -> float:
        """The wait before the first step after ``idle_s`` seconds with nothing to do."""
        if self.wake_s <= 0.0 or idle_s <= 0.0:
            return 0.0
        if self.wake_max_idle_s > 0.0:
            idle_s = min(idle_s, self.wake_max_idle_s)
        return self.wake_s * -math.expm1(-idle_s / self.wake_tau_s)

    @property
    def work_between_s(self) -> float:
        """Mean seconds of steps between two stalls while working (share = stalled /
        (stalled + working)); infinite without them."""
        return self.mean_s * (1.0 - self.share) / self.share if self.share > 0 else float("inf")


NO_STALLS = EngineStalls()


@dataclass(frozen=True)
class CheckRecord:
    """The last check of a profile against a real server (``prescaler engine check --record``).

    ``at``: when (UTC, ISO 8601); ``against``: the result file (several joined
    by ", ") or server URL (with ``(N runs)`` after ``--runs N``);
    ``max_abs_error``: the worst relative error of TTFT, ITL (p50, p90, p99)
    and throughput (over several runs, of their median); ``worst_metric``
    which one; ``passed``: no figure past the check's tolerance (over several
    runs, in every run). ``prescaler tune`` reminds a user whose profile has
    none.
    """

    at: str
    against: str
    max_abs_error: float
    worst_metric: str = ""
    passed: bool = False


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
            if not int_at_least(value, 1):
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
        if self.num_gpu_blocks is not None and not int_at_least(self.num_gpu_blocks, 1):
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
    #: per-request time outside the scheduler (optional in a file; zero: the engine alone)
    request_overhead: RequestOverhead = NO_OVERHEAD
    #: pauses between steps (optional in a file; zero: the steps alone)
    stalls: EngineStalls = NO_STALLS
    #: the last check against a real server (optional; not part of what the profile is)
    checked: CheckRecord | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not int_at_least(self.tp, 1):
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
        defaults to the profile's vLLM setting. The profile's stalls take
        their share of the busy time.
        """
        v = self.vllm
        chunked = v.enable_chunked_prefill if chunked_prefill is None else chunked_prefill
        steps = saturated_throughput(
            self,
            kv_tokens=self.kv_tokens,
            max_num_seqs=v.max_num_seqs,
            block_size=v.block_size,
            mix=mix,
            chunked_prefill=chunked,
        )
        if self.stalls.share <= 0.0:
            return steps
        # stalls stretch the busy time by 1 / (1 - share); the step itself is unchanged
        # (admissions' stalls depend on the arrivals, which a saturated replica has not)
        keep = 1.0 - self.stalls.share
        return dataclasses.replace(
            steps,
            output_tokens_per_s=steps.output_tokens_per_s * keep,
            input_tokens_per_s=steps.input_tokens_per_s * keep,
            requests_per_s=steps.requests_per_s * keep,
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
