"""Published measurements the engine model is calibrated against, and the model's values.

Every reference is a figure of ``docs/facts.md`` (with its public source),
labelled as there: [M] measured by a third party, [D] derived from
measurements. ``calibration_points()`` evaluates the model at each point;
the bench (``tests/engine/test_calibration_bench.py``, run by ``make
bench``) requires every error within 15 %. The factors of
``engine.hardware`` were fitted to these same points, so
``held_out_errors()`` refits them without one source (``fit_efficiency()``'s
rule) and scores that source's points: the error on a workload not fitted.
It is the product's accuracy check, so it stays beside the product's tests
(not in the lab). The workload assumptions are the comment below.
"""

# Workload assumptions, stated once:
#
# - A10G TGI (philschmid/text-generation-inference-tests): k6 closed loop, N
#   users, ``max_new_tokens`` 50, prompts from the repository's ShareGPT
#   ``samples.json`` taken in order (mean 230 prompt tokens over the first 49).
#   The CSV's "ms/token" is TGI's inference time / generated tokens, so it
#   includes the request's own prefill and the prefills of the other users that
#   interrupt it (TGI runs prefills as separate forward passes); see
#   ``closed_loop_ms_per_token`` below. We model Llama-2-7B
#   directly (it is a profile); the x1.19 rescaled Llama-3-8B curve is also
#   checked, since its prefill interference scales with the weights as well.
# - H100 vLLM 0.21 bf16 "chatbot-short": c1 and c4 only (c16 mixes in
#   prefill, c64 queues). Decode at 320 tokens of context per sequence
#   (assumed short chat). The NIM table is not used: its precision and even
#   hardware are not shown in the excerpt, 4.6 ms is below the bf16 floor, and
#   its high-concurrency ITLs include TensorRT-LLM's in-flight prefills.
# - A100 Vidur: the model's linear-ops-only kernel time against
#   ``per_iteration_32_layers_ms`` at the powers of two the calibration notes
#   quote (the CSV's in-between sizes step with GEMM tile quantisation, which
#   a smooth model does not follow), plus the long-prefill ceiling rows.
# - Saturated ShareGPT runs (arc53/llm-price-compass, vLLM, 1000 prompts at
#   rate infinity): the mixes are the runs' own ratios, 215 prompt tokens per
#   request in both, 197 output tokens on L4 and 43 on 2 x A10G. Output lengths
#   are heavy-tailed (coefficient of variation 1.2 assumed). These are 2024
#   runs, when vLLM ran without chunked prefill by default, so prefills are
#   separate forward passes; see ``engine.throughput.saturated_throughput``.
# - Derived ranges of docs/facts.md (prefill rates, L4 batch-1 ITL): the
#   middle of the range is the reference.
# - KV capacity: docs/facts.md's derived ranges (their middle as the reference)
#   and one measured anchor, Llama-2-7B on one A100-80GB with 7,351 blocks
#   (https://github.com/vllm-project/vllm/pull/2031, max_model_len 4096).

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from engine.hardware import HARDWARE, HardwareSpec
from engine.models import LLAMA_2_7B
from engine.profiles import (
    SUMMARY_CONTEXT_TOKENS,
    SUMMARY_PREFILL_TOKENS,
    Profile,
    VllmSettings,
    build_profile,
    get_profile,
    profile_summary,
)
from engine.throughput import RequestMix, StepModel


def closed_loop_ms_per_token(
    model: StepModel, users: int, prompt_tokens: int, output_tokens: int
) -> float:
    """Mean request latency / generated tokens, in ms, for ``users`` closed-loop users.

    During one request's lifetime every other user starts one request, whose
    prefill pauses the running batch (separate prefill forward passes); the
    request's own prefill counts too. So a request lasts ``users`` prefills
    plus ``output_tokens - 1`` decode steps of the full batch, whose sequences
    are on average half-way through their answers.
    """
    if users < 1 or prompt_tokens < 1 or output_tokens < 1:
        raise ValueError("closed_loop_ms_per_token: users, prompt and output tokens must be >= 1")
    context = int(users * (prompt_tokens + output_tokens / 2.0))
    prefill = model.step_time_s(prompt_tokens, 0, prompt_tokens)
    decode = model.step_time_s(0, users, context)
    return 1e3 * (users * prefill + (output_tokens - 1) * decode) / output_tokens


