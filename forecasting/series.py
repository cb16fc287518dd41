"""Demand series and the ONE place where raw samples become a clean series.

Readers hand raw samples to :func:`regularize` or :func:`bin_events`; models
only see an equally spaced, finite, non-negative array. The rules, in order:
1. non-finite values are *missing samples*, never zeros (zeros are data);
2. a negative rate is an error; 3. samples are sorted by time (stable);
4. samples in one step ``floor((t - start) / step)`` are averaged;
5. a step holding only missing samples is interpolated between neighbours; an
empty step (an absent row) is interpolated with ``missing="interpolate"``
(rates) and a true zero with ``missing="zero"`` (counts); the series spans the
first to the last finite sample.

:func:`bin_events` counts each event in its step (empty steps are zeros) and
drops the last, partial step so that the final rate is not biased low.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

SIGNALS: tuple[str, ...] = ("requests_per_s", "prompt_tokens_per_s", "output_tokens_per_s")


@dataclass(frozen=True, eq=False)
class DemandSeries:
    """Equally spaced demand: ``values[i]`` is the mean rate over
    ``[start_s + i * step_s, start_s + (i + 1) * step_s)``."""

    start_s: float
    step_s: float
    values: np.ndarray
    signal: str
    source: str

    def __post_init__(self) -> None:
        if not (math.isfinite(self.step_s) and self.step_s > 0):
            raise ValueError(f"{self.source}: step_s must be > 0, got {self.step_s}")
        if not math.isfinite(self.start_s):
            raise ValueError(f"{self.source}: start_s must be finite, got {self.start_s}")
        vals = np.array(self.values, dtype=float)
        if vals.ndim != 1:
            raise ValueError(f"{self.source}: values must be 1-D, got shape {vals.shape}")
        if not np.all(np.isfinite(vals)):
            raise ValueError(f"{self.source}: values must be finite (use regularize())")
        if np.any(vals < 0):
            raise ValueError(f"{self.source}: demand values must be >= 0")
        vals.setflags(write=False)
        object.__setattr__(self, "values", vals)

    def __len__(self) -> int:
        return int(self.values.size)

    @property
    def times_s(self) -> np.ndarray:
        """Start time of each step."""
        return self.start_s + self.step_s * np.arange(self.values.size)

    def resample(self, step_s: float) -> DemandSeries:
        """Coarsen to a step that is a whole multiple of this one (mean rate).

        The trailing partial window is dropped. Refining (a smaller step) would
        invent structure and is refused.
        """
        ratio = step_s / self.step_s
        if abs(ratio - round(ratio)) > 1e-9 or round(ratio) < 1:
            raise ValueError(
                f"{self.source}: cannot resample step {self.step_s:g} s to {step_s:g} s "
                "(the new step must be a whole multiple of the native one)"
            )
        k = round(ratio)
        if k == 1:
            return self
        n = self.values.size // k
        if n == 0:
            raise ValueError(f"{self.source}: series shorter than one {step_s:g} s step")
        vals = self.values[: n * k].reshape(n, k).mean(axis=1)
        return DemandSeries(self.start_s, float(step_s), vals, self.signal, self.source)

    def window(self, last_steps: int) -> DemandSeries:
        """The last ``last_steps`` steps (all of them if the series is shorter)."""
        if last_steps <= 0 or last_steps >= self.values.size:
            return self
        skip = self.values.size - last_steps
        return DemandSeries(
            self.start_s + skip * self.step_s,
            self.step_s,
            self.values[skip:],
            self.signal,
            self.source,
        )


def regularize(
    times_s: np.ndarray,
    values: np.ndarray,
    step_s: float,
    *,
    signal: str,
    source: str,
    missing: Literal["interpolate", "zero"] = "interpolate",
    start_s: float | None = None,
) -> DemandSeries:
    """Rate samples at arbitrary times -> a clean :class:`DemandSeries` (rules above)."""
    if not step_s > 0:
        raise ValueError(f"{source}: step must be > 0, got {step_s}")
    t = np.asarray(times_s, dtype=float)
    v = np.asarray(values, dtype=float)
    if t.shape != v.shape or t.ndim != 1:
        raise ValueError(f"{source}: times and values must be 1-D of equal length")
    ok = np.isfinite(v) & np.isfinite(t)
    lost_t = t[np.isfinite(t) & ~np.isfinite(v)]  # explicit missing samples (rule 5)
    t, v = t[ok], v[ok]
    if t.size == 0:
        raise ValueError(f"{source}: no usable samples (empty, or every value missing)")
    if np.any(v < 0):
        bad = int(np.flatnonzero(v < 0)[0])
        raise ValueError(f"{source}: negative demand {v[bad]:g} at t={t[bad]:g} s")
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    origin = float(t[0]) if start_s is None else float(start_s)
    slot = np.floor((t - origin) / step_s + 1e-9).astype(np.int64)
    keep = slot >= 0
    slot, v = slot[keep], v[keep]
    if slot.size == 0:
        raise ValueError(f"{source}: no samples at or after start {origin:g} s")
    n = int(slot[-1]) + 1
    sums = np.bincount(slot, weights=v, minlength=n)
    counts = np.bincount(slot, minlength=n)
    if missing not in ("interpolate", "zero"):
        raise ValueError(f"missing must be 'interpolate' or 'zero', got {missing!r}")
    have = counts > 0
    out = np.zeros(n)
    out[have] = sums[have] / counts[have]
    if missing == "interpolate":
        known = have
    else:  # absent steps are true zeros; steps holding only missing samples are not
        lost_slot = np.floor((lost_t - origin) / step_s + 1e-9).astype(np.int64)
        lost_slot = lost_slot[(lost_slot >= 0) & (lost_slot < n)]
        known = np.ones(n, dtype=bool)
        known[lost_slot] = False
        known |= have
    if not np.all(known):
        idx = np.arange(n)
        out[~known] = np.interp(idx[~known], idx[known], out[known])
    return DemandSeries(origin, float(step_s), out, signal, source)


def bin_events(
    times_s: np.ndarray,
    step_s: float,
    *,
    weights: np.ndarray | None = None,
    signal: str = "requests_per_s",
    source: str,
) -> DemandSeries:
    """Per-request events -> rate per step (events or weight units per second)."""
    if not step_s > 0:
        raise ValueError(f"{source}: step must be > 0, got {step_s}")
    t = np.asarray(times_s, dtype=float)
    if t.size == 0:
        raise ValueError(f"{source}: no events")
    if not np.all(np.isfinite(t)):
        raise ValueError(f"{source}: event timestamps must be finite")
    w = np.ones_like(t) if weights is None else np.asarray(weights, dtype=float)
    if w.shape != t.shape:
        raise ValueError(f"{source}: weights must match timestamps")
    start = float(t.min())
    n_full = math.floor((float(t.max()) - start) / step_s + 1e-9)
    if n_full < 1:
        raise ValueError(
            f"{source}: events span {float(t.max()) - start:g} s, less than one {step_s:g} s step"
        )
    slot = np.floor((t - start) / step_s + 1e-9).astype(np.int64)
    keep = slot < n_full
    sums = np.bincount(slot[keep], weights=w[keep], minlength=n_full)
    return DemandSeries(start, float(step_s), sums / step_s, signal, source)
