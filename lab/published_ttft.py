"""A published GPU vLLM run that reports TTFT, replayed through a built-in profile.

Why: the calibration bench's published sources give decode and prefill
speeds but no time to first token, so the catalogue's TTFT has been compared
only with the real CPU vLLM. This one does: vLLM's llm-compressor example
serves Meta-Llama-3-8B-Instruct (fp16, one A10G, TP 1) and runs
``benchmark_serving.py --request-rate 1.0 --num-prompts 100`` on ShareGPT
(22,805 input and 17,981 output tokens in all), printing TTFT and TPOT.
The replay here has the run's mean lengths (the ShareGPT sample itself is
not shipped) and Poisson arrivals at its rate under a few seeds, so it
measures the catalogue's speed at that load, not the sample's length mix.

Run: ``.venv/bin/python -m lab.published_ttft [PROFILE]`` (default
``llama-3-8b@g5.xlarge``, the A10G).
"""

from __future__ import annotations

import random
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from engine.percentile import percentile
from engine.profiles import get_profile
from engine.serving_replay import ServingLoad, replay_load


@dataclass(frozen=True)
class PublishedRun:
    """One printed ``benchmark_serving.py`` result: its load and its figures (ms, tok/s)."""

    source: str
    num_prompts: int
    request_rate: float
    input_tokens: int
    output_tokens: int
    figures: dict[str, float]


A10G_LLAMA3_8B = PublishedRun(
    source=(
        "https://github.com/vllm-project/llm-compressor/blob/main/examples/benchmarking/"
        "online_serving/README.md (the fp16 run's 'Serving Benchmark Result')"
    ),
    num_prompts=100,
    request_rate=1.0,
    input_tokens=22_805,
    output_tokens=17_981,
    figures={
        "ttft_median_ms": 78.82,
        "ttft_mean_ms": 106.36,
        "ttft_p99_ms": 286.84,
        "tpot_median_ms": 43.07,
        "tpot_mean_ms": 42.52,
        "tpot_p99_ms": 58.80,
        "output_tokens_per_s": 162.06,
    },
)
SEEDS = (0, 1, 2)


def replayed(profile_name: str, run: PublishedRun, seed: int) -> dict[str, float]:
    """The run's figures from the engine: mean lengths, Poisson arrivals under ``seed``."""
    rng = random.Random(seed)
    t, offsets = 0.0, []
    for _ in range(run.num_prompts):
        offsets.append(t)
        t += rng.expovariate(run.request_rate)
    load = ServingLoad(
        num_requests=run.num_prompts,
        prompt_tokens=round(run.input_tokens / run.num_prompts),
        output_tokens=round(run.output_tokens / run.num_prompts),
        send_offsets=tuple(offsets),
    )
    out = replay_load(get_profile(profile_name), load)
    # every request has the same length, so the mean TPOT is the mean gap; the
    # replay keeps no per-request TPOT, so its p99 is not compared
    return {
        "ttft_median_ms": out.median_ttft_s * 1e3,
        "ttft_mean_ms": out.mean_ttft_s * 1e3,
        "ttft_p99_ms": percentile(out.ttfts, 99) * 1e3,
        "tpot_median_ms": out.median_tpot_s * 1e3,
        "tpot_mean_ms": out.mean_itl_s * 1e3,
        "output_tokens_per_s": out.output_throughput,
    }


def table(profile_name: str, run: PublishedRun = A10G_LLAMA3_8B) -> str:
    """Published against replayed (the median and range over ``SEEDS``), one row a figure."""
    runs = [replayed(profile_name, run, seed) for seed in SEEDS]
    lines = [
        f"{profile_name} against {run.source}",
        f"{run.num_prompts} prompts at {run.request_rate:g}/s, mean "
        f"{run.input_tokens / run.num_prompts:.0f} + {run.output_tokens / run.num_prompts:.0f} "
        f"tokens; replayed under seeds {', '.join(map(str, SEEDS))}",
        "| figure | published | replayed (median, range) | error |",
        "|---|---|---|---|",
    ]
    for name, published in run.figures.items():
        if name not in runs[0]:
            lines.append(f"| {name} | {published:.2f} | not replayed | |")
            continue
        values = [r[name] for r in runs]
        mid = statistics.median(values)
        lines.append(
            f"| {name} | {published:.2f} | {mid:.2f} ({min(values):.2f} - {max(values):.2f}) "
            f"| {100 * (mid / published - 1):+.0f} % |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    print(table(args[0] if args else "llama-3-8b@g5.xlarge"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