# microsoft/vidur data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv,
# per_iteration_32_layers_ms (tests/engine/data/vidur_a100_llama3_8b_linear_ops_per_iter.csv;
# the mean where the CSV has two rows for one size).
VIDUR_A100_LINEAR_MS: tuple[tuple[int, float], ...] = (
    (1, 9.696),
    (2, 9.792),
    (4, 9.792),
    (8, 9.984),
    (16, 10.128),
    (32, 10.912),
    (64, 11.232),
    (128, 13.184),
    (256, 19.488),
    (512, 34.640),
    (1024, 75.136),
    (2048, 143.680),
    (4096, 273.248),
    (8192, 543.888),
)

# philschmid TGI results/sagemaker.csv, Llama-2-7b-hf, ml.g5.2xlarge, TP 1: median ms/token.
TGI_A10G_LLAMA2_7B_MS: tuple[tuple[int, float], ...] = (
    (1, 31.0),
    (5, 37.9),
    (10, 44.9),
    (20, 60.9),
)
# Same CSV, Llama-2-7b-hf on ml.g5.12xlarge at TP 4 (4 x A10G over PCIe): these
# pin down the all-reduce cost that the TP 2 and 70B profiles on g5 rely on.
TGI_A10G_TP4_LLAMA2_7B_MS: tuple[tuple[int, float], ...] = (
    (1, 16.81),
    (5, 21.85),
    (10, 27.77),
    (20, 43.99),
)
TGI_PROMPT_TOKENS = 230
TGI_OUTPUT_TOKENS = 50
LLAMA3_OVER_LLAMA2_WEIGHTS = 16.06 / 13.5  # weights in GB, docs/facts.md: "about x1.19"

H100_VLLM_BF16_TPOT_MS: tuple[tuple[int, float], ...] = ((1, 6.48), (4, 6.59))
H100_CONTEXT_TOKENS = 320

SHAREGPT_OUTPUT_CV = 1.2
TGI = "[M] philschmid/text-generation-inference-tests results/sagemaker.csv"


@dataclass(frozen=True)
class CalibrationPoint:
    """One published figure and the model's value for it.

    ``group`` is the unit left out together by ``held_out_errors``: the
    publication the figure comes from, so that a figure derived from another
    (the x1.19 proxy of the TGI rows) is never scored by a fit that saw its
    parent. Empty means ``source``.
    """

    point: str
    reference: float
    model: float
    unit: str
    source: str
    group: str = ""

    @property
    def source_group(self) -> str:
        return self.group or self.source

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.model - self.reference) / self.reference

    def as_dict(self) -> dict[str, float | str]:
        return {
            "point": self.point,
            "reference": self.reference,
            "model": round(self.model, 4),
            "unit": self.unit,
            "error_pct": round(self.error_pct, 2),
            "source": self.source,
            "group": self.source_group,
        }


Hardware = Mapping[str, HardwareSpec]


def _swap(hw: Hardware, profile: Profile) -> Profile:
    """``profile`` on the spec ``hw`` holds for its accelerator, if any."""
    spec = hw.get(profile.hardware.name)
    return profile if spec is None else replace(profile, hardware=spec)


def _get(hw: Hardware, name: str) -> Profile:
    return _swap(hw, get_profile(name))


