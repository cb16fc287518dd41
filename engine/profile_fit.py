"""Fit a profile to measurements: the step-time factors the data determine, the rest kept.

A profile's speed comes from three figures of its device: effective memory
bandwidth, effective compute and a scheduler step's fixed cost. A fit scales
those three from a base profile until the engine model reproduces what a
real server measured, in a ``vllm bench serve`` result (its load replayed,
medians of ITL and TTFT and output throughput matched) and/or /metrics
windows (each window's mean ITL and TTFT matched at its mean batch, and
their median and p90 where the histogram's bucket pins them,
``engine.profile_fit_windows``); shape, vLLM settings and prices stay the
base's. A regularised least squares in log space pulls a factor the data
cannot see back to the base; a factor is *determined* when moving it changes
a matched figure (``DETERMINED_SENSITIVITY``), else reported as kept. Pure.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from engine.hardware import HardwareSpec
from engine.profile_fit_stalls import STALL_FIELDS
from engine.profile_fit_wake import WAKE_FIELDS
from engine.profile_types import Profile

#: The factors a fit may move, in the order of the parameter vector.
FACTORS: tuple[str, ...] = ("bandwidth", "compute", "overhead", "request_overhead")
FACTOR_FIELDS: dict[str, tuple[str, ...]] = {
    "bandwidth": ("hardware.eta_mem", "hardware.bandwidth_gbps"),
    "compute": ("hardware.eta_compute", "hardware.bf16_tflops", "hardware.fp8_tflops"),
    "overhead": ("hardware.step_overhead_s",),
    "request_overhead": ("request_overhead.in_fixed_s",),
}
#: Every field a factor moves, in order.
FACTOR_FIELD_NAMES: tuple[str, ...] = tuple(f for fields in FACTOR_FIELDS.values() for f in fields)
#: A request's fixed time outside the scheduler as a public measurement gives it
#: (docs/facts.md: vLLM's HTTP server and its hop to the engine, about 4 ms): the
#: scale the fit searches from when the base has none.
PUBLIC_IN_FIXED_S = 0.004
#: Largest posterior standard deviation (log factor, 1 sigma) of a determined factor:
#: beyond it (about x4.5 either way) the data do not pin the factor down (a factor
#: the data do not see at all keeps about its prior's width, NOISE_FLOOR / PRIOR_WEIGHT).
MAX_LOG_SD = 1.5
#: Relative measurement noise assumed at least (a benchmark's medians move this much
#: from run to run); the residuals' own scatter is used when it is larger.
NOISE_FLOOR = 0.05
#: d log(matched figure) / d log(factor) below which a factor is not determined.
DETERMINED_SENSITIVITY = 0.1
#: Weight of the pull towards the base, per unit of log factor.
PRIOR_WEIGHT = 0.02
#: Overhead used as the scale of the overhead factor when the base has none.
MIN_OVERHEAD_S = 1e-4
#: Significant digits kept for fitted figures (the file stays readable).
SIGNIFICANT_DIGITS = 4
#: A matched figure the fitted profile still misses by more than this is a poor fit.
POOR_FIT = 0.15


@dataclass(frozen=True)
class TargetCheck:
    """One matched figure: measured, and what the base and the fitted profile give."""

    name: str
    measured: float
    base_model: float
    fitted_model: float
    #: a quantile read from a histogram: the (lower, upper) bounds of its bucket
    bucket: tuple[float, float] | None = None

    @property
    def fitted_error(self) -> float:
        """Relative error of the fitted profile (0.05 = 5 % off)."""
        return self.fitted_model / self.measured - 1.0

    @property
    def miss(self) -> float:
        """``fitted_error``, or for a bucketed quantile how far outside its bucket."""
        if self.bucket is None:
            return self.fitted_error
        lower, upper = self.bucket
        return min(0.0, self.fitted_model / lower - 1.0) + max(0.0, self.fitted_model / upper - 1)


@dataclass(frozen=True)
class ProfileFit:
    """The fitted profile and the account of what the data decided."""

    profile: Profile
    determined: tuple[tuple[str, str], ...]  # (field, where from)
    kept: tuple[str, ...]
    targets: tuple[TargetCheck, ...]
    factors: dict[str, float]
    #: each determined factor's 1-sigma uncertainty, as a log factor (0.1: about 10 %)
    log_sd: dict[str, float] = dataclasses.field(default_factory=dict)
    #: why each kept field was kept (a field absent here: the data say nothing about it)
    kept_reasons: dict[str, str] = dataclasses.field(default_factory=dict)
    #: what a user must know before trusting the profile (poor fit, a capacity kept)
    warnings: tuple[str, ...] = ()
    #: a determined field's own relative 1-sigma uncertainty where no factor carries it
    field_uncertainty: dict[str, float] = dataclasses.field(default_factory=dict)

    @property
    def poor_targets(self) -> tuple[TargetCheck, ...]:
        """Matched figures the fitted profile misses by more than ``POOR_FIT``."""
        return tuple(t for t in self.targets if abs(t.miss) > POOR_FIT)


def _sig(value: float) -> float:
    if value == 0 or not math.isfinite(value):
        return value
    return float(f"{value:.{SIGNIFICANT_DIGITS}g}")


def scaled_hardware(hw: HardwareSpec, factors: Sequence[float]) -> HardwareSpec:
    """``hw`` with effective bandwidth, compute and step overhead multiplied by ``factors``.

    An efficiency that would pass 1 stays at 1 and the peak figure grows instead.
    """
    bandwidth, compute, overhead = factors
    eta_mem = _sig(hw.eta_mem * bandwidth)
    peak_bw = hw.bandwidth_gbps
    if eta_mem > 1.0:
        peak_bw, eta_mem = _sig(peak_bw * eta_mem), 1.0
    eta_c = _sig(hw.eta_compute * compute)
    bf16, fp8 = hw.bf16_tflops, hw.fp8_tflops
    if eta_c > 1.0:
        bf16 = _sig(bf16 * eta_c)
        fp8 = None if fp8 is None else _sig(fp8 * eta_c)
        eta_c = 1.0
    base_overhead = hw.step_overhead_s if hw.step_overhead_s > 0 else MIN_OVERHEAD_S
    new_overhead = hw.step_overhead_s if overhead == 1.0 else _sig(base_overhead * overhead)
    return dataclasses.replace(
        hw,
        eta_mem=eta_mem,
        bandwidth_gbps=peak_bw,
        eta_compute=eta_c,
        bf16_tflops=bf16,
        fp8_tflops=fp8,
        step_overhead_s=new_overhead,
    )


def with_factors(
    base: Profile,
    factors: Sequence[float],
    name: str | None = None,
    *,
    request_free: bool = False,
) -> Profile:
    """``base`` with scaled step-time figures (and ``name`` if given).

    With ``request_free`` the request overhead's fixed part is fitted too: the
    fourth factor scales the base's, or ``PUBLIC_IN_FIXED_S`` where the base
    has none; otherwise it stays the base's.
    """
    over = base.request_overhead
    scale = over.in_fixed_s if over.in_fixed_s > 0 else PUBLIC_IN_FIXED_S
    fixed = _sig(scale * factors[3]) if request_free else over.in_fixed_s
    return dataclasses.replace(
        base,
        name=name or base.name,
        hardware=scaled_hardware(base.hardware, factors[:3]),
        request_overhead=dataclasses.replace(over, in_fixed_s=fixed),
    )


Residuals = Callable[[Profile], list[float]]
#: (name, measured, model) of each matched figure, for a profile.
Targets = Callable[[Profile], list[tuple[str, float, float]]]
BENCH_SOURCE = "vllm bench serve"
METRICS_SOURCE = "vLLM /metrics"
#: The solver works on log factor + _OFFSET, so its relative difference step is absolute.
_OFFSET = 20.0
#: Largest factor the fit may apply: e^12 (about 1.6e5) either way.
_LOG_BOUND = 12.0


def _solve(
    base: Profile, residuals: Residuals, free: Sequence[int], x0: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Log factors (all; fixed ones 0) minimising the residuals, the data Jacobian
    (free columns), the data residuals at the solution and the cost.

    The replayed figures move in small steps (whole engine steps), so the
    solver can stop in a poor local minimum: with ``x0`` (a full log-factor
    vector) it also starts there, and the better of the two ends wins.
    """
    best = _solve_from(base, residuals, free, None)
    if x0 is not None and np.any(x0[list(free)] != 0):
        other = _solve_from(base, residuals, free, x0)
        if other[3] < best[3]:
            best = other
    return best


