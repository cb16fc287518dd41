"""A tracker's history of one ScaledObject (pure: no I/O, no clock).

- ``BinnedSeries``: readings sampled into forecast bins of ``step_s`` (a bin
  holds the reading at its end, the latest one if that is missing) in a
  bounded ring. Bins end at multiples of ``step_s``, so history backfilled
  from Prometheus at that step gives exactly the bins of a tracker that ran
  all along.
- ``SaturationCapacity``: per-replica throughput learned from moments when
  the fleet was saturated (a queue had formed), over a bounded time window.
- ``lead_time_from_samples``: the lead time to plan for from measured pod
  creation -> Ready durations.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_WindowsKey = tuple[int, int, tuple[int, ...]]
"""A ``window_stats`` answer's key: (version, smoothing, window edges)."""
_WINDOWS_KEPT = 4
"""Answers kept: a refresh reads two windows at each of two horizons."""


@dataclass(frozen=True)
class Bin:
    """A closed forecast bin: demand at ``end_s`` (rates over the source's window)."""

    end_s: float
    requests_per_s: float
    tokens_per_s: float


class BinnedSeries:
    """Readings sampled into fixed bins; a ring of the last ``capacity`` bins."""

    def __init__(self, step_s: float, capacity: int) -> None:
        if step_s <= 0 or capacity < 1:
            raise ValueError("step_s must be > 0 and capacity >= 1")
        self.step_s = float(step_s)
        self.capacity = int(capacity)
        # Ring buffers as numpy arrays: 24 bytes a bin, not ~100 as Python floats
        # in deques (1,000 objects x a day of 15 s bins stays ~140 MB -> ~35 MB).
        self._ends = np.zeros(capacity)
        self._requests = np.zeros(capacity)
        self._tokens = np.zeros(capacity)
        self._head = 0  # next write position
        self._count = 0
        self._open_end: float | None = None
        self._last_r = 0.0
        self._last_t = 0.0
        self._n = 0
        # Bumped whenever the closed bins change; keys tokens_per_request's
        # cache (asked every refresh, changes only when a bin closes).
        self._version = 0
        self._tpr_cache: dict[int, tuple[int, float | None]] = {}
        # The ordered bin ends and the request rates' running sum, kept until
        # a bin closes (every refresh reads them; rebuilding the whole ring's
        # cumulative sum each time cost more than the windows read).
        self._stats_cache: tuple[int, np.ndarray, np.ndarray] | None = None
        # The last few windows' answers (peaks, counts), for the version in
        # their key: refreshes between two bin closes mostly read the same
        # bins (their start moves less than a bin).
        self._windows_cache: dict[_WindowsKey, tuple[list[float], list[float]]] = {}

    def _push(self, end: float, requests: float, tokens: float) -> None:
        i = self._head
        self._ends[i], self._requests[i], self._tokens[i] = end, requests, tokens
        self._head = (i + 1) % self.capacity
        self._count = min(self._count + 1, self.capacity)
        self._version += 1

    def _ordered(self, values: np.ndarray) -> np.ndarray:
        if self._count < self.capacity:
            return values[: self._count]
        return np.concatenate((values[self._head :], values[: self._head]))

    def bin_end(self, time_s: float) -> float:
        """End of the bin holding ``time_s`` (bins are ``(end - step, end]``)."""
        return math.ceil(round(time_s / self.step_s, 9)) * self.step_s

    def add(self, time_s: float, requests_per_s: float, tokens_per_s: float) -> list[Bin]:
        """Add one reading; returns the bins this closed (oldest first).

        Non-finite values are skipped (a gap). Bins with no reading at all
        repeat the previous bin's value, so the series stays equally spaced.
        A bin's value is its latest reading (normally the one at its end).
        """
        end = self.bin_end(time_s)
        closed: list[Bin] = []
        if self._open_end is not None and end < self._open_end:
            return closed  # out of order (a late duplicate): ignore
        if self._open_end is not None and end > self._open_end:
            closed.extend(self._close_until(end))
        if self._open_end is None:
            self._open_end = end
        if math.isfinite(requests_per_s):
            self._last_r = max(0.0, requests_per_s)
            self._last_t = max(0.0, tokens_per_s) if math.isfinite(tokens_per_s) else 0.0
            self._n += 1
        if abs(time_s - end) < 1e-6:
            # A reading at the bin's end is its last: close it now, not one
            # refresh later, so forecasts see the newest data at once.
            closed.extend(self._close_until(end + self.step_s))
        return closed

    def _close_until(self, new_end: float) -> list[Bin]:
        """Close the open bin and any empty bins before ``new_end`` (which opens)."""
        assert self._open_end is not None
        if self._n:
            value_r, value_t = self._last_r, self._last_t
        elif self._count:
            last = (self._head - 1) % self.capacity
            value_r, value_t = float(self._requests[last]), float(self._tokens[last])
        else:
            value_r = value_t = math.nan
        count = round((new_end - self._open_end) / self.step_s)  # bins to close
        first = max(0, count - self.capacity)  # older ones would fall out of the ring anyway
        out: list[Bin] = []
        if math.isfinite(value_r):
            for i in range(first, count):
                bin_end = round(self._open_end + i * self.step_s, 6)
                self._push(bin_end, value_r, value_t)
                out.append(Bin(bin_end, value_r, value_t))
        self._open_end = new_end
        self._n = 0
        return out

    def load(self, times: np.ndarray, requests: np.ndarray, tokens: np.ndarray) -> None:
        """Fill an empty series from history sampled at the bin ends (vectorised).

        Same result as ``add`` for each point in turn: leading gaps dropped,
        later gaps (NaN or missing grid points) carry the previous value.
        """
        if self._count or self._open_end is not None:
            raise RuntimeError("load() needs an empty series")
        finite = np.isfinite(requests)
        if not finite.any():
            return
        all_times = np.asarray(times, dtype=float)
        t = all_times[finite]
        r = np.maximum(np.asarray(requests, dtype=float)[finite], 0.0)
        k = np.asarray(tokens, dtype=float)[finite]
        k = np.where(np.isfinite(k), np.maximum(k, 0.0), 0.0)
        steps = np.round(t / self.step_s).astype(np.int64)
        last = int(np.round(all_times[-1] / self.step_s))  # trailing gaps carry too
        grid = np.arange(steps[0], max(last, int(steps[-1])) + 1)
        where = np.searchsorted(steps, grid, side="right") - 1  # latest sample at or before
        keep = min(grid.size, self.capacity)
        grid, where = grid[-keep:], where[-keep:]
        self._ends[:keep] = np.round(grid * self.step_s, 6)
        self._requests[:keep] = r[where]
        self._tokens[:keep] = k[where]
        self._count = keep
        self._head = keep % self.capacity
        self._open_end = round(float(grid[-1] + 1) * self.step_s, 6)
        self._version += 1

    def __len__(self) -> int:
        return self._count

    @property
    def version(self) -> int:
        """Bumped whenever the closed bins change (a key for caches)."""
        return self._version

    @property
    def last_end(self) -> float | None:
        return float(self._ends[(self._head - 1) % self.capacity]) if self._count else None

    def requests(self, until_s: float | None = None, last: int | None = None) -> np.ndarray:
        """Closed bins' request rates (oldest first), up to ``until_s``, at most ``last``."""
        return self._window(self._requests, until_s, last)

    def tokens(self, until_s: float | None = None, last: int | None = None) -> np.ndarray:
        return self._window(self._tokens, until_s, last)

    def _window(self, values: np.ndarray, until_s: float | None, last: int | None) -> np.ndarray:
        ordered = self._ordered(values)
        stop = ordered.size
        if until_s is not None:
            stop = int(np.searchsorted(self._ordered(self._ends), until_s + 1e-9, side="right"))
        start = 0 if last is None else max(0, stop - last)
        return np.array(ordered[start:stop], dtype=float)

    def window_stats(
        self, starts: Sequence[float], width_s: float, smooth_bins: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """For each start, over the bins ending in ``(start, start + width_s]``
        (NaN where the series holds none of them): the largest
        ``smooth_bins``-bin moving mean of the request rate (so one noisy 15-s
        bin does not pass for a session's level), and the requests that
        arrived (rate times step: one stray request counts as one)."""
        if not self._count:
            return np.full(len(starts), math.nan), np.full(len(starts), math.nan)
        cached = self._stats_cache
        if cached is not None and cached[0] == self._version:
            ends, cs = cached[1], cached[2]
        else:
            ends = self._ordered(self._ends)
            cs = np.concatenate(([0.0], np.cumsum(self._ordered(self._requests))))
            self._stats_cache = (self._version, ends, cs)
        k = max(1, int(smooth_bins))
        # one searchsorted for every edge (the same float sums as one by one)
        edges = [start + 1e-6 for start in starts] + [start + width_s + 1e-6 for start in starts]
        where = np.searchsorted(ends, edges, side="left").tolist()
        key = (self._version, k, tuple(where))
        hit = self._windows_cache.get(key)
        if hit is not None:
            # fresh arrays: a caller must not change another's answer
            return np.array(hit[0]), np.array(hit[1])
        n = len(starts)
        peaks = np.full(n, math.nan)
        counts = np.full(n, math.nan)
        for i in range(n):
            lo, hi = where[i], where[n + i]
            if hi <= lo:
                continue
            # means of the k bins ending at each bin in the window (fewer at the ring's start)
            stop = np.arange(lo, hi) + 1
            first = np.maximum(stop - k, 0)
            peaks[i] = float(np.max((cs[stop] - cs[first]) / (stop - first)))
            counts[i] = float(cs[hi] - cs[lo]) * self.step_s
        # all kept answers share one version: a bin's close drops them all
        if any(old[0] != self._version for old in self._windows_cache):
            self._windows_cache.clear()
        elif len(self._windows_cache) >= _WINDOWS_KEPT:
            del self._windows_cache[next(iter(self._windows_cache))]
        self._windows_cache[key] = (peaks.tolist(), counts.tolist())
        return peaks, counts

    def tokens_per_request(self, last: int) -> float | None:
        """Mean tokens per request over the last ``last`` bins (None when no requests).

        Cached until a bin closes: the scaler asks every refresh (several
        times), bins close only every forecast step.
        """
        cached = self._tpr_cache.get(last)
        if cached is not None and cached[0] == self._version:
            return cached[1]
        r = self.requests(last=last)
        t = self.tokens(last=last)
        total = float(np.sum(r))
        value = float(np.sum(t)) / total if total > 0 else None
        self._tpr_cache[last] = (self._version, value)
        return value


class SaturationCapacity:
    """Throughput one replica sustains, learned while a queue had formed.

    When requests wait, replicas run as fast as they can: tokens/s and
    requests/s per ready replica then measure capacity. The estimate is the
    median of the samples within ``window_s`` of the newest one (robust to
    one odd refresh). Samples are kept for ``memory_s``: a replica's capacity
    does not change while the fleet idles, and a fleet that saturates only
    at a daily event must still know it at the next one, where the forecast
    sizes the event's fleet ahead of its first request.
    """

    def __init__(
        self, window_s: float = 3600.0, max_samples: int = 720, memory_s: float | None = None
    ) -> None:
        self.window_s = window_s
        self.memory_s = window_s if memory_s is None else max(window_s, memory_s)
        self._samples: deque[tuple[float, float, float]] = deque(maxlen=max_samples)
        # The medians, kept until a sample is added or expires (estimate is
        # asked every refresh; samples change far less often).
        self._estimate: tuple[float | None, float | None] | None = None

    def add(
        self,
        time_s: float,
        ready: int,
        waiting: float,
        requests_per_s: float,
        tokens_per_s: float,
        target_waiting: float,
    ) -> None:
        if ready <= 0 or not math.isfinite(waiting) or waiting < max(1.0, target_waiting):
            return
        if not (math.isfinite(requests_per_s) and requests_per_s > 0):
            return
        tokens = (
            tokens_per_s / ready if math.isfinite(tokens_per_s) and tokens_per_s > 0 else math.nan
        )
        self._samples.append((time_s, requests_per_s / ready, tokens))
        self._estimate = None

    def load(
        self,
        times: np.ndarray,
        ready: np.ndarray,
        waiting: np.ndarray,
        requests_per_s: np.ndarray,
        tokens_per_s: np.ndarray,
        target_waiting: float,
        until_s: float,
    ) -> None:
        """``add`` for each history point within the memory before ``until_s``.

        The saturated points are picked with numpy first: a restart replays
        the whole fit window (days of bins an object), of which few saturate,
        and only the newest ``max_samples`` of those can be kept."""
        ready_n = np.trunc(np.asarray(ready, dtype=float))
        wait = np.asarray(waiting, dtype=float)
        rate = np.asarray(requests_per_s, dtype=float)
        with np.errstate(invalid="ignore"):
            keep = (
                (np.asarray(times, dtype=float) > until_s - self.memory_s)
                & (ready_n > 0)
                & np.isfinite(wait)
                & (wait >= max(1.0, target_waiting))
                & np.isfinite(rate)
                & (rate > 0)
            )
        picked = np.nonzero(keep)[0]
        if self._samples.maxlen is not None:
            picked = picked[-self._samples.maxlen :]
        for i in picked:
            self.add(
                float(times[i]),
                int(ready[i]),
                float(waiting[i]),
                float(requests_per_s[i]),
                float(tokens_per_s[i]),
                target_waiting,
            )

    def estimate(self, now_s: float) -> tuple[float | None, float | None]:
        """(requests/s, tokens/s) per replica, or Nones when not saturated
        within the memory."""
        while self._samples and now_s - self._samples[0][0] > self.memory_s:
            self._samples.popleft()
            self._estimate = None
        if self._estimate is not None:
            return self._estimate
        if not self._samples:
            result: tuple[float | None, float | None] = (None, None)
        else:
            newest = self._samples[-1][0]
            recent = [s for s in self._samples if newest - s[0] <= self.window_s]
            reqs = float(np.median([s[1] for s in recent]))
            toks = [s[2] for s in recent if math.isfinite(s[2])]
            result = (reqs, (float(np.median(toks)) if toks else None))
        self._estimate = result
        return result


def lead_time_from_samples(
    samples: list[float] | tuple[float, ...], quantile: float = 0.9
) -> float | None:
    """The lead time to plan for: a high quantile of pod creation -> Ready.

    A high quantile, not the mean: planning for the typical start means one
    start in two arrives after the burst.
    """
    finite = [s for s in samples if math.isfinite(s) and s >= 0]
    if not finite:
        return None
    return float(np.quantile(np.asarray(finite), quantile))
