"""A profile checked against what a real server measured: the same load replayed, side by side.

What a team runs before it trusts a tuning result: every figure prescaler
gives (a tuned threshold, a cost at an SLO) is only as good as the replica
model under it. A ``vllm bench serve`` result (or ``prescaler engine load``'s,
the same field names) says what load was sent and what its clients saw;
``check_profile`` replays that load through the engine model
(``engine.serving_replay``: the same requests, each with its own lengths
where the file lists them, sent when they were sent where it says, else at
its rate or all at once, through its concurrency cap) and compares TTFT and
inter-token latency at p50, p90 and p99 and output throughput.

Pure: the caller reads the file (or runs the load) and prints.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.bench_result import BenchResultError, bench_measurement
from engine.profile_types import Profile
from engine.serving_replay import ServingLoad, replay_load

#: The percentiles compared (vLLM's ``p{N}_{metric}_ms`` keys; the median is ``median_``).
PERCENTILES: tuple[int, ...] = (50, 90, 99)
#: Requests replayed at most (the percentiles settle well before; a long run stays quick).
MAX_CHECK_REQUESTS = 2000
#: Worst relative error a check may show and still count as passing, by default.
DEFAULT_TOLERANCE = 0.25


@dataclass(frozen=True)
class CheckRow:
    """One figure: measured by the server's clients, predicted by the engine model."""

    metric: str  # e.g. "ttft_p90_ms", "output_tokens_per_s"
    measured: float | None
    predicted: float

    @property
    def error(self) -> float | None:
        """Relative error of the prediction (0.1 = 10 % high); None when not measured."""
        if self.measured is None or self.measured <= 0:
            return None
        return self.predicted / self.measured - 1.0


@dataclass(frozen=True)
class ProfileCheck:
    """The replayed load and every compared figure."""

    profile: str
    load: ServingLoad
    rows: tuple[CheckRow, ...]

    @property
    def worst(self) -> CheckRow | None:
        """The figure with the largest absolute error."""
        rated = [r for r in self.rows if r.error is not None]
        return max(rated, key=lambda r: abs(r.error or 0.0), default=None)

    @property
    def max_abs_error(self) -> float:
        worst = self.worst
        return 0.0 if worst is None or worst.error is None else abs(worst.error)


