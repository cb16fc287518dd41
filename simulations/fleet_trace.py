"""A replayable trace from a fleet's own vLLM metrics (pure: no I/O).

``prescaler tune --prometheus URL`` tunes on the traffic the fleet served:
the arrival rate from ``vllm:request_success_total`` (and its other
spellings) and token lengths from the prompt and generation histograms.
Prometheus keeps no per-request pairs, so each length is drawn uniformly
within its bucket, independently. The result is the two CSV texts the
simulator's readers load: a per-minute count curve and a token file for
``--tokens-from``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "GENERATION_HISTOGRAM",
    "PROMPT_HISTOGRAM",
    "FleetTrace",
    "bucket_counts",
    "build_fleet_trace",
    "histogram_query",
    "parse_labels",
    "sample_buckets",
]

PROMPT_HISTOGRAM = "vllm:request_prompt_tokens"
GENERATION_HISTOGRAM = "vllm:request_generation_tokens"
TOKEN_SAMPLES = 20_000
"""Token pairs written to the tokens file: plenty for a stable mean and tail."""

_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def parse_labels(text: str) -> dict[str, str]:
    """``--selector`` text ``k=v,k2=v2`` (values optionally quoted) -> exact
    label matches; anything else is a ValueError (it is never pasted raw)."""
    out: dict[str, str] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if value.startswith("~") or key.endswith("!"):
            raise ValueError(f"--selector: only exact matches (label=value), got {part!r}")
        if not sep or not _LABEL.match(key) or key.startswith("__"):
            raise ValueError(f"--selector: expected label=value pairs, got {part!r}")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        if key in out:
            raise ValueError(f"--selector: label {key!r} given twice")
        out[key] = value
    return out


def _matchers(labels: Mapping[str, str]) -> str:
    parts = []
    for key, value in sorted(labels.items()):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        parts.append(f'{key}="{escaped}"')
    return "{" + ",".join(parts) + "}" if parts else ""


def histogram_query(metric: str, labels: Mapping[str, str], window_s: int) -> str:
    """Bucket counts gained over ``window_s`` ending at the query time, by ``le``."""
    if window_s < 1:
        raise ValueError(f"window must be >= 1 s, got {window_s}")
    return f"sum by (le) (increase({metric}_bucket{_matchers(labels)}[{int(window_s)}s]))"


def bucket_counts(result: Sequence[Mapping[str, Any]]) -> list[tuple[float, float]]:
    """An instant-vector result of :func:`histogram_query` -> (upper bound,
    count in that bucket alone), sorted, the cumulative counts differenced."""
    cum: dict[float, float] = {}
    for item in result:
        try:
            le = float(item["metric"]["le"])
            value = float(item["value"][1])
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise ValueError(f"malformed histogram sample {item!r}") from exc
        if math.isfinite(value):
            cum[le] = cum.get(le, 0.0) + value
    bounds = sorted(cum)
    out: list[tuple[float, float]] = []
    prev = 0.0
    for b in bounds:
        count = max(0.0, cum[b] - prev)  # counter resets can make a bucket dip
        prev = max(prev, cum[b])
        out.append((b, count))
    return out


def sample_buckets(
    buckets: Sequence[tuple[float, float]], n: int, rng: np.random.Generator
) -> np.ndarray:
    """``n`` token counts (int >= 1) drawn from bucket counts, uniformly
    within each bucket; a ValueError when the histogram is empty."""
    finite = [b for b, _ in buckets if math.isfinite(b)]
    counts = np.array([c for _, c in buckets], dtype=np.float64)
    total = float(counts.sum())
    if total <= 0 or not finite:
        raise ValueError("the token histogram holds no observations in the window")
    lows: list[float] = []
    highs: list[float] = []
    prev = 0.0
    for b, _ in buckets:
        hi = b if math.isfinite(b) else 2.0 * max(finite)
        lows.append(prev)
        highs.append(max(hi, prev))
        prev = hi
    idx = rng.choice(len(buckets), size=n, p=counts / total)
    lo_v = np.array(lows)[idx]
    hi_v = np.array(highs)[idx]
    values = np.floor(lo_v + rng.random(n) * (hi_v - lo_v)) + 1.0
    return np.maximum(1, np.minimum(values, np.maximum(hi_v, 1.0))).astype(np.int64)


@dataclass(frozen=True)
class FleetTrace:
    """The two files a fleet's metrics become (CSV text)."""

    counts_csv: str
    """``minute_start_s,requests``: the per-minute count layout."""
    tokens_csv: str
    """``TIMESTAMP,ContextTokens,GeneratedTokens``: the Azure per-request layout."""
    minutes: int
    requests: float
    start_s: float | None = None
    """Unix time of the first minute, where the history has one (Prometheus
    returns samples only from where the series begin, maybe after the range's start)."""


def build_fleet_trace(
    rate_per_s: np.ndarray,
    step_s: float,
    prompt_buckets: Sequence[tuple[float, float]],
    generation_buckets: Sequence[tuple[float, float]],
    *,
    seed: int = 0,
    samples: int = TOKEN_SAMPLES,
) -> FleetTrace:
    """A per-minute count curve from a rate series sampled every ``step_s``
    (gaps, NaN, count as 0 requests) and a token file drawn from the histograms."""
    if not (math.isfinite(step_s) and step_s > 0):
        raise ValueError(f"step must be finite and > 0, got {step_s!r}")
    rate = np.nan_to_num(np.asarray(rate_per_s, dtype=np.float64), nan=0.0)
    rate = np.maximum(rate, 0.0)
    if rate.size == 0:
        raise ValueError("the arrival-rate series is empty")
    # resample to one value per minute: requests in each minute
    t = np.arange(rate.size) * step_s
    minutes = max(1, math.ceil(rate.size * step_s / 60.0 - 1e-9))
    per_min = np.bincount(
        np.minimum((t // 60.0).astype(np.int64), minutes - 1), weights=rate * step_s,
        minlength=minutes,
    )  # fmt: skip
    if per_min.sum() <= 0:
        # the counters were read (or the query had found no series), so what
        # is missing is traffic in the span they cover: say how long that is,
        # since a short span (a fleet just started) is the usual cause
        span = rate.size * step_s / 60.0
        raise ValueError(
            f"vLLM's request counters cover {span:.0f} minutes here and never rose in "
            "them: no request finished (a fleet just started, or one without traffic); "
            "tune needs a history that holds traffic"
        )
    rows = ["minute_start_s,requests"]
    rows += [f"{60 * i},{v:.3f}" for i, v in enumerate(per_min)]
    rng = np.random.default_rng(seed)
    prompt = sample_buckets(prompt_buckets, samples, rng)
    output = sample_buckets(generation_buckets, samples, rng)
    tok = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i, (p, o) in enumerate(zip(prompt.tolist(), output.tolist(), strict=True)):
        h, rem = divmod(i, 3600)
        m, s = divmod(rem, 60)
        tok.append(f"2024-01-01 {h % 24:02d}:{m:02d}:{s:02d}.0000000,{p},{o}")
    return FleetTrace("\n".join(rows) + "\n", "\n".join(tok) + "\n", minutes, float(per_min.sum()))
