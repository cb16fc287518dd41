"""Can the /metrics fit read a server's stalls from vLLM's histograms? (An experiment.)

The product's fit reads stalls only from a benchmark's tails (mean and p99
gap, p90 and p99 TTFT). /metrics gives no p99, only cumulative buckets:
past the bucket that holds the median, the share of token gaps (and of first
tokens) above each bound is the tail a stall makes. This reads those shares
(a closed-form start from the tail past what the stall-free fit replays,
then ``engine.profile_fit_stalls.refine`` over every share and each shape's
mean gap, then the speed again) on pages the engine makes from a known
server (the fit tests' synthetic one, ``tests.engine.synthetic_vllm``),
scans the share with the speed fitted at each to see where the losses are
lowest, and tries a speed fit on the stalls' expected effect
(``expected_effect_fit``). The findings: ``lab/notes/2026-12-06-metrics-stalls.md``.

Run: ``.venv/bin/python -m lab.metrics_stalls [OUT.json]`` (a few minutes).
"""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.bench_result import bench_measurement
from engine.metrics_windows import LoadWindow, PageValues, bucket_bounds, load_windows
from engine.percentile import percentile
from engine.profile_fit import Targets, fit_profile
from engine.profile_fit_measurements import fit_to_measurements
from engine.profile_fit_stalls import TailResiduals, refine
from engine.profile_fit_windows import (
    MIN_QUANTILE_COUNT,
    REPLAY_REQUESTS_PER_CLIENT,
    WindowGroup,
    metrics_targets,
    quantile_bounds,
    window_groups,
)
from engine.profile_types import MAX_STALL_SHARE, EngineStalls, Profile
from engine.profiles import get_profile
from engine.serving_replay import ServingLoad, replay_load
from tests.engine.profile_fit_truth import BASE, true_profile
from tests.engine.synthetic_vllm import bench_files, synthetic_pages

#: A shape's tail replay holds at most this many requests per client: enough
#: that a stall share of a few per cent shows as dozens of stalls, cheap enough
#: for a search that replays every shape about a hundred times.
MAX_TAIL_REQUESTS_PER_CLIENT = 32

Buckets = tuple[tuple[float, float], ...]


@dataclass(frozen=True)
class TailShare:
    """The measured share of one histogram's observations above one bucket bound."""

    figure: str  # "itl" or "ttft"
    bound_s: float
    measured: float
    #: the share one event makes (a stall lengthens every running request's gap at
    #: once, so a gap histogram's events are its count over the clients)
    floor: float

    def residual(self, model: float) -> float:
        """The log error with one event's share added to both sides: a share
        under one event is noise, and a bound past the tail measures none."""
        return math.log((model + self.floor) / (self.measured + self.floor))


@dataclass(frozen=True)
class ShapeTail:
    """One load shape's tail shares and the longer replay that gives the model's."""

    group: WindowGroup
    load: ServingLoad
    shares: tuple[TailShare, ...]


def tail_shares(figure: str, buckets: Buckets, per_event: float) -> tuple[TailShare, ...]:
    """The share above each bound past the median's bucket (the bound that closes
    it is the body's, not the tail's), up to the first bound nothing passes;
    ``per_event`` observations make one event (``TailShare.floor``)."""
    total = buckets[-1][1] if buckets else 0.0
    if total < MIN_QUANTILE_COUNT:
        return ()
    median = bucket_bounds(buckets, 0.5)
    if median is None:
        return ()
    floor = min(1.0, per_event / total)
    out: list[TailShare] = []
    for upper, count in buckets:
        if upper <= median[1] or math.isinf(upper):
            continue
        share = max(0.0, 1.0 - count / total)
        out.append(TailShare(figure, upper, share, floor))
        if share <= 0.0:
            break
    return tuple(out)


def shape_tails(groups: Sequence[WindowGroup]) -> list[ShapeTail]:
    """The shapes whose histograms have a tail to read, each with a replay about
    as long as its measurement (``MAX_TAIL_REQUESTS_PER_CLIENT`` at most)."""
    out: list[ShapeTail] = []
    for g in groups:
        clients = g.load.max_concurrency or 1
        shares = tail_shares("itl", g.itl_buckets, clients) + tail_shares("ttft", g.ttft_buckets, 1)
        if not shares:
            continue
        measured_requests = g.itl_count / max(1, g.load.output_tokens - 1)
        per_client = min(
            MAX_TAIL_REQUESTS_PER_CLIENT,
            max(REPLAY_REQUESTS_PER_CLIENT, math.ceil(measured_requests / clients)),
        )
        load = dataclasses.replace(g.load, num_requests=clients * per_client)
        out.append(ShapeTail(g, load, shares))
    return out


