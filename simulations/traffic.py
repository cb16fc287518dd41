"""Request workloads for the simulator: replayed traces and generated curves.

A :class:`Workload` holds sorted arrival times from 0 and each request's
prompt and output tokens. Files are read by :mod:`forecasting.readers`, the
forecaster's own code, so both see a file alike. Per-request traces are
replayed as recorded (a 0-token count becomes 1, counted in
:attr:`Workload.clamped_tokens`); rate and count curves get Poisson or gamma
arrivals inside each window and tokens drawn jointly from ``tokens_from``.
``rate_scale`` multiplies a curve, or thins and superposes jittered copies
of a trace. One generator seeded by ``TrafficOptions.seed`` draws everything,
so the same file and options give the same workload.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from engine.validate import int_at_least, require_positive
from forecasting.readers import Events, detect_format, read_events, read_series
from forecasting.series import DemandSeries

__all__ = [
    "DEFAULT_TOKENS_TRACE",
    "JITTER_S",
    "TrafficOptions",
    "Workload",
    "load_workload",
]

DEFAULT_TOKENS_TRACE: Path = Path(__file__).resolve().parent / "data" / "azure_llm_2023_conv.csv"
"""Azure LLM inference 2023 conversation trace (CC-BY-4.0), shipped for token lengths."""

JITTER_S = 1.0
"""Width (s) of the uniform jitter applied to the extra copies of an up-scaled trace.

Small next to a 15 s control loop, large enough to break up identical stamps."""

_PER_REQUEST = ("azure", "burstgpt", "mooncake")
_CURVES = ("servegen_rate", "minute_counts", "counts_10s", "plain_rate")


@dataclass(frozen=True, eq=False)
class Workload:
    """Requests sorted by arrival; all arrays have one entry per request.

    ``arrival_s`` lies in ``[0, duration_s)``; token counts are int64 >= 1.
    ``clamped_tokens`` counts token values raised to 1 (zero in the trace).
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    name: str
    duration_s: float
    clamped_tokens: int = 0

    def __post_init__(self) -> None:
        if not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise ValueError(
                f"{self.name}: duration_s must be finite and > 0, got {self.duration_s}"
            )
        arrival = np.array(self.arrival_s, dtype=np.float64)
        prompt = np.array(self.prompt_tokens, dtype=np.int64)
        output = np.array(self.output_tokens, dtype=np.int64)
        if not (arrival.ndim == prompt.ndim == output.ndim == 1):
            raise ValueError(f"{self.name}: arrays must be 1-D")
        if not (arrival.size == prompt.size == output.size):
            raise ValueError(
                f"{self.name}: arrays differ in length "
                f"({arrival.size}, {prompt.size}, {output.size})"
            )
        if arrival.size:
            if not np.all(np.isfinite(arrival)):
                raise ValueError(f"{self.name}: arrival times must be finite")
            if np.any(np.diff(arrival) < 0):
                raise ValueError(f"{self.name}: arrival times must be sorted")
            if arrival[0] < 0 or arrival[-1] >= self.duration_s:
                raise ValueError(f"{self.name}: arrival times must lie in [0, {self.duration_s:g})")
            if prompt.min() < 1 or output.min() < 1:
                raise ValueError(f"{self.name}: token counts must be >= 1")
        if self.clamped_tokens < 0:
            raise ValueError(f"{self.name}: clamped_tokens must be >= 0")
        for arr in (arrival, prompt, output):
            arr.setflags(write=False)
        object.__setattr__(self, "arrival_s", arrival)
        object.__setattr__(self, "prompt_tokens", prompt)
        object.__setattr__(self, "output_tokens", output)

    def __len__(self) -> int:
        return int(self.arrival_s.size)


@dataclass(frozen=True)
class TrafficOptions:
    """How to turn a trace into a workload (see the module docstring)."""

    rate_scale: float = 1.0
    start_s: float = 0.0
    duration_s: float | None = None
    seed: int = 0
    arrivals: Literal["poisson", "gamma"] = "poisson"
    cv: float = 1.0
    tokens_from: Path | None = None
    """Per-request trace token lengths are drawn from for curves; None = DEFAULT_TOKENS_TRACE."""

    def __post_init__(self) -> None:
        require_positive("rate_scale", self.rate_scale)
        require_positive("cv", self.cv)
        if not (isinstance(self.start_s, int | float) and math.isfinite(self.start_s)):
            raise ValueError(f"start_s must be a finite number >= 0, got {self.start_s!r}")
        if self.start_s < 0:
            raise ValueError(f"start_s must be >= 0, got {self.start_s!r}")
        if self.duration_s is not None:
            require_positive("duration_s", self.duration_s)
        if self.arrivals not in ("poisson", "gamma"):
            raise ValueError(f"arrivals must be 'poisson' or 'gamma', got {self.arrivals!r}")
        if not int_at_least(self.seed, 0):
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------


