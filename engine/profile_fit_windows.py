"""The /metrics half of the profile fit: usable windows pooled by load shape, replayed.

Kept apart from ``engine.profile_fit`` (the solver and the report): which
stretches of /metrics pages measure the engine (steady, enough tokens,
known lengths), how windows of one shape are pooled, what closed-loop load
replays them, and the figures matched (mean ITL, and mean TTFT where nobody
queued; the median and p90 of both where the histogram's buckets pin them,
``QuantileTarget``). Where the median's bucket lies wholly below the mean,
the inter-token latency has a long tail (``WindowGroup.itl_long_tail``). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.metrics_windows import LoadWindow, bucket_bounds, histogram_quantile
from engine.percentile import percentile
from engine.profile_types import Profile
from engine.serving_replay import ServingLoad, replay_load, steady_clients

#: (name, measured, model) of each matched figure, for a profile.
Targets = Callable[[Profile], list[tuple[str, float, float]]]

#: Windows with fewer inter-token observations than this are too noisy to use.
MIN_ITL_COUNT = 20
#: Windows with fewer first tokens than this do not enter the TTFT match.
MIN_TTFT_COUNT = 3


#: Requests per client in a window's replay: enough for the means to settle.
REPLAY_REQUESTS_PER_CLIENT = 8
#: The quantiles matched where the buckets pin them: (name prefix, quantile).
QUANTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p90", 0.9))
#: A pooled histogram needs this many observations before its quantiles are matched.
MIN_QUANTILE_COUNT = 20
#: A quantile whose bucket spans more than this factor (upper / lower) says too
#: little to match (vLLM's ITL buckets span 1.33 to 2.5, its TTFT ones up to 4).
MAX_BUCKET_RATIO = 4.0


@dataclass(frozen=True)
class QuantileTarget:
    """A measured quantile: Prometheus' interpolated value and the bucket it lies in.

    The fit's residual is the model's distance outside the bucket (zero
    inside it): interpolating as if a bucket's observations were spread
    evenly biases a narrow distribution, so only the bucket is trusted.
    """

    figure: str  # "itl" or "ttft"
    name: str  # "p50", "p90"
    q: float
    value_s: float
    lower_s: float
    upper_s: float

    def residual(self, model_s: float) -> float:
        """log distance from the model's quantile to the bucket (0 inside it)."""
        if model_s <= 0.0:
            return math.log(1e-9 / self.lower_s)
        if model_s < self.lower_s:
            return math.log(model_s / self.lower_s)
        if model_s > self.upper_s:
            return math.log(model_s / self.upper_s)
        return 0.0


@dataclass(frozen=True)
class WindowGroup:
    """Windows with one load shape: their closed-loop replay and their pooled means."""

    load: ServingLoad
    itl_mean_s: float
    itl_count: float
    ttft_mean_s: float | None
    ttft_count: float
    #: the ITL histogram's median bucket lies wholly below the mean: a long tail
    itl_long_tail: bool = False
    #: the quantiles whose buckets pin them (``MAX_BUCKET_RATIO``, ``MIN_QUANTILE_COUNT``)
    quantiles: tuple[QuantileTarget, ...] = ()
    #: the pooled histograms, (upper bound, cumulative count): the tails stalls make
    itl_buckets: tuple[tuple[float, float], ...] = ()
    ttft_buckets: tuple[tuple[float, float], ...] = ()

    @property
    def shape(self) -> str:
        """clients x prompt + output tokens: the group's name in target names."""
        load = self.load
        return f"{load.max_concurrency}x{load.prompt_tokens}+{load.output_tokens}"

    def itl_median_matched(self) -> bool:
        """Whether the ITL median is a matched figure (its bucket pins it)."""
        return any(t.figure == "itl" and t.q == 0.5 for t in self.quantiles)


