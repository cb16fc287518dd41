"""Synthetic workloads with a known shape (Poisson arrivals, lognormal tokens)
for the simulator's tests and the native digest battery, and the true rate a
workload was drawn at."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from engine.validate import require_positive
from simulations.traffic import Workload


def synthetic_workload(
    *,
    duration_s: float,
    base_rps: float,
    seed: int = 0,
    daily_amplitude: float = 0.0,
    period_s: float = 86_400.0,
    phase_s: float = 0.0,
    bursts: Sequence[tuple[float, float, float]] = (),
    on_off: tuple[float, float] | None = None,
    prompt_tokens: tuple[float, float] = (1024.0, 1.0),
    output_tokens: tuple[float, float] = (256.0, 1.0),
    name: str = "synthetic",
) -> Workload:
    """A Poisson workload with a known shape.

    The rate is ``base_rps * (1 + daily_amplitude * sin(2 pi (t + phase_s) / period_s))``,
    multiplied by ``multiplier`` inside each burst ``(start_s, duration_s,
    multiplier)``, and zero in the off part of ``on_off = (on_s, off_s)``
    (cycles start on). Arrivals are an exact inhomogeneous Poisson process
    (thinning of a homogeneous one at the peak rate). Token counts are
    lognormal with ``(mean, cv)`` (``cv = 0``: always the mean), rounded, >= 1.
    """
    require_positive("duration_s", duration_s)
    if not (math.isfinite(base_rps) and base_rps >= 0):
        raise ValueError(f"base_rps must be a finite number >= 0, got {base_rps!r}")
    if not (0.0 <= daily_amplitude <= 1.0):
        raise ValueError(f"daily_amplitude must lie in [0, 1], got {daily_amplitude!r}")
    require_positive("period_s", period_s)
    if not math.isfinite(phase_s):
        raise ValueError(f"phase_s must be finite, got {phase_s!r}")
    peak_mult = 1.0
    for b in bursts:
        if len(b) != 3:
            raise ValueError(f"a burst is (start_s, duration_s, multiplier), got {b!r}")
        b_start, b_len, b_mult = (float(x) for x in b)
        if not (math.isfinite(b_start) and b_start >= 0):
            raise ValueError(f"burst start_s must be finite and >= 0, got {b!r}")
        require_positive("burst duration_s", b_len)
        if not (math.isfinite(b_mult) and b_mult >= 0):
            raise ValueError(f"burst multiplier must be finite and >= 0, got {b!r}")
        peak_mult = max(peak_mult, b_mult)
    if on_off is not None:
        require_positive("on_off on_s", on_off[0])
        require_positive("on_off off_s", on_off[1])
    for label, (mean, cv) in (("prompt_tokens", prompt_tokens), ("output_tokens", output_tokens)):
        if not (math.isfinite(mean) and mean >= 1 and math.isfinite(cv) and cv >= 0):
            raise ValueError(f"{label} is (mean >= 1, cv >= 0), got {(mean, cv)!r}")

    rng = np.random.default_rng(seed)
    peak = base_rps * (1.0 + daily_amplitude) * peak_mult
    n = int(rng.poisson(peak * duration_s)) if peak > 0 else 0
    t = np.sort(rng.random(n) * duration_s)
    rate = base_rps * (1.0 + daily_amplitude * np.sin(2 * np.pi * (t + phase_s) / period_s))
    for b_start, b_len, b_mult in bursts:
        inside = (t >= b_start) & (t < b_start + b_len)
        rate = np.where(inside, rate * b_mult, rate)
    if on_off is not None:
        on_s, off_s = on_off
        rate = np.where(np.mod(t, on_s + off_s) < on_s, rate, 0.0)
    keep = rng.random(n) * peak < rate
    t = t[keep]
    prompt = _lognormal(rng, prompt_tokens, t.size)
    output = _lognormal(rng, output_tokens, t.size)
    return Workload(t, prompt, output, name, float(duration_s))


def _lognormal(rng: np.random.Generator, mean_cv: tuple[float, float], size: int) -> np.ndarray:
    mean, cv = mean_cv
    if cv == 0:
        return np.full(size, max(1, round(mean)), dtype=np.int64)
    sigma2 = math.log1p(cv * cv)
    draws = rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), size)
    return np.maximum(np.rint(draws), 1).astype(np.int64)


def true_rate(workload: Workload, step_s: float) -> np.ndarray:
    """Arrivals per second in each ``step_s`` bin from 0 to the workload's end.

    The last bin may be shorter than ``step_s``; it is divided by its own
    width so that its rate is not biased low.
    """
    require_positive("step_s", step_s)
    n = max(1, math.ceil(workload.duration_s / step_s - 1e-9))
    slot = np.minimum((workload.arrival_s // step_s).astype(np.int64), n - 1)
    counts = np.bincount(slot, minlength=n).astype(np.float64)
    widths = np.full(n, float(step_s))
    widths[-1] = workload.duration_s - (n - 1) * step_s
    return counts / widths