def load_workload(path: str | Path, options: TrafficOptions | None = None) -> Workload:
    """Any supported trace file -> a :class:`Workload` (rules in the module docstring)."""
    opts = TrafficOptions() if options is None else options
    p = Path(path)
    kind = detect_format(p)
    rng = np.random.default_rng(opts.seed)
    if kind in _PER_REQUEST:
        if opts.arrivals != "poisson":
            raise ValueError(
                f"{p}: arrivals={opts.arrivals!r} applies to rate curves; "
                "a per-request trace is replayed with its recorded arrival times"
            )
        return _replay(p, read_events(p), opts, rng)
    if kind in _CURVES:
        return _from_curve(p, read_series(p), opts, rng)
    raise ValueError(f"{p}: format {kind!r} cannot be turned into a workload")  # pragma: no cover


def _window(
    path: Path, start_s: float, duration_s: float | None, end_s: float
) -> tuple[float, float]:
    """(start, duration) of the replayed window; an error if it leaves the trace."""
    if start_s >= end_s:
        raise ValueError(f"{path}: start_s {start_s:g} s is past the trace end ({end_s:g} s long)")
    duration = end_s - start_s if duration_s is None else float(duration_s)
    if start_s + duration > end_s * (1 + 1e-12):
        raise ValueError(
            f"{path}: window [{start_s:g}, {start_s + duration:g}) s runs past the trace end "
            f"({end_s:g} s long); shorten duration_s or start_s"
        )
    return start_s, duration