def exponential_tail(points: Sequence[TailShare], median_upper_s: float) -> tuple[float, float]:
    """(chance, mean seconds) of an exponential excess that leaves ``points``'
    shares: the mean from the slope of log share over the bounds (at most the
    last bound with a share, and that where the slope does not fall; the first
    bound where one share is all there is), the chance from the first share
    carried back to the median bucket's end (a lower estimate: the step lies
    inside that bucket, so a stall's excess starts before its end)."""
    seen = [p for p in points if p.measured > 0.0]
    if not seen:
        return 0.0, 0.0
    mean = seen[0].bound_s
    if len(seen) >= 2:
        bounds = [p.bound_s for p in seen]
        slope = float(np.polyfit(bounds, [math.log(p.measured) for p in seen], 1)[0])
        # a tail that falls slowly, or not at all, says only that stalls outlast
        # its last bound
        mean = min(-1.0 / slope, seen[-1].bound_s) if slope < 0.0 else seen[-1].bound_s
    first = seen[0]
    chance = min(1.0, first.measured * math.exp((first.bound_s - median_upper_s) / mean))
    return chance, mean


def window_starting_stalls(tails: Sequence[ShapeTail], steps: Profile) -> EngineStalls:
    """The stalls a /metrics fit starts from, the median over the shapes.

    Only the tail past what ``steps`` (the fit without stalls) replays is read
    as stalls: a batch's prefills spread its gaps on their own. A gap stalls
    with the chance that excess gives, so the share of busy time stalled is
    chance x mean / mean gap; a first token likewise on admission.
    """
    shares: list[float] = []
    means: list[float] = []
    chances: list[float] = []
    admit_means: list[float] = []
    for t in tails:
        replay = replay_load(steps, t.load)
        for figure, buckets in (("itl", t.group.itl_buckets), ("ttft", t.group.ttft_buckets)):
            values = replay.itls if figure == "itl" else replay.ttfts
            points = [
                dataclasses.replace(s, measured=max(0.0, s.measured - _share_above(values, s)))
                for s in t.shares
                if s.figure == figure
            ]
            median = bucket_bounds(buckets, 0.5) if buckets else None
            if not points or median is None:
                continue
            chance, mean = exponential_tail(points, median[1])
            if figure == "itl":
                shares.append(min(MAX_STALL_SHARE, chance * mean / t.group.itl_mean_s))
                means.append(mean)
            else:
                chances.append(chance)
                admit_means.append(mean)
    share = statistics.median(shares) if shares else 0.0
    chance = statistics.median(chances) if chances else 0.0
    return EngineStalls(
        share=_round(share),
        mean_s=_round(statistics.median(m for m in means if m > 0.0)) if share > 0.0 else 0.0,
        admit_chance=_round(chance),
        admit_mean_s=_round(statistics.median(m for m in admit_means if m > 0.0))
        if chance > 0.0
        else 0.0,
    )


def _share_above(values: Sequence[float], share: TailShare) -> float:
    """The share of ``values`` past ``share``'s bound."""
    return sum(1 for v in values if v > share.bound_s) / len(values) if values else 0.0


def window_residuals(tails: Sequence[ShapeTail]) -> TailResiduals:
    """Each shape's tail shares and mean gap against its replay's, as log errors."""

    def residuals(profile: Profile) -> list[float]:
        out: list[float] = []
        for t in tails:
            replay = replay_load(profile, t.load)
            out.append(math.log(max(replay.mean_itl_s, 1e-12) / t.group.itl_mean_s))
            for s in t.shares:
                values = replay.itls if s.figure == "itl" else replay.ttfts
                out.append(s.residual(_share_above(values, s)))
        return out

    return residuals


def _round(value: float) -> float:
    """Four significant digits: the file stays readable."""
    return float(f"{value:.4g}")


#: The synthetic server's stalls: a fifth of its busy time, and one admission in
#: five (the same truth as the benchmark-tail fit's test).
TRUE_STALLS = EngineStalls(share=0.2, mean_s=0.05, admit_chance=0.2, admit_mean_s=0.15)
#: Closed-loop clients and seconds per phase, scraped every second (as the fit's tests).
PHASES = [(1, 40.0), (4, 40.0), (16, 40.0)]
PROMPT_TOKENS, OUTPUT_TOKENS = 512, 128
#: Loads to predict: the fit tests' two, which the fit never saw, and four clients
#: at the scraped lengths (a shape the fit was fitted on).
OTHER_LOADS = (
    ServingLoad(80, 256, 256, max_concurrency=4),
    ServingLoad(80, 1024, 64, request_rate=1.0),
    ServingLoad(300, 512, 128, max_concurrency=4),
)
#: The shares the scan fixes, fitting the speed at each.
SCAN_SHARES = (0.0, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4)