def _tgi_points(hw: Hardware) -> list[CalibrationPoint]:
    out: list[CalibrationPoint] = []
    l2 = _get(hw, "llama-2-7b@g5.2xlarge")
    l3 = _get(hw, "llama-3-8b@g5.2xlarge")
    for users, ms in TGI_A10G_LLAMA2_7B_MS:
        out.append(
            CalibrationPoint(
                f"a10g llama-2-7b TGI ms/token, {users} users",
                ms,
                closed_loop_ms_per_token(l2, users, TGI_PROMPT_TOKENS, TGI_OUTPUT_TOKENS),
                "ms",
                TGI,
            )
        )
    l2_tp4 = _swap(hw, build_profile(LLAMA_2_7B, "g5.12xlarge", tp=4, vllm=l2.vllm))
    for users, ms in TGI_A10G_TP4_LLAMA2_7B_MS:
        out.append(
            CalibrationPoint(
                f"4xa10g tp4 llama-2-7b TGI ms/token, {users} users",
                ms,
                closed_loop_ms_per_token(l2_tp4, users, TGI_PROMPT_TOKENS, TGI_OUTPUT_TOKENS),
                "ms",
                TGI,
            )
        )
    for users, ms in TGI_A10G_LLAMA2_7B_MS:
        out.append(
            CalibrationPoint(
                f"a10g llama-3-8b ms/token (x1.19 proxy), {users} users",
                round(ms * LLAMA3_OVER_LLAMA2_WEIGHTS, 2),
                closed_loop_ms_per_token(l3, users, TGI_PROMPT_TOKENS, TGI_OUTPUT_TOKENS),
                "ms",
                "[D] philschmid/text-generation-inference-tests Llama-2-7B row x 16.06/13.5",
                group=TGI,
            )
        )
    return out


def _vidur_points(hw: Hardware) -> list[CalibrationPoint]:
    a100 = _get(hw, "llama-3-8b@p4de.24xlarge")
    return [
        CalibrationPoint(
            f"a100 llama-3-8b linear ops, {tokens} tokens",
            ms,
            1e3 * a100.linear_time_s(tokens),
            "ms",
            "[M] microsoft/vidur a100 Meta-Llama-3-8B mlp.csv",
        )
        for tokens, ms in VIDUR_A100_LINEAR_MS
    ]


def _h100_points(hw: Hardware) -> list[CalibrationPoint]:
    h100 = _get(hw, "llama-3-8b@p5.48xlarge")
    return [
        CalibrationPoint(
            f"h100 llama-3-8b bf16 decode TPOT, concurrency {c}",
            ms,
            1e3 * h100.decode_itl_s(c, H100_CONTEXT_TOKENS),
            "ms",
            "[M] yobitelcomm.github.io/bench vLLM 0.21 fp16 chatbot-short",
        )
        for c, ms in H100_VLLM_BF16_TPOT_MS
    ]


def _saturated(profile: Profile, mix: RequestMix) -> tuple[float, float]:
    sat = profile.saturated_throughput(mix, chunked_prefill=False)
    return sat.output_tokens_per_s, sat.input_tokens_per_s


def _saturated_points(hw: Hardware) -> list[CalibrationPoint]:
    src = "[M] arc53/llm-price-compass"
    l4_out, l4_in = _saturated(
        _get(hw, "llama-3-8b@g6.xlarge"), RequestMix(215.0, 197.0, SHAREGPT_OUTPUT_CV)
    )
    tp2_out, tp2_in = _saturated(
        _get(hw, "llama-3-8b-tp2@g5.12xlarge"), RequestMix(215.0, 43.0, SHAREGPT_OUTPUT_CV)
    )
    return [
        CalibrationPoint(
            "l4 llama-3-8b ShareGPT saturated output",
            513.0,
            l4_out,
            "tok/s",
            src + " gpu-benchmarks.csv",
        ),
        CalibrationPoint(
            "l4 llama-3-8b ShareGPT saturated input",
            558.0,
            l4_in,
            "tok/s",
            src + " gpu-benchmarks.csv",
        ),
        CalibrationPoint(
            "2xa10g tp2 llama-3-8b ShareGPT saturated output",
            441.8,
            tp2_out,
            "tok/s",
            "[M] https://github.com/arc53/llm-price-compass/issues/6",
        ),
        CalibrationPoint(
            "2xa10g tp2 llama-3-8b ShareGPT saturated input",
            2204.0,
            tp2_in,
            "tok/s",
            "[M] https://github.com/arc53/llm-price-compass/issues/6",
        ),
    ]


