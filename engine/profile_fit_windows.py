"""The /metrics half of the profile fit: usable windows pooled by load shape, replayed.

Kept apart from ``engine.profile_fit`` (the solver and the report): which
stretches of /metrics pages measure the engine (steady, enough tokens,
known lengths), how windows of one shape are pooled, what closed-loop load
replays them, and the figures matched (mean ITL, and mean TTFT where nobody
queued). The histogram buckets are read too: where the median's bucket lies
wholly below the mean, the inter-token latency has a long tail the fit's
means follow (``WindowGroup.itl_long_tail``). Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engine.metrics_windows import LoadWindow, bucket_bounds
from engine.profile_types import Profile
from engine.serving_replay import ServingLoad, replay_load

#: (name, measured, model) of each matched figure, for a profile.
Targets = Callable[[Profile], list[tuple[str, float, float]]]

#: Windows with fewer inter-token observations than this are too noisy to use.
MIN_ITL_COUNT = 20
#: Windows with fewer first tokens than this do not enter the TTFT match.
MIN_TTFT_COUNT = 3


#: Requests per client in a window's replay: enough for the means to settle.
REPLAY_REQUESTS_PER_CLIENT = 8


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
        load = ServingLoad(
            num_requests=clients * REPLAY_REQUESTS_PER_CLIENT,
            prompt_tokens=prompt,
            output_tokens=output,
            max_concurrency=clients,
            first_arrivals_over_s=itl * output,
            think_s=itl,
        )
        bounds = bucket_bounds(_pooled([w.itl_buckets for w in members]), 0.5)
        tail = bounds is not None and bounds[1] < itl
        groups.append(WindowGroup(load, itl, itl_n, ttft, ttft_n, itl_long_tail=tail))
    return groups


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
    """Each group's mean ITL and TTFT against its replay's."""

    def targets(profile: Profile) -> list[tuple[str, float, float]]:
        out: list[tuple[str, float, float]] = []
        for g in groups:
            replay = replay_load(profile, g.load, per_token=False)
            shape = f"{g.load.max_concurrency}x{g.load.prompt_tokens}+{g.load.output_tokens}"
            out.append((f"mean_itl_s@{shape}", g.itl_mean_s, replay.mean_itl_s))
            if g.ttft_mean_s is not None:
                out.append((f"mean_ttft_s@{shape}", g.ttft_mean_s, replay.mean_ttft_s))
        return out

    return targets
