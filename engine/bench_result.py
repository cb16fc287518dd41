"""The result file of ``vllm bench serve --save-result``, read into a ``BenchMeasurement``,
and the figures a fit matches against one.

Field names are those vLLM's ``vllm/benchmarks/serve.py`` writes (its
``result_json`` merged with ``benchmark()``'s ``result``); per-request lists
exist only with ``--save-detailed``, so mean lengths come from the totals.
Pure: the caller parses the JSON.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.profile_types import Profile
from engine.serving_replay import ServingLoad, ServingOutcome, replay_load

#: The replay is capped at this many requests: the medians settle well before.
MAX_REPLAY_REQUESTS = 400


@dataclass(frozen=True)
class BenchMeasurement:
    """What a ``vllm bench serve`` run measured (seconds, per second) and its load."""

    load: ServingLoad
    median_ttft_s: float
    median_itl_s: float
    output_throughput: float
    #: the tails, where the run reports them (``vllm bench serve`` writes the mean
    #: ITL and p99s by default, p90 with ``--metric-percentiles 90,99``): they
    #: let a fit read the server's stalls (``engine.profile_fit_stalls``)
    mean_itl_s: float | None = None
    p99_itl_s: float | None = None
    p90_ttft_s: float | None = None
    p99_ttft_s: float | None = None


def bench_targets(
    bench: BenchMeasurement, tag: str = ""
) -> Callable[[Profile], list[tuple[str, float, float]]]:
    """The run's three figures (name, measured, replayed through ``profile``) for the
    fit; ``tag`` names its load where several runs are fitted."""

    def targets(profile: Profile) -> list[tuple[str, float, float]]:
        out: ServingOutcome = replay_load(profile, bench.load)
        return [
            ("median_itl_s" + tag, bench.median_itl_s, out.median_itl_s or 0.0),
            ("median_ttft_s" + tag, bench.median_ttft_s, out.median_ttft_s),
            ("output_throughput" + tag, bench.output_throughput, out.output_throughput),
        ]

    return targets


def bench_tag(load: ServingLoad, index: int) -> str:
    """``@4x64+48#1``: clients (``r1.5`` for a request rate, ``inf`` for all at once)
    x prompt + output tokens, then the run's place in the list (two may share a load)."""
    if load.max_concurrency is not None:
        shape = str(load.max_concurrency)
    else:
        shape = "inf" if load.request_rate is None else f"r{load.request_rate:g}"
    return f"@{shape}x{load.prompt_tokens}+{load.output_tokens}#{index + 1}"


class BenchResultError(ValueError):
    """A benchmark result the fit cannot use: which file, which field, why."""

    def __init__(self, source: str, key: str, message: str) -> None:
        super().__init__(f"{source}: field {key!r}: {message}")
        self.source = source
        self.key = key


def _number(doc: Mapping[str, Any], key: str, source: str, *, positive: bool = True) -> float:
    if key not in doc:
        raise BenchResultError(source, key, "missing (was it saved with --save-result?)")
    value = doc[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BenchResultError(source, key, f"expected a number, got {value!r}")
    if positive and value <= 0:
        raise BenchResultError(source, key, f"must be > 0, got {value!r}")
    return float(value)


def bench_measurement(doc: Any, source: str) -> BenchMeasurement:
    """The load and the medians of one ``vllm bench serve`` result."""
    if not isinstance(doc, Mapping):
        raise BenchResultError(source, "(document)", "expected a JSON object")
    completed = int(_number(doc, "completed", source))
    prompt = _number(doc, "total_input_tokens", source) / completed
    output = _number(doc, "total_output_tokens", source) / completed
    rate_raw = doc.get("request_rate", "inf")
    rate: float | None
    if rate_raw in ("inf", None) or (isinstance(rate_raw, float) and math.isinf(rate_raw)):
        rate = None
    else:
        rate = _number(doc, "request_rate", source)
    conc_raw = doc.get("max_concurrency")
    if conc_raw is not None and (isinstance(conc_raw, bool) or not isinstance(conc_raw, int)):
        raise BenchResultError(
            source, "max_concurrency", f"expected an integer or null, got {conc_raw!r}"
        )
    load = ServingLoad(
        num_requests=min(completed, MAX_REPLAY_REQUESTS),
        prompt_tokens=max(1, round(prompt)),
        output_tokens=max(1, round(output)),
        max_concurrency=conc_raw,
        request_rate=rate,
    )
    tails = {
        name: _number(doc, f"{name}_ms", source) / 1e3 if f"{name}_ms" in doc else None
        for name in ("mean_itl", "p99_itl", "p90_ttft", "p99_ttft")
    }
    return BenchMeasurement(
        load=load,
        median_ttft_s=_number(doc, "median_ttft_ms", source) / 1e3,
        median_itl_s=_number(doc, "median_itl_ms", source) / 1e3,
        output_throughput=_number(doc, "output_throughput", source),
        mean_itl_s=tails["mean_itl"],
        p99_itl_s=tails["p99_itl"],
        p90_ttft_s=tails["p90_ttft"],
        p99_ttft_s=tails["p99_ttft"],
    )
