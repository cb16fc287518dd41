"""An idle server's wake-up read from a run's per-request send times (``EngineStalls.wake_s``).

A real server's first token after an idle pause comes later than one sent
into a busy loop, and more so the longer the pause (docs/profiles.md). A
closed loop never lets the server idle, so a fit to one cannot see it; a
run that sends requests one at a time after pauses of several lengths
(``prescaler engine load --idle-pauses``) shows it request by request: the
idle time before each is its send time less the last earlier request's
end, and TTFT = base + wake_s x (1 - exp(-idle / wake_tau_s)) is fitted to
those that found the server idle. Pure: the caller reads the file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from engine.bench_result import BenchResultError
from engine.profile_types import NO_OVERHEAD, RequestOverhead

#: The wake-up's fields, as a profile file names them.
WAKE_FIELDS: tuple[str, ...] = ("stalls.wake_s", "stalls.wake_tau_s", "stalls.wake_max_idle_s")
#: Requests that found the server idle a fit needs at least.
MIN_IDLE_REQUESTS = 12
#: The shortest and longest idle pauses a fit needs some of (MIN_AT_EACH_END each):
#: the curve's foot and its plateau, without which base, size and time constant trade.
SHORT_IDLE_S = 0.05
LONG_IDLE_S = 0.3
MIN_AT_EACH_END = 4
#: Residuals beyond this many seconds count linearly (a stray tail moves nothing).
ROBUST_SCALE_S = 0.002
#: The time constant is searched within these bounds (seconds).
TAU_BOUNDS_S = (1e-4, 60.0)


@dataclass(frozen=True)
class IdleRequest:
    """One request that found the server idle: how long after the previous one's
    last token it was sent (as its client saw both), its TTFT, and the lengths
    that move the engine's own idle time (``engine_idle_s``)."""

    idle_s: float
    ttft_s: float
    prompt_tokens: int = 0
    previous_output_tokens: int = 0

    def engine_idle_s(self, overhead: RequestOverhead) -> float:
        """The idle time the replica model sees: from the previous request's last
        step (its way out earlier than its client's last token) until this one
        joins the scheduler (its way in later than its send)."""
        return (
            self.idle_s
            + overhead.in_fixed_s
            + overhead.in_per_prompt_token_s * self.prompt_tokens
            + overhead.out_fixed_s
            + overhead.out_per_output_token_s * self.previous_output_tokens
        )


@dataclass(frozen=True)
class WakeFit:
    """The fitted wake-up, its 1-sigma uncertainties and what it was read from."""

    wake_s: float
    wake_tau_s: float
    #: the TTFT a request sent into a just-idle server gets (not written to the profile)
    base_ttft_s: float
    wake_sd_s: float
    #: the time constant's uncertainty as a log factor (0.3: about 35 %)
    tau_log_sd: float
    requests: int
    #: the shortest and longest idle time among them
    idle_range_s: tuple[float, float]

    @property
    def seen(self) -> bool:
        """Whether the data tell a wake-up from none (its size above twice its sd)."""
        return self.wake_s > 2.0 * self.wake_sd_s

    @property
    def max_idle_s(self) -> float:
        """The longest idle time measured (four significant digits, as the profile
        file writes it): the model holds the curve there beyond it."""
        return _round(self.idle_range_s[1])

    @property
    def at_max_idle_s(self) -> float:
        """The wake-up after the longest idle time measured (the most it adds)."""
        return self.wake_s * -math.expm1(-self.max_idle_s / self.wake_tau_s)

    @property
    def still_rising(self) -> bool:
        """Whether the curve has grown to less than 63 % of ``wake_s`` by the longest
        idle time measured (its size is then an extrapolation, held at that point)."""
        return self.wake_tau_s > self.max_idle_s

    @property
    def unidentified_reason(self) -> str:
        """Why the wake-up cannot be used ("" when it can)."""
        if not self.seen:
            return (
                f"the wake-up ({self.wake_s * 1e3:.2g} ms, 1 sigma {self.wake_sd_s * 1e3:.2g} ms) "
                "cannot be told from none"
            )
        return ""


def _numbers(doc: Mapping[str, Any], key: str, source: str, n: int | None) -> list[Any]:
    value = doc.get(key)
    if not isinstance(value, list):
        raise BenchResultError(
            source, key, "missing: the idle wake-up needs each request's send time, TTFT and "
            "gaps (`prescaler engine load --save-result`, or vllm bench serve --save-detailed "
            "with start_times)"
        )  # fmt: skip
    if n is not None and len(value) != n:
        raise BenchResultError(source, key, f"has {len(value)} entries, expected {n}")
    return value


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def idle_requests(doc: Any, source: str) -> list[IdleRequest]:
    """The run's requests that were sent while no earlier one was in flight.

    A request's end is its send time plus its TTFT and gaps. A failed request's
    end is unknown, so the request after it is left out; so is the first (the
    time the server sat idle before the run is not in the file).
    """
    if not isinstance(doc, Mapping):
        raise BenchResultError(source, "(document)", "expected a JSON object")
    starts = _numbers(doc, "start_times", source, None)
    n = len(starts)
    ttfts = _numbers(doc, "ttfts", source, n)
    itls = _numbers(doc, "itls", source, n)
    errors = doc.get("errors")
    errors = errors if isinstance(errors, list) and len(errors) == n else [""] * n
    inputs = doc.get("input_lens")
    outputs = doc.get("output_lens")
    lengths_known = (
        isinstance(inputs, list)
        and isinstance(outputs, list)
        and len(inputs) == len(outputs) == n
        and all(_finite(v) for v in (*inputs, *outputs))
    )
    order = sorted(range(n), key=lambda i: float(starts[i]) if _finite(starts[i]) else math.inf)
    out: list[IdleRequest] = []
    last_end: float | None = None  # the latest end of any request before (None: none yet)
    last_output = 0
    after_failure = False  # a failed request's end is unknown: the next is left out
    for i in order:
        start = starts[i]
        ttft = ttfts[i]
        gaps = itls[i] if isinstance(itls[i], list) else None
        ok = (
            not errors[i]
            and _finite(start)
            and _finite(ttft)
            and ttft > 0
            and gaps is not None
            and all(_finite(g) for g in gaps)
        )
        if not ok or gaps is None:
            after_failure = True
            continue
        end = float(start) + float(ttft) + math.fsum(float(g) for g in gaps)
        if last_end is not None and not after_failure and float(start) >= last_end:
            prompt = int(inputs[i]) if lengths_known else 0  # type: ignore[index]
            out.append(IdleRequest(float(start) - last_end, float(ttft), prompt, last_output))
        after_failure = False
        if last_end is None or end >= last_end:
            last_end = end
            last_output = int(outputs[i]) if lengths_known else 0  # type: ignore[index]
    return out