def read_stalls(
    base: Profile,
    windows: Sequence[LoadWindow],
    last: PageValues,
    shapes: Sequence[ShapeTail],
    start: EngineStalls,
) -> EngineStalls:
    """The stalls the pages' tails give from ``start``: the speed, then the search."""
    if not start.active:
        return start
    first = fit_to_measurements(
        dataclasses.replace(base, stalls=start), windows=windows, last_page=last
    )
    return refine(first.profile, window_residuals(shapes))


def prediction_errors(truth: Profile, fitted: Profile) -> list[dict[str, object]]:
    """The fitted profile's relative errors against the truth on ``OTHER_LOADS``."""
    out: list[dict[str, object]] = []
    for load in OTHER_LOADS:
        want, got = replay_load(truth, load), replay_load(fitted, load)
        assert want.median_itl_s is not None and got.median_itl_s is not None
        out.append(
            {
                "load": f"{load.max_concurrency or f'{load.request_rate}/s'} x "
                f"{load.prompt_tokens}+{load.output_tokens}",
                "median_ttft": got.median_ttft_s / want.median_ttft_s - 1.0,
                "median_itl": got.median_itl_s / want.median_itl_s - 1.0,
                "p90_ttft": percentile(got.ttfts, 90) / percentile(want.ttfts, 90) - 1.0,
                "throughput": got.output_throughput / want.output_throughput - 1.0,
            }
        )
    return out


def case(stalls: EngineStalls, *, scan: bool) -> dict[str, object]:
    """One synthetic server: the fit without stalls, with the stalls read, and the scan."""
    base = get_profile(BASE)
    truth = dataclasses.replace(true_profile(), stalls=stalls).with_vllm(num_gpu_blocks=2000)
    pages = synthetic_pages(truth, PHASES, prompt_tokens=PROMPT_TOKENS, output_tokens=OUTPUT_TOKENS)
    windows, last = load_windows(pages, min_window_s=10.0)
    groups = window_groups(windows)
    shapes = shape_tails(groups)
    tails = window_residuals(shapes)
    plain = fit_to_measurements(base, windows=windows, last_page=last)
    start = window_starting_stalls(shapes, plain.profile)
    read = read_stalls(base, windows, last, shapes, start)
    with_read = fit_to_measurements(
        dataclasses.replace(base, stalls=read), windows=windows, last_page=last
    )
    out: dict[str, object] = {
        "true_stalls": dataclasses.asdict(stalls),
        "start_stalls": dataclasses.asdict(start),
        "read_stalls": dataclasses.asdict(read),
        "tail_loss": {
            "truth": _loss(tails, truth),
            "plain": _loss(tails, plain.profile),
            "read": _loss(tails, with_read.profile),
        },
        "errors": {
            "plain": prediction_errors(truth, plain.profile),
            "read": prediction_errors(truth, with_read.profile),
        },
    }
    if scan:
        rounds, smooth = expected_effect_fit(
            base.with_vllm(num_gpu_blocks=2000), groups, tails, start
        )
        again = fit_to_measurements(
            dataclasses.replace(base, stalls=smooth.stalls), windows=windows, last_page=last
        )
        out["expected_effect"] = {
            "rounds": rounds,
            "errors": prediction_errors(truth, smooth),
            "speed_refitted_on_stalling_replays": _speed(again.profile),
            "errors_refitted": prediction_errors(truth, again.profile),
        }
        rows = []
        for share in SCAN_SHARES:
            fixed = dataclasses.replace(stalls, share=share, mean_s=stalls.mean_s if share else 0.0)
            fit = fit_to_measurements(
                dataclasses.replace(base, stalls=fixed), windows=windows, last_page=last
            )
            rows.append(
                {
                    "share": share,
                    "eta_mem": fit.profile.hardware.eta_mem,
                    "eta_compute": fit.profile.hardware.eta_compute,
                    "step_overhead_s": fit.profile.hardware.step_overhead_s,
                    "worst_target_miss": max(abs(t.miss) for t in fit.targets),
                    "tail_loss": _loss(tails, fit.profile),
                }
            )
        out["scan"] = rows
        out["truth_worst_target_miss"] = _worst_miss(groups, truth)
    return out