def percentile(values: Sequence[float], p: float) -> float:
    """numpy's default (linear) percentile, as ``vllm bench serve`` computes it."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of nothing")
    k = (len(ordered) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _ok_indices(doc: Mapping[str, Any], n: int) -> list[int]:
    errors = doc.get("errors")
    if isinstance(errors, list) and len(errors) == n:
        return [i for i, e in enumerate(errors) if not e]
    return list(range(n))


def _int_list(doc: Mapping[str, Any], key: str, source: str) -> list[int] | None:
    value = doc.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise BenchResultError(source, key, "expected a list of integers")
    return value


def load_of(doc: Mapping[str, Any], source: str) -> ServingLoad:
    """The load a result file describes, as exactly as it says.

    Per-request lengths (``input_lens``, ``output_lens``: ``--save-detailed``)
    and send times (``start_times``: ``prescaler engine load``) are used when
    present; otherwise the mean lengths and the file's rate (evenly spaced:
    the benchmark's Poisson draws are not saved) or all at once.
    """
    base = bench_measurement(doc, source).load
    inputs = _int_list(doc, "input_lens", source)
    outputs = _int_list(doc, "output_lens", source)
    lengths: tuple[tuple[int, int], ...] | None = None
    offsets: tuple[float, ...] | None = None
    if inputs is not None and outputs is not None and len(inputs) == len(outputs):
        keep = _ok_indices(doc, len(inputs))[:MAX_CHECK_REQUESTS]
        pairs = [(max(1, inputs[i]), max(1, outputs[i])) for i in keep]
        if pairs:
            lengths = tuple(pairs)
            starts = doc.get("start_times")
            if isinstance(starts, list) and len(starts) == len(inputs):
                first = min(float(starts[i]) for i in keep)
                offsets = tuple(float(starts[i]) - first for i in keep)
    if lengths is None:
        n = min(int(doc["completed"]), MAX_CHECK_REQUESTS)
        return ServingLoad(
            num_requests=n,
            prompt_tokens=base.prompt_tokens,
            output_tokens=base.output_tokens,
            max_concurrency=base.max_concurrency,
            request_rate=base.request_rate,
        )
    n = len(lengths)
    return ServingLoad(
        num_requests=n,
        prompt_tokens=max(1, round(sum(p for p, _ in lengths) / n)),
        output_tokens=max(1, round(sum(o for _, o in lengths) / n)),
        max_concurrency=base.max_concurrency,
        request_rate=base.request_rate,
        lengths=lengths,
        send_offsets=offsets,
    )


def _measured(doc: Mapping[str, Any], metric: str, p: int) -> float | None:
    """A percentile (ms) from the per-request lists when saved, else the file's own key."""
    if metric == "ttft" and isinstance(doc.get("ttfts"), list):
        ok = _ok_indices(doc, len(doc["ttfts"]))
        values = [float(doc["ttfts"][i]) for i in ok]
        return percentile(values, p) * 1e3 if values else None
    if metric == "itl" and isinstance(doc.get("itls"), list):
        ok = _ok_indices(doc, len(doc["itls"]))
        gaps = [float(g) for i in ok for g in doc["itls"][i]]
        return percentile(gaps, p) * 1e3 if gaps else None
    key = f"median_{metric}_ms" if p == 50 else f"p{p}_{metric}_ms"
    value = doc.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def check_profile(profile: Profile, doc: Mapping[str, Any], source: str) -> ProfileCheck:
    """Replay the load of result ``doc`` through ``profile``; every figure side by side."""
    if not isinstance(doc, Mapping):
        raise BenchResultError(source, "(document)", "expected a JSON object")
    load = load_of(doc, source)
    out = replay_load(profile, load)
    rows: list[CheckRow] = []
    for metric, values in (("ttft", out.ttfts), ("itl", out.itls)):
        for p in PERCENTILES:
            predicted = percentile(values, p) * 1e3 if values else 0.0
            rows.append(CheckRow(f"{metric}_p{p}_ms", _measured(doc, metric, p), predicted))
    throughput = doc.get("output_throughput")
    measured_tp = (
        float(throughput)
        if isinstance(throughput, (int, float)) and not isinstance(throughput, bool)
        else None
    )
    rows.append(CheckRow("output_tokens_per_s", measured_tp, out.output_throughput))
    return ProfileCheck(profile.name, load, tuple(rows))


def check_document(check: ProfileCheck, *, source: str, tolerance: float) -> dict[str, Any]:
    """The JSON report (docs/contracts.md)."""
    worst = check.worst
    load = check.load
    return {
        "profile": check.profile,
        "source": source,
        "load": {
            "requests": load.num_requests,
            "mean_prompt_tokens": load.prompt_tokens,
            "mean_output_tokens": load.output_tokens,
            "max_concurrency": load.max_concurrency,
            "request_rate": load.request_rate,
            "per_request_lengths": load.lengths is not None,
            "send_times": load.send_offsets is not None,
        },
        "rows": [
            {"metric": r.metric, "measured": r.measured, "predicted": r.predicted, "error": r.error}
            for r in check.rows
        ],
        "max_abs_error": check.max_abs_error,
        "worst_metric": None if worst is None else worst.metric,
        "tolerance": tolerance,
        "passed": check.max_abs_error <= tolerance,
    }


def check_reminder(profile: Profile, given: str) -> str | None:
    """One line for a result built on ``profile`` (named ``given``) that was never
    checked against a real server, or whose last check failed; None otherwise."""
    how = f"`prescaler engine check --profile {given} --bench-result RUN.json --record`"
    record = profile.checked
    if record is None:
        return (
            f"note: profile {profile.name} was never checked against your server; run "
            f"{how} before trusting this result (docs/profiles.md)"
        )
    if not record.passed:
        return (
            f"note: profile {profile.name} failed its last check ({record.at}: "
            f"{record.worst_metric} off by {100 * record.max_abs_error:.0f} %); refit it "
            "(`prescaler engine fit-profile`) before trusting this result"
        )
    return None