def _solve_from(
    base: Profile, residuals: Residuals, free: Sequence[int], x0: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """One least-squares run from zero (or ``x0``); also its cost."""

    def full(y_free: np.ndarray) -> np.ndarray:
        x = np.zeros(len(FACTORS))
        x[list(free)] = y_free - _OFFSET
        return x

    def fun(y_free: np.ndarray) -> np.ndarray:
        x = full(y_free)
        profile = with_factors(base, np.exp(x), request_free=_REQUEST in free)
        return np.array([*residuals(profile), *(PRIOR_WEIGHT * x[list(free)])])

    start = np.full(len(free), _OFFSET)
    if x0 is not None:
        start = np.clip(x0[list(free)] + _OFFSET, _OFFSET - _LOG_BOUND, _OFFSET + _LOG_BOUND)
    # scipy's diff_step is relative to |y|: the offset makes it about 0.02 in
    # log factor, well above the rounding of fitted figures (SIGNIFICANT_DIGITS)
    result = least_squares(
        fun,
        start,
        diff_step=0.02 / _OFFSET,
        bounds=(_OFFSET - _LOG_BOUND, _OFFSET + _LOG_BOUND),
        max_nfev=200,
    )
    n_data = len(result.fun) - len(free)
    return (
        full(result.x),
        np.asarray(result.jac)[:n_data],
        np.asarray(result.fun)[:n_data],
        float(result.cost),
    )


def posterior_log_sd(jac: np.ndarray, residuals: np.ndarray) -> np.ndarray:
    """Each free factor's 1-sigma uncertainty (log factor) from the linearised fit.

    Gauss-Newton with the prior as pseudo-observations: covariance
    ``s^2 (J^T J + w^2 I)^-1``, ``s`` the residual scatter (at least
    ``NOISE_FLOOR``), ``w`` the prior's weight. A direction the data do not
    see keeps the prior's width, ``s / w``: large.
    """
    n, p = jac.shape
    scatter = float(residuals @ residuals) / (n - p) if n > p else 0.0
    s2 = max(NOISE_FLOOR**2, scatter)
    info = jac.T @ jac + PRIOR_WEIGHT**2 * np.eye(p)
    return np.sqrt(np.maximum(s2 * np.diag(np.linalg.inv(info)), 0.0))


_HARDWARE = (0, 1, 2)
_REQUEST = 3
#: The request overhead is fitted only where it lowers the cost this much: a term
#: that explains nothing more stays at its prior rather than trade off with prefill.
REQUEST_OVERHEAD_GAIN = 0.1
#: Where the request overhead's search starts, in multiples of its scale.
REQUEST_OVERHEAD_STARTS: tuple[float, ...] = (1.0, 10.0, 50.0)


def _choose_factors(
    start: Profile, residuals: Residuals
) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """Which factors the data determine, and the fit with them free.

    The step-time factors first: all three, then those some matched figure moves
    with (sensitivity). Then the request overhead beside them, kept only where it
    lowers the cost by ``REQUEST_OVERHEAD_GAIN`` (a TTFT the engine's steps
    alone cannot make: several loads, or prompt lengths, separate it from
    prefill). Last, while a free factor's uncertainty passes ``MAX_LOG_SD``
    (another factor acts alike on every figure), the least certain is fixed.
    """
    x, jac, res, cost = _solve(start, residuals, _HARDWARE)
    # the step overhead trades against bandwidth and compute in a rough landscape:
    # also reach it from the fit without it, and keep the better end
    staged = _solve(start, residuals, _HARDWARE, _solve(start, residuals, (0, 1))[0])
    if staged[3] < cost:
        x, jac, res, cost = staged
    sensitivity = np.max(np.abs(jac), axis=0) if jac.size else np.zeros(len(_HARDWARE))
    free = [i for i in _HARDWARE if sensitivity[i] >= DETERMINED_SENSITIVITY]
    if len(free) < len(_HARDWARE):
        x, jac, res, cost = _solve(start, residuals, free, x)
    if free:
        with_request = [*free, _REQUEST]
        # a small fixed time barely moves a TTFT: start it also at 10 and 50 times
        # the public figure (40 and 200 ms), or the solver never sees its slope
        best: tuple[np.ndarray, np.ndarray, np.ndarray, float] | None = None
        for level in REQUEST_OVERHEAD_STARTS:
            x0 = x.copy()
            x0[_REQUEST] = math.log(level)
            trial = _solve_from(start, residuals, with_request, x0)
            if best is None or trial[3] < best[3]:
                best = trial
        assert best is not None
        x4, jac4, res4, cost4 = best
        if (
            cost4 < (1.0 - REQUEST_OVERHEAD_GAIN) * cost
            and np.max(np.abs(jac4[:, -1])) >= DETERMINED_SENSITIVITY
        ):
            free, x, jac, res, cost = with_request, x4, jac4, res4, cost4
    while free:
        sds = posterior_log_sd(jac, res)
        worst = int(np.argmax(sds))
        if sds[worst] <= MAX_LOG_SD:
            break
        free = [f for k, f in enumerate(free) if k != worst]
        x = x.copy()
        x[[i for i in range(len(FACTORS)) if i not in free]] = 0.0
        if free:
            x, jac, res, cost = _solve(start, residuals, free, x)
    if not free:
        x = np.zeros(len(FACTORS))
    return free, x, jac, res


def fit_profile(
    base: Profile,
    residuals: Residuals,
    source: str,
    targets: Targets,
    name: str | None = None,
    extra_vllm: dict[str, int] | None = None,
    kept_notes: dict[str, str] | None = None,
    warn_kept: Sequence[str] = (),
    buckets: dict[str, tuple[float, float]] | None = None,
    report_base: Profile | None = None,
) -> ProfileFit:
    """The general fit: ``residuals(profile)`` are log(model / measured) per matched figure.

    ``targets(profile)`` lists (name, measured, model) for the report;
    ``extra_vllm`` replaces vLLM settings the data gave directly (KV blocks);
    ``kept_notes`` says why the caller kept a field; those named in
    ``warn_kept`` are also warnings (a figure the user should supply);
    ``buckets`` gives a histogram quantile target's bucket, by name;
    ``report_base`` is the profile the report's base figures come from
    (``base`` unless the caller started the fit from an amended one).
    """
    start = base.with_vllm(**extra_vllm) if extra_vllm else base
    free, x, jac, res = _choose_factors(start, residuals)
    sds = posterior_log_sd(jac, res) if free else np.zeros(0)
    log_sd = {FACTORS[i]: float(sd) for i, sd in zip(free, sds, strict=True)}
    factors = np.exp(x)
    profile = with_factors(start, factors, name=name, request_free=_REQUEST in free)
    determined: list[tuple[str, str]] = []
    kept: list[str] = []
    for i, factor in enumerate(FACTORS):
        fields = FACTOR_FIELDS[factor]
        moved = [
            f for f in fields if i in free and profile_field(profile, f) != profile_field(base, f)
        ]
        determined += [(f, source) for f in moved]
        kept += [f for f in fields if f not in moved]
    for key, value in (extra_vllm or {}).items():
        if getattr(base.vllm, key) != value:
            determined.append((f"vllm.{key}", source))
    changed = {f for f, _ in determined}
    kept += [f for f in KEPT_FIELDS if f not in changed]
    checks = tuple(
        TargetCheck(n, measured, model, fitted, (buckets or {}).get(n))
        for (n, measured, model), (_, _, fitted) in zip(
            targets(report_base or base), targets(profile), strict=True
        )
    )
    notes = dict(kept_notes or {})
    if "request_overhead.in_fixed_s" in kept:
        notes["request_overhead.in_fixed_s"] = (
            "the input does not tell a request's fixed time outside the scheduler from its "
            "prefill (give loads at several concurrencies or prompt lengths); kept from the "
            f"base ({base.request_overhead.in_fixed_s * 1e3:g} ms; a public measurement "
            f"puts vLLM's HTTP server and engine hop at about {PUBLIC_IN_FIXED_S * 1e3:g} ms, "
            "docs/facts.md)"
        )
    reasons = _kept_reasons(kept, free, notes)
    fit = ProfileFit(
        profile=profile,
        determined=tuple(determined),
        kept=tuple(sorted(set(kept))),
        targets=checks,
        factors={f: float(factors[i]) for i, f in enumerate(FACTORS)},
        kept_reasons=reasons,
        log_sd=log_sd,
    )
    notes = {f: n for f, n in (kept_notes or {}).items() if f in warn_kept}
    return dataclasses.replace(fit, warnings=fit_warnings(fit, notes))


#: Why a field no measurement can reach is kept.
_NOT_MEASURED = "the measurements say nothing about it (kept from the base)"
_NOT_SEEN = (
    "the loads measured do not pin it down (no matched figure moves with it, or another "
    f"factor acts alike on every figure: uncertainty above x{math.exp(MAX_LOG_SD):.2f}); "
    "kept from the base"
)


def _kept_reasons(
    kept: Sequence[str], free: Sequence[int], notes: dict[str, str]
) -> dict[str, str]:
    """Each kept field's reason: the caller's note, an unseen factor, or not measurable."""
    unseen = {f for i, factor in enumerate(FACTORS) if i not in free for f in FACTOR_FIELDS[factor]}
    reasons: dict[str, str] = {}
    for f in sorted(set(kept)):
        if f in notes:
            reasons[f] = notes[f]
        elif f in unseen:
            reasons[f] = _NOT_SEEN
        elif any(f in fields for fields in FACTOR_FIELDS.values()):
            reasons[f] = "moved with its factor only where an efficiency passed 1"
        else:
            reasons[f] = _NOT_MEASURED
    return reasons


def fit_warnings(fit: ProfileFit, notes: dict[str, str]) -> tuple[str, ...]:
    """What must be said before the fitted profile is trusted.

    A poor fit (a matched figure missed by more than ``POOR_FIT`` after
    fitting: the engine model cannot reproduce the measurements with a
    speed change alone, so its predictions at other loads are doubtful),
    and every field the caller kept for a reason it noted (a KV capacity
    the data did not report).
    """
    out: list[str] = []
    poor = fit.poor_targets
    if poor:
        worst = sorted(poor, key=lambda t: -abs(t.miss))
        listed = "; ".join(
            f"{t.name} {100 * t.miss:+.0f} %{' outside its bucket' if t.bucket else ''} "
            f"(measured {t.measured:.4g}, "
            f"fitted model {t.fitted_model:.4g})"
            for t in worst
        )
        out.append(
            f"poor fit: {len(poor)} of {len(fit.targets)} matched figures are still off by "
            f"more than {100 * POOR_FIT:.0f} % after fitting: {listed}. The engine model cannot "
            "reproduce these measurements by a change of speed alone; check the profile "
            "(`prescaler engine check`) before trusting what it predicts"
        )
    for field_name, note in sorted(notes.items()):
        out.append(f"{field_name} kept from the base: {note}")
    return tuple(out)


#: Fields no factor moves (kept unless a caller's data set them).
KEPT_FIELDS: tuple[str, ...] = (
    "model",
    "instance_type",
    "tp",
    "precision",
    "price_on_demand_per_hour",
    "price_spot_per_hour",
    "startup",
    "vllm.max_model_len",
    "vllm.max_num_seqs",
    "vllm.max_num_batched_tokens",
    "vllm.enable_chunked_prefill",
    "vllm.gpu_memory_utilization",
    "vllm.block_size",
    "vllm.num_gpu_blocks",
    "hardware.memory_gib",
    "hardware.knee",
    "hardware.interconnect_gbps",
    "hardware.allreduce_latency_s",
    *STALL_FIELDS,
    *WAKE_FIELDS,
)


def profile_field(profile: Profile, dotted: str) -> object:
    section, _, name = dotted.partition(".")
    return getattr(getattr(profile, section), name)