def _derived_points(hw: Hardware) -> list[CalibrationPoint]:
    """docs/facts.md's derived ranges, with the middle of the range as the reference.

    Left out: A10G prefill "about 3-5k tok/s" (it rests on an unverified 70-125
    TF; our A10G efficiency is fitted to ten measured A10G points and gives
    about 3k, the low end) and L4 "<= about 5k" (an upper bound, which holds).
    """
    src = "[D] docs/facts.md, prefill"
    out = [
        CalibrationPoint(
            f"{chip} llama-3-8b prefill, one {SUMMARY_PREFILL_TOKENS}-token prompt",
            ref,
            profile_summary(_get(hw, name))["prefill_tokens_per_s"],
            "tok/s",
            f"{src} ({note})",
        )
        for chip, name, ref, note in (
            ("a100", "llama-3-8b@p4de.24xlarge", 13_000.0, "12-14k end to end"),
            ("h100", "llama-3-8b@p5.48xlarge", 40_000.0, "35-45k"),
            ("inferentia2", "llama-3-8b@inf2.xlarge", 7_000.0, "6-8k"),
        )
    ]
    out.append(
        CalibrationPoint(
            "l4 llama-3-8b decode ITL, batch 1",
            65.0,
            1e3 * _get(hw, "llama-3-8b@g6.xlarge").decode_itl_s(1, SUMMARY_CONTEXT_TOKENS),
            "ms",
            "[D] docs/facts.md, decode (L4 floor 53.5 ms; expect 60-70)",
        )
    )
    return out


def _kv_points(hw: Hardware) -> list[CalibrationPoint]:
    derived = "[D] docs/facts.md, KV capacity"
    out = [
        CalibrationPoint(
            f"kv tokens {name}",
            ref,
            float(_get(hw, name).kv_tokens),
            "tokens",
            f"{derived} ({note})",
        )
        for name, ref, note in (
            ("llama-3-8b@g5.xlarge", 25_000.0, "A10G 20k-30k"),
            ("llama-3-8b@g6.xlarge", 25_000.0, "L4 20k-30k"),
            ("llama-3-8b@p4de.24xlarge", 445_000.0, "A100-80 440k-450k"),
            ("llama-3-8b@p5.48xlarge", 445_000.0, "H100-80 440k-450k"),
            ("mistral-7b@p4de.24xlarge", 460_000.0, "A100-80 Mistral ~460k"),
            ("mistral-7b@p5.48xlarge", 460_000.0, "H100-80 Mistral ~460k"),
        )
    ]
    l2_a100 = build_profile(
        LLAMA_2_7B,
        "p4de.24xlarge",
        vllm=VllmSettings(max_model_len=4096, max_num_batched_tokens=4096),
    )
    out.append(
        CalibrationPoint(
            "kv blocks llama-2-7b on one a100-80g",
            7351.0,
            float(l2_a100.kv_blocks),
            "blocks",
            "[M] https://github.com/vllm-project/vllm/pull/2031",
        )
    )
    return out


def calibration_points(hardware: Hardware | None = None) -> list[CalibrationPoint]:
    """The model evaluated at every covered calibration figure.

    ``hardware`` (name -> spec) replaces the shipped specs of those
    accelerators, which is how a refit is scored; by default the shipped ones.
    """
    hw: Hardware = hardware or {}
    return [
        *_tgi_points(hw),
        *_vidur_points(hw),
        *_h100_points(hw),
        *_saturated_points(hw),
        *_derived_points(hw),
        *_kv_points(hw),
    ]


# -- the fit, and the error of a source the fit did not see -----------------------

# The factors fitted per accelerator; the rest of a spec (bandwidth, FLOP/s,
# step overhead, interconnect) is a published figure or a separate constant.
FITTED = ("eta_mem", "eta_compute")
# Where a factor has no training point left (an accelerator whose only
# measured source is held out), the fit falls back to these: the middle of
# the shipped factors, not the held-out accelerator's own value.
PRIOR = {"eta_mem": 0.80, "eta_compute": 0.60}
_PRIOR_WEIGHT = 1e-4
_GRID = {"eta_mem": (0.40, 0.98), "eta_compute": (0.30, 0.95)}