def window_groups(windows: Sequence[LoadWindow]) -> list[WindowGroup]:
    """Usable windows pooled by load shape (concurrency, prompt and output lengths).

    Each shape is replayed as closed-loop clients at the window's mean
    number of running requests, out of step with each other (their first
    requests spread over one request's decode time; each pauses about one
    step between requests, so arrivals fall anywhere in a step, as a real
    client's network round trip makes them), as in a steady service;
    the means are pooled weighted by their observation counts. TTFT is pooled
    only from windows where nobody waited for a slot (a queue adds time no
    step-time figure explains).
    """
    pooled: dict[tuple[int, int, int], list[LoadWindow]] = {}
    for w in usable_windows(windows):
        key = (
            max(1, round(w.mean_running)),
            max(1, round(w.mean_prompt_tokens or 1.0)),
            max(1, round(w.mean_generation_tokens or 1.0)),
        )
        pooled.setdefault(key, []).append(w)
    groups: list[WindowGroup] = []
    for (clients, prompt, output), members in sorted(pooled.items()):
        itl_n = sum(w.itl_count for w in members)
        itl = sum((w.itl_mean_s or 0.0) * w.itl_count for w in members) / itl_n
        ttft_members = [w for w in members if w.ttft_mean_s is not None and _ttft_usable(w)]
        ttft_n = sum(w.ttft_count for w in ttft_members)
        ttft = (
            sum((w.ttft_mean_s or 0.0) * w.ttft_count for w in ttft_members) / ttft_n
            if ttft_n
            else None
        )
        load = steady_clients(clients * REPLAY_REQUESTS_PER_CLIENT, prompt, output, clients, itl)
        itl_buckets = _pooled([w.itl_buckets for w in members])
        bounds = bucket_bounds(itl_buckets, 0.5)
        tail = bounds is not None and bounds[1] < itl
        quantiles = _quantiles("itl", itl_buckets)
        ttft_buckets = _pooled([w.ttft_buckets for w in ttft_members]) if ttft is not None else ()
        quantiles += _quantiles("ttft", ttft_buckets)
        groups.append(
            WindowGroup(
                load,
                itl,
                itl_n,
                ttft,
                ttft_n,
                itl_long_tail=tail,
                quantiles=quantiles,
                itl_buckets=itl_buckets,
                ttft_buckets=ttft_buckets,
            )
        )
    return groups


def _quantiles(figure: str, buckets: tuple[tuple[float, float], ...]) -> tuple[QuantileTarget, ...]:
    """The ``QUANTILES`` of a pooled histogram whose buckets pin them."""
    if not buckets or buckets[-1][1] < MIN_QUANTILE_COUNT:
        return ()
    out: list[QuantileTarget] = []
    for name, q in QUANTILES:
        read = histogram_quantile(buckets, q)
        if read is not None and read[2] <= MAX_BUCKET_RATIO * read[1]:
            out.append(QuantileTarget(figure, name, q, *read))
    return tuple(out)


def _pooled(
    windows: Sequence[tuple[tuple[float, float], ...]],
) -> tuple[tuple[float, float], ...]:
    """Windows' bucket counts summed (those with the same bounds as the first)."""
    present = [b for b in windows if b]
    if not present:
        return ()
    bounds = [u for u, _ in present[0]]
    same = [b for b in present if [u for u, _ in b] == bounds]
    return tuple((u, sum(b[i][1] for b in same)) for i, u in enumerate(bounds))


def _ttft_usable(w: LoadWindow) -> bool:
    """TTFT measures the prefill only where requests did not queue for a slot."""
    return w.ttft_count >= MIN_TTFT_COUNT and w.mean_waiting < 0.5


def usable_windows(windows: Sequence[LoadWindow]) -> list[LoadWindow]:
    """Steady windows with enough decoding to measure and known request lengths.

    Steady: the running count moved by at most one request across the
    window's pages (a window that spans a change of load mixes two batches).
    """
    return [
        w
        for w in windows
        if w.max_running - w.min_running <= 1.0
        and w.itl_mean_s is not None
        and w.itl_count >= MIN_ITL_COUNT
        and w.mean_running >= 0.5
        and w.mean_prompt_tokens is not None
        and w.mean_generation_tokens is not None
    ]


def metrics_targets(groups: Sequence[WindowGroup]) -> Targets:
    """Each group's mean ITL and TTFT against its replay's, then its quantiles.

    A replay's quantile is over its requests' TTFTs or all its token gaps
    (``engine.percentile``, as the benchmark computes them); the measured one
    is the bucket's interpolated value (see ``quantile_bounds`` for what the
    fit's residual uses).
    """

    def targets(profile: Profile) -> list[tuple[str, float, float]]:
        out: list[tuple[str, float, float]] = []
        for g in groups:
            # one replay serves both: a second, coarse one for the means would
            # cost more, and its means differ from the per-token one's in the last bits
            replay = replay_load(profile, g.load, per_token=bool(g.quantiles))
            out.append((f"mean_itl_s@{g.shape}", g.itl_mean_s, replay.mean_itl_s))
            if g.ttft_mean_s is not None:
                out.append((f"mean_ttft_s@{g.shape}", g.ttft_mean_s, replay.mean_ttft_s))
            for t in g.quantiles:
                values = replay.itls if t.figure == "itl" else replay.ttfts
                model = percentile(values, 100.0 * t.q) if values else 0.0
                out.append((quantile_name(t, g), t.value_s, model))
        return out

    return targets


def quantile_name(target: QuantileTarget, group: WindowGroup) -> str:
    """The target's name in the report: p50_ttft_s@4x512+128."""
    return f"{target.name}_{target.figure}_s@{group.shape}"


def quantile_bounds(groups: Sequence[WindowGroup]) -> dict[str, QuantileTarget]:
    """The quantile targets by report name: their residual is the distance to the bucket."""
    return {quantile_name(t, g): t for g in groups for t in g.quantiles}
