"""A server's stalls read from its benchmark runs' tails (``EngineStalls``).

The medians a fit matches say how fast the steps are, not how often or how
long the server stops between them: that shows in its mean gap, its
throughput and the tails of TTFT and of the gaps. A closed-form reading of
each run's tails starts a search that replays the runs through the fitted
profile and matches every tail figure at once, since an admission's stall
also delays the batch's next token (``docs/profiles.md`` has the stages).
Pure: the caller gives the measured runs and the profile to replay.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence

import numpy as np
from scipy.optimize import brentq, minimize
from scipy.special import expit

from engine.bench_result import BenchMeasurement
from engine.percentile import percentile
from engine.profile_types import MAX_STALL_SHARE, EngineStalls, Profile
from engine.serving_replay import replay_load

#: Without a p99 gap, a stall while working is taken to last this many median gaps.
DEFAULT_STALL_GAPS = 4.0
#: The share search stops within this much of the share (0.005: half a point).
SHARE_TOLERANCE = 0.005
#: The chance of a stall on admission assumed where a run gives a p99 TTFT but
#: no p90 (a tail past its p90 cannot be told from one that starts at p99).
P99_ONLY_CHANCE = 0.1
#: Replays the tail search may spend (each replays every run once).
REFINE_EVALUATIONS = 120
#: The tail search's first steps, in log length and logit chance.
SIMPLEX_STEP = 0.7
#: A profile's misses on the measured tails (log errors), for the search to square and sum.
TailResiduals = Callable[[Profile], list[float]]
#: The stall fields, as a profile file names them.
STALL_FIELDS: tuple[str, ...] = (
    "stalls.share",
    "stalls.mean_s",
    "stalls.admit_chance",
    "stalls.admit_mean_s",
)


def has_tails(benches: Sequence[BenchMeasurement]) -> bool:
    """Whether any run reports its mean gap: without it no stall can be read."""
    return any(b.mean_itl_s is not None for b in benches)


def admission_stalls(benches: Sequence[BenchMeasurement]) -> tuple[float, float]:
    """(chance, mean seconds) of a stall before admitting a request, from the TTFT tails.

    With a chance c of an exponential stall of mean D, a request's TTFT passes
    the median by more than x with probability about c e^(-x / D): p90 and p99
    give D = (x99 - x90) / ln 10 and c = 0.1 e^(x90 / D). A run with a p99
    but no p90 (``vllm bench serve``'s default percentiles) is read with c =
    ``P99_ONLY_CHANCE``, so D = x99 / ln(c / 0.01), and so is one whose p90
    is at its median (a chance of one in ten at most); the search after
    moves both. The median over the runs that report a p99; (0, 0) where
    none shows a tail.
    """
    chances: list[float] = []
    means: list[float] = []
    for b in benches:
        if b.p99_ttft_s is None:
            continue
        x99 = b.p99_ttft_s - b.median_ttft_s
        x90 = None if b.p90_ttft_s is None else b.p90_ttft_s - b.median_ttft_s
        if x99 <= 0.0 or (x90 is not None and x90 > 0.0 and x99 <= x90):
            chances.append(0.0)
            means.append(0.0)
        elif x90 is None or x90 <= 0.0:
            chances.append(P99_ONLY_CHANCE)
            means.append(x99 / math.log(P99_ONLY_CHANCE / 0.01))
        else:
            mean = (x99 - x90) / math.log(10.0)
            chances.append(min(1.0, 0.1 * math.exp(x90 / mean)))
            means.append(mean)
    if not chances:
        return 0.0, 0.0
    chance = statistics.median(chances)
    if chance <= 0.0:
        return 0.0, 0.0
    return chance, _round(statistics.median(m for m in means if m > 0.0))


def working_stall_mean_s(benches: Sequence[BenchMeasurement]) -> float:
    """A working stall's mean length: the p99 gap's excess over the median gap
    (at least one median gap), else ``DEFAULT_STALL_GAPS`` median gaps."""
    excess = [
        max(b.p99_itl_s - b.median_itl_s, b.median_itl_s)
        for b in benches
        if b.p99_itl_s is not None
    ]
    if excess:
        return statistics.median(excess)
    return DEFAULT_STALL_GAPS * statistics.median(b.median_itl_s for b in benches)


def starting_stalls(benches: Sequence[BenchMeasurement]) -> EngineStalls:
    """The stalls a fit starts from: the share from the mean gap over the median
    (every gap above the median counted as stalled), the rest as read above."""
    ratios = [
        1.0 - b.median_itl_s / b.mean_itl_s
        for b in benches
        if b.mean_itl_s is not None and b.mean_itl_s > 0.0
    ]
    share = min(MAX_STALL_SHARE, max(0.0, statistics.median(ratios))) if ratios else 0.0
    chance, admit_mean = admission_stalls(benches)
    return EngineStalls(
        share=share,
        mean_s=working_stall_mean_s(benches) if share > 0.0 else 0.0,
        admit_chance=chance,
        admit_mean_s=admit_mean,
    )


def fit_share(profile: Profile, benches: Sequence[BenchMeasurement]) -> EngineStalls:
    """``profile``'s stalls with the share at which its replay gives the runs'
    mean gaps (log errors summed over the runs that report one).

    The mean gap grows with the share; where the steps alone already make it
    the share is 0, and where even the largest share falls short it is the
    largest (``MAX_STALL_SHARE``).
    """
    runs = [b for b in benches if b.mean_itl_s is not None]
    stalls = profile.stalls
    mean_s = stalls.mean_s if stalls.mean_s > 0.0 else working_stall_mean_s(benches)

    def error(share: float) -> float:
        trial = dataclasses.replace(
            profile,
            stalls=dataclasses.replace(stalls, share=share, mean_s=mean_s if share else 0.0),
        )
        total = 0.0
        for b in runs:
            assert b.mean_itl_s is not None
            out = replay_load(trial, b.load, per_token=False)
            total += math.log(max(out.mean_itl_s, 1e-12) / b.mean_itl_s)
        return total

    if not runs or error(0.0) >= 0.0:
        share = 0.0
    elif error(MAX_STALL_SHARE) <= 0.0:
        share = MAX_STALL_SHARE
    else:
        share = float(brentq(error, 0.0, MAX_STALL_SHARE, xtol=SHARE_TOLERANCE))
        share = round(share, 4)
    if share <= 0.0:
        return dataclasses.replace(stalls, share=0.0, mean_s=0.0)
    return dataclasses.replace(stalls, share=share, mean_s=round(mean_s, 6))


def tail_checks(
    profile: Profile, benches: Sequence[BenchMeasurement], tags: Sequence[str]
) -> list[tuple[str, float, float]]:
    """(name, measured, model) of every tail figure the runs report: mean gap,
    p99 gap, p90 and p99 TTFT, each replayed through ``profile``."""
    out: list[tuple[str, float, float]] = []
    for b, tag in zip(benches, tags, strict=True):
        wanted = {
            "mean_itl_s": b.mean_itl_s,
            "p99_itl_s": b.p99_itl_s,
            "p90_ttft_s": b.p90_ttft_s,
            "p99_ttft_s": b.p99_ttft_s,
        }
        if all(v is None for v in wanted.values()):
            continue
        replay = replay_load(profile, b.load)
        model = {
            "mean_itl_s": statistics.fmean(replay.itls) if replay.itls else replay.mean_itl_s,
            "p99_itl_s": percentile(replay.itls, 99) if replay.itls else 0.0,
            "p90_ttft_s": percentile(replay.ttfts, 90),
            "p99_ttft_s": percentile(replay.ttfts, 99),
        }
        out += [(name + tag, v, model[name]) for name, v in wanted.items() if v is not None]
    return out


def bench_residuals(benches: Sequence[BenchMeasurement]) -> TailResiduals:
    """The runs' tail figures (mean and p99 gap, p90 and p99 TTFT) as log errors."""
    tags = [""] * len(benches)

    def residuals(profile: Profile) -> list[float]:
        return [
            math.log(max(model, 1e-12) / measured)
            for _, measured, model in tail_checks(profile, benches, tags)
        ]

    return residuals


def refine(profile: Profile, residuals: TailResiduals) -> EngineStalls:
    """``profile``'s stalls moved until its replays match the measured tails
    (``residuals``, squared and summed; ``bench_residuals`` gives a
    benchmark's).

    Nelder-Mead in log lengths and logit chances from ``profile.stalls``: the
    replayed quantiles move in steps (a stall more or less), which a
    derivative-free search tolerates. A kind of stall the start has none of
    stays at none; the start is kept when nothing beats it.
    """
    start = profile.stalls
    kinds = [
        k for k, on in (("work", start.share > 0.0), ("admit", start.admit_chance > 0.0)) if on
    ]
    if not kinds:
        return start

    def stalls_at(x: np.ndarray) -> EngineStalls:
        values = dict(zip(_names(kinds), x.tolist(), strict=True))
        out = start
        if "work" in kinds:
            share = MAX_STALL_SHARE * float(expit(values["share"]))
            out = dataclasses.replace(
                out, share=_round(share), mean_s=_round(_seconds(values["mean_s"]))
            )
        if "admit" in kinds:
            chance = float(expit(values["admit_chance"]))
            out = dataclasses.replace(
                out,
                admit_chance=_round(chance),
                admit_mean_s=_round(_seconds(values["admit_mean_s"])),
            )
        return out

    def loss(x: np.ndarray) -> float:
        trial = dataclasses.replace(profile, stalls=stalls_at(x))
        return sum(r**2 for r in residuals(trial))

    x0 = np.array(_start_vector(start, kinds))
    at_start = loss(x0)
    # the first simplex spans a factor of about 2 in every length and odds (scipy's
    # default of 5 % of each coordinate is nothing at a logit of 0)
    simplex = np.vstack([x0, x0 + SIMPLEX_STEP * np.eye(len(x0))])
    result = minimize(
        loss,
        x0,
        method="Nelder-Mead",
        options={
            "maxfev": REFINE_EVALUATIONS,
            "xatol": 0.02,
            "fatol": 1e-4,
            "initial_simplex": simplex,
        },
    )
    return stalls_at(result.x) if result.fun < at_start else start


def _names(kinds: Sequence[str]) -> list[str]:
    """The searched coordinates, in order, for the kinds of stall present."""
    names: list[str] = []
    if "work" in kinds:
        names += ["share", "mean_s"]
    if "admit" in kinds:
        names += ["admit_chance", "admit_mean_s"]
    return names


def _start_vector(start: EngineStalls, kinds: Sequence[str]) -> list[float]:
    """``start`` in the search's coordinates: logit chances, log lengths."""

    def logit(p: float) -> float:
        p = min(max(p, 1e-4), 1.0 - 1e-4)
        return math.log(p / (1.0 - p))

    x: list[float] = []
    if "work" in kinds:
        x += [logit(start.share / MAX_STALL_SHARE), math.log(start.mean_s)]
    if "admit" in kinds:
        x += [logit(start.admit_chance), math.log(start.admit_mean_s)]
    return x


def _seconds(log_s: float) -> float:
    """A searched log length in seconds, kept within 1 ns and 1 minute."""
    return math.exp(min(max(log_s, -20.0), math.log(60.0)))


def _round(value: float) -> float:
    """Four significant digits: the file stays readable."""
    return float(f"{value:.4g}")