def _loss(points: list[CalibrationPoint], spec: HardwareSpec) -> float:
    """Sum of squared log errors, plus a faint pull towards PRIOR (a tie-breaker
    that only decides a factor no training point constrains)."""
    fit = sum(math.log(p.model / p.reference) ** 2 for p in points)
    pull = sum(math.log(getattr(spec, f) / PRIOR[f]) ** 2 for f in FITTED)
    return fit + _PRIOR_WEIGHT * pull


def _grid(lo: float, hi: float, step: float) -> list[float]:
    n = round((hi - lo) / step)
    return [round(lo + i * step, 4) for i in range(n + 1)]


def fit_efficiency(keep: Callable[[CalibrationPoint], bool]) -> dict[str, HardwareSpec]:
    """Each accelerator's (eta_mem, eta_compute) fitted to the points ``keep`` accepts.

    A grid search (0.05 apart, then 0.01 apart around the best) minimising the
    squared log error of the kept points that depend on that accelerator.
    Accelerators are fitted one at a time: no point mixes two of them.
    """
    fitted: dict[str, HardwareSpec] = {}
    for name, spec in HARDWARE.items():
        # The points that move with this accelerator's factors.
        probe = replace(spec, eta_mem=spec.eta_mem * 0.9, eta_compute=spec.eta_compute * 0.9)
        base = calibration_points()
        moved = calibration_points({name: probe})
        index = [
            i for i, (a, b) in enumerate(zip(base, moved, strict=True))
            if a.model != b.model and keep(a)
        ]  # fmt: skip

        def loss(mem: float, compute: float, name: str = name, index: list[int] = index) -> float:
            trial = replace(HARDWARE[name], eta_mem=mem, eta_compute=compute)
            points = calibration_points({name: trial})
            return _loss([points[i] for i in index], trial)

        best = min(
            (
                (m, c)
                for m in _grid(*_GRID["eta_mem"], 0.05)
                for c in _grid(*_GRID["eta_compute"], 0.05)
            ),
            key=lambda mc: loss(*mc),
        )
        fine_m = [m for m in _grid(best[0] - 0.05, best[0] + 0.05, 0.01) if 0 < m <= 1]
        fine_c = [c for c in _grid(best[1] - 0.05, best[1] + 0.05, 0.01) if 0 < c <= 1]
        best = min(((m, c) for m in fine_m for c in fine_c), key=lambda mc: loss(*mc))
        fitted[name] = replace(spec, eta_mem=best[0], eta_compute=best[1])
    return fitted


@dataclass(frozen=True)
class HeldOut:
    """A source's points scored by a fit that never saw them."""

    group: str
    points: tuple[CalibrationPoint, ...]  # the model values are the held-out fit's
    fitted: Mapping[str, tuple[float, float]]  # accelerator -> (eta_mem, eta_compute)

    @property
    def worst_error_pct(self) -> float:
        return max((p.error_pct for p in self.points), key=abs)


def _depends_on_fit() -> set[str]:
    """The groups whose model values move when the fitted factors do."""
    probe = {
        name: replace(spec, eta_mem=spec.eta_mem * 0.9, eta_compute=spec.eta_compute * 0.9)
        for name, spec in HARDWARE.items()
    }
    return {
        a.source_group
        for a, b in zip(calibration_points(), calibration_points(probe), strict=True)
        if a.model != b.model
    }


def held_out_errors() -> list[HeldOut]:
    """Leave one source out: refit without it, score it.

    One entry per source whose points depend on a fitted factor; the KV
    capacities do not (they are the same under any fit), so they have none.
    """
    out: list[HeldOut] = []
    for group in sorted(_depends_on_fit()):

        def keep(p: CalibrationPoint, left_out: str = group) -> bool:
            return p.source_group != left_out

        fit = fit_efficiency(keep)
        scored = tuple(p for p in calibration_points(fit) if p.source_group == group)
        fitted = {n: (s.eta_mem, s.eta_compute) for n, s in fit.items()}
        out.append(HeldOut(group, scored, fitted))
    return out