def _worst_miss(groups: Sequence[WindowGroup], profile: Profile) -> float:
    """The largest miss over the speed fit's figures (a quantile's outside its bucket),
    as the fit's report computes it."""
    buckets = quantile_bounds(groups)
    return max(
        abs(math.expm1(buckets[n].residual(model)) if n in buckets else model / measured - 1.0)
        for n, measured, model in metrics_targets(groups)(profile)
    )


def _loss(residuals: TailResiduals, profile: Profile) -> float:
    return sum(r * r for r in residuals(profile))


#: Rounds of "speed, then stalls" in the expected-effect variant.
SMOOTH_ROUNDS = 3


def expected_effect_targets(groups: Sequence[WindowGroup]) -> Targets:
    """The /metrics figures from a replay without stalls, the means given the
    stalls' expected effect: a gap 1 / (1 - share) longer, a first token as
    much longer plus the admission stall's expected delay (chance x mean); the
    p90s left out (a stall
    moves them by more than a scale)."""
    raw = metrics_targets(groups)

    def targets(profile: Profile) -> list[tuple[str, float, float]]:
        s = profile.stalls
        out: list[tuple[str, float, float]] = []
        for name, measured, model in raw(dataclasses.replace(profile, stalls=EngineStalls())):
            if name.startswith("mean_itl"):
                model = model / (1.0 - s.share)
            elif name.startswith("mean_ttft"):
                model = model / (1.0 - s.share) + s.admit_chance * s.admit_mean_s
            elif name.startswith("p90"):
                continue
            out.append((name, measured, model))
        return out

    return targets


def expected_effect_fit(
    base: Profile, groups: Sequence[WindowGroup], tails: TailResiduals, start: EngineStalls
) -> tuple[list[dict[str, object]], Profile]:
    """Rounds of a speed fit on stall-free replays (``expected_effect_targets``, smooth
    in the speed) and ``refine`` on stalling ones: each round's speed and stalls,
    and the last speed with the last stalls (``tails``: ``window_residuals``)."""
    buckets = quantile_bounds(groups)
    targets = expected_effect_targets(groups)

    def residuals(profile: Profile) -> list[float]:
        return [
            buckets[n].residual(model) if n in buckets else math.log(model / measured)
            for n, measured, model in targets(profile)
        ]

    rounds: list[dict[str, object]] = []
    stalls = start
    profile = base
    for _ in range(SMOOTH_ROUNDS):
        profile = fit_profile(
            dataclasses.replace(base, stalls=stalls), residuals, "", targets
        ).profile
        stalls = refine(profile, tails)
        rounds.append({**_speed(profile), "stalls_after": dataclasses.asdict(stalls)})
    return rounds, dataclasses.replace(profile, stalls=stalls)


def _speed(profile: Profile) -> dict[str, float]:
    hardware = profile.hardware
    return {
        "eta_mem": hardware.eta_mem,
        "eta_compute": hardware.eta_compute,
        "step_overhead_s": hardware.step_overhead_s,
    }


def bench_speed_fit(stalls: EngineStalls, folder: Path) -> dict[str, object]:
    """The benchmark path's speed fit with the true stalls given (its tails withheld,
    so only the speed moves): does it reach the true speed where the replay stalls?"""
    truth = dataclasses.replace(true_profile(), stalls=stalls)
    paths = [p for p in bench_files(truth, folder, 200) if p != "--bench-result"]
    runs = [bench_measurement(json.loads(Path(p).read_text()), p) for p in paths]
    fit = fit_to_measurements(dataclasses.replace(get_profile(BASE), stalls=stalls), bench=runs)
    return {
        "eta_mem": fit.profile.hardware.eta_mem,
        "eta_compute": fit.profile.hardware.eta_compute,
        "step_overhead_s": fit.profile.hardware.step_overhead_s,
        "worst_target_miss": max(abs(t.miss) for t in fit.targets),
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory() as folder:
        bench = bench_speed_fit(TRUE_STALLS, Path(folder))
    result = {
        "stalling": case(TRUE_STALLS, scan=True),
        "steady": case(EngineStalls(), scan=False),
        "bench_speed_fit_with_true_stalls": bench,
    }
    text = json.dumps(result, indent=2)
    if args:
        Path(args[0]).parent.mkdir(parents=True, exist_ok=True)
        Path(args[0]).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