def _curve(x: np.ndarray, idle: np.ndarray) -> np.ndarray:
    base, wake, log_tau = x
    return base - wake * np.expm1(-idle / math.exp(log_tau))


def fit_wake(
    requests: Sequence[IdleRequest], source: str, overhead: RequestOverhead = NO_OVERHEAD
) -> WakeFit:
    """TTFT = base + wake_s x (1 - exp(-idle / wake_tau_s)), fitted (robust least
    squares) to requests that found the server idle, with each idle time as a
    replica with ``overhead`` outside its scheduler sees it.

    Needs ``MIN_IDLE_REQUESTS`` of them, with ``MIN_AT_EACH_END`` idle under
    ``SHORT_IDLE_S`` and as many over ``LONG_IDLE_S``; else a ``ValueError``
    that says what to send.
    """
    idle = np.array([r.engine_idle_s(overhead) for r in requests], dtype=float)
    ttft = np.array([r.ttft_s for r in requests], dtype=float)
    short = int((idle < SHORT_IDLE_S).sum())
    long = int((idle > LONG_IDLE_S).sum())
    if len(requests) < MIN_IDLE_REQUESTS or short < MIN_AT_EACH_END or long < MIN_AT_EACH_END:
        raise ValueError(
            f"{source}: {len(requests)} requests found the server idle ({short} after under "
            f"{SHORT_IDLE_S * 1e3:g} ms, {long} after over {LONG_IDLE_S * 1e3:g} ms); the "
            f"wake-up needs {MIN_IDLE_REQUESTS}, with {MIN_AT_EACH_END} at each end: send "
            "one request at a time after pauses of several lengths (`prescaler engine load "
            "--idle-pauses 0,0.02,0.1,0.3,0.7,1.5,3 --num-prompts 43`)"
        )
    low = float(np.median(ttft[idle < SHORT_IDLE_S]))
    high = float(np.median(ttft[idle > LONG_IDLE_S]))
    x0 = np.array([low, max(high - low, 1e-4), math.log(float(np.median(idle)) or 0.1)])
    lo_tau, hi_tau = (math.log(b) for b in TAU_BOUNDS_S)
    x0[2] = min(max(x0[2], lo_tau + 1e-6), hi_tau - 1e-6)
    result = least_squares(
        lambda x: _curve(x, idle) - ttft,
        x0,
        bounds=([0.0, 0.0, lo_tau], [np.inf, np.inf, hi_tau]),
        loss="soft_l1",
        f_scale=ROBUST_SCALE_S,
    )
    base, wake, log_tau = (float(v) for v in result.x)
    sd = _sd(_jacobian(result.x, idle), _curve(result.x, idle) - ttft)
    return WakeFit(
        wake_s=_round(wake),
        wake_tau_s=_round(math.exp(log_tau)),
        base_ttft_s=_round(base),
        wake_sd_s=_round(sd[1]),
        tau_log_sd=_round(sd[2]),
        requests=len(requests),
        idle_range_s=(float(idle.min()), float(idle.max())),
    )


def _jacobian(x: np.ndarray, idle: np.ndarray) -> np.ndarray:
    """The curve's derivatives in (base, wake, log tau), one row per request."""
    _, wake, log_tau = x
    ratio = idle / math.exp(log_tau)
    decay = np.exp(-ratio)
    return np.column_stack([np.ones_like(idle), 1.0 - decay, -wake * ratio * decay])


def _sd(jac: np.ndarray, residuals: np.ndarray) -> list[float]:
    """Each parameter's 1-sigma uncertainty from the Gauss-Newton covariance, the
    residuals' spread read robustly (a stray tail does not inflate it); infinite
    where the data do not pin a parameter."""
    sigma = max(float(np.median(np.abs(residuals))) / 0.6745, 1e-6)
    try:
        cov = np.linalg.inv(jac.T @ jac) * sigma**2
    except np.linalg.LinAlgError:
        return [math.inf] * jac.shape[1]
    return [math.sqrt(v) if v >= 0 and math.isfinite(v) else math.inf for v in np.diag(cov)]


def _round(value: float) -> float:
    """Four significant digits: the file stays readable."""
    return float(f"{value:.4g}") if math.isfinite(value) else value