def _tokens(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Token counts as int64 >= 1, and how many were raised to 1."""
    out = np.rint(np.asarray(values, dtype=np.float64)).astype(np.int64)
    low = out < 1
    n = int(np.count_nonzero(low))
    if n:
        out[low] = 1
    return out, n


def _replay(path: Path, events: Events, opts: TrafficOptions, rng: np.random.Generator) -> Workload:
    """A per-request trace as recorded, thinned or superposed by ``rate_scale``."""
    order = np.argsort(events.times_s, kind="stable")
    times = events.times_s[order] - events.times_s[order[0]]
    prompt = events.prompt_tokens[order]
    output = events.output_tokens[order]
    # The trace ends at the end of the second holding its last request, so
    # that request lies inside [0, duration).
    end = float(math.floor(times[-1]) + 1.0)
    start, duration = _window(path, float(opts.start_s), opts.duration_s, end)

    scale = float(opts.rate_scale)
    copies = max(1, math.ceil(scale))
    keep_p = scale / copies
    parts_t: list[np.ndarray] = []
    parts_i: list[np.ndarray] = []
    idx = np.arange(times.size)
    for c in range(copies):
        t = times
        if c > 0:
            t = times + rng.uniform(-JITTER_S / 2, JITTER_S / 2, size=times.size)
        keep = rng.random(times.size) < keep_p if keep_p < 1.0 else np.ones(times.size, bool)
        parts_t.append(t[keep])
        parts_i.append(idx[keep])
    t_all = np.concatenate(parts_t)
    i_all = np.concatenate(parts_i)
    inside = (t_all >= start) & (t_all < start + duration)
    t_all, i_all = t_all[inside] - start, i_all[inside]
    srt = np.argsort(t_all, kind="stable")
    t_all, i_all = t_all[srt], i_all[srt]
    p_tok, n_p = _tokens(prompt[i_all])
    o_tok, n_o = _tokens(output[i_all])
    return Workload(t_all, p_tok, o_tok, path.stem, duration, n_p + n_o)


def _from_curve(
    path: Path, series: DemandSeries, opts: TrafficOptions, rng: np.random.Generator
) -> Workload:
    """Arrivals drawn inside each window of a rate curve, tokens sampled."""
    step = series.step_s
    n = len(series)
    start, duration = _window(path, float(opts.start_s), opts.duration_s, n * step)
    end = start + duration
    first = math.floor(start / step + 1e-9)
    last = min(n, math.ceil(end / step - 1e-9))
    win = np.arange(first, last)
    seg_lo = np.maximum(win * step, start) - start
    seg_hi = np.minimum((win + 1) * step, end) - start
    seg_len = np.maximum(seg_hi - seg_lo, 0.0)
    rate = series.values[first:last] * float(opts.rate_scale)

    if opts.arrivals == "poisson":
        arrival = _poisson(seg_lo, seg_len, rate, rng)
    else:
        arrival = _gamma(seg_lo, seg_len, rate, float(opts.cv), rng)
    arrival = arrival[arrival < duration]  # float rounding at the last edge

    tokens_path = DEFAULT_TOKENS_TRACE if opts.tokens_from is None else Path(opts.tokens_from)
    prompt, output, clamped = _sample_tokens(
        tokens_path, arrival + start + series.start_s, _companion_means(path), rng
    )
    return Workload(arrival, prompt, output, path.stem, duration, clamped)


def _poisson(
    seg_lo: np.ndarray, seg_len: np.ndarray, rate: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Poisson arrivals: a Poisson count per window, placed uniformly inside it."""
    counts = rng.poisson(rate * seg_len)
    lo = np.repeat(seg_lo, counts)
    width = np.repeat(seg_len, counts)
    return np.sort(lo + rng.random(lo.size) * width)


def _gamma(
    seg_lo: np.ndarray,
    seg_len: np.ndarray,
    rate: np.ndarray,
    cv: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """Gamma renewal arrivals following a piecewise-constant rate (time rescaling).

    Intervals are gamma with mean 1 and coefficient of variation ``cv`` in the
    time where the cumulative rate grows by 1 per unit; the first arrival is
    the stationary forward recurrence time (uniform share of a length-biased
    interval), so the process looks the same at the start as later on.
    """
    mass = rate * seg_len
    cum = np.concatenate(([0.0], np.cumsum(mass)))
    total = float(cum[-1])
    if total <= 0:
        return np.empty(0)
    shape = 1.0 / (cv * cv)
    scale = cv * cv
    first = rng.random() * rng.gamma(shape + 1.0, scale)
    chunks = [np.array([first])]
    reached = first
    while reached < total:
        need = total - reached
        k = int(need + 6.0 * cv * math.sqrt(need) + 64)
        gaps = rng.gamma(shape, scale, size=k)
        more = reached + np.cumsum(gaps)
        chunks.append(more)
        reached = float(more[-1])
    u = np.concatenate(chunks)
    u = u[u < total]
    # Window j holds u in [cum[j], cum[j+1]); empty windows have cum[j] == cum[j+1]
    # and so are never picked by side="right".
    j = np.searchsorted(cum[:-1], u, side="right") - 1
    r = rate[j]
    offset = np.where(r > 0, (u - cum[j]) / np.where(r > 0, r, 1.0), 0.0)
    return np.sort(seg_lo[j] + np.minimum(offset, seg_len[j]))


# --------------------------------------------------------------------------
# Token lengths for curves
# --------------------------------------------------------------------------

_RATE_NAME = re.compile(r"^(?P<prefix>.+)_rate(?:_[^_]+)?$")


@dataclass(frozen=True, eq=False)
class _TokenMeans:
    """Mean prompt/output tokens per window, on the rate file's time axis."""

    start_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    source: str


def _companion_means(rate_path: Path) -> _TokenMeans | None:
    """The ServeGen ``<prefix>_tokens_*.csv`` beside ``<prefix>_rate_*.csv``, if any."""
    m = _RATE_NAME.match(rate_path.stem)
    if m is None:
        return None
    found = sorted(rate_path.parent.glob(f"{m.group('prefix')}_tokens_*.csv"))
    if not found:
        return None
    if len(found) > 1:
        names = ", ".join(f.name for f in found)
        raise ValueError(f"{rate_path}: several token files beside it ({names}); keep one")
    return _read_means(found[0])


def _read_means(path: Path) -> _TokenMeans:
    """A ServeGen token-means file: ``window_start_s``, ``mean_input_tokens`` (or,
    for multimodal models, the sum of the ``mean_*_tokens`` input columns),
    ``mean_output_tokens``."""
    frame = pd.read_csv(path)
    frame.columns = [str(c).strip().lower() for c in frame.columns]
    if "window_start_s" not in frame or "mean_output_tokens" not in frame:
        raise ValueError(f"{path}: a token file needs window_start_s and mean_output_tokens")
    if "mean_input_tokens" in frame:
        inputs = ["mean_input_tokens"]
    else:
        inputs = [
            c
            for c in frame.columns
            if c.startswith("mean_") and c.endswith("_tokens") and c != "mean_output_tokens"
        ]
        if not inputs:
            raise ValueError(f"{path}: no mean_input_tokens (or mean_*_tokens) column")
    cols = ["window_start_s", *inputs, "mean_output_tokens"]
    values = frame[cols].apply(pd.to_numeric, errors="coerce").to_numpy(dtype=float)
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError(f"{path}: token means must be numbers (no empty cells)")
    if np.any(values[:, 1:] < 0):
        raise ValueError(f"{path}: token means must be >= 0")
    order = np.argsort(values[:, 0], kind="stable")
    values = values[order]
    return _TokenMeans(values[:, 0], values[:, 1:-1].sum(axis=1), values[:, -1], str(path))


def _sample_tokens(
    tokens_path: Path,
    abs_times: np.ndarray,
    means: _TokenMeans | None,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, int]:
    """Bootstrap (prompt, output) pairs from a per-request trace; rescale to window means."""
    kind = detect_format(tokens_path)
    if kind not in _PER_REQUEST:
        raise ValueError(
            f"{tokens_path}: tokens_from must be a per-request trace (Azure, BurstGPT, "
            f"Mooncake), got a {kind} file"
        )
    events = read_events(tokens_path)
    pick = rng.integers(0, events.times_s.size, size=abs_times.size)
    prompt = events.prompt_tokens[pick].astype(np.float64)
    output = events.output_tokens[pick].astype(np.float64)
    if means is not None and abs_times.size:
        w = np.clip(np.searchsorted(means.start_s, abs_times, side="right") - 1, 0, None)
        base_p = float(np.mean(events.prompt_tokens)) or 1.0
        base_o = float(np.mean(events.output_tokens)) or 1.0
        prompt = prompt * (means.prompt[w] / base_p)
        output = output * (means.output[w] / base_o)
    p, n_p = _tokens(prompt)
    o, n_o = _tokens(output)
    return p, o, n_p + n_o
