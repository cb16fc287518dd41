"""vLLM's histograms as the replica counts them: bucket counts, sum and count.

A module of its own so mypyc compiles it with the replica (``engine.native``):
the step loop observes a few values per request, and a compiled call from
compiled code stays in C. ``engine.metrics`` re-exports both classes.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from math import ceil, floor


class Histogram:
    """Non-cumulative bucket counts plus sum and count (mutable, replica-owned).

    `observe_arithmetic` adds a whole arithmetic series of values in
    O(buckets): one steady multi-step jump of the replica produces thousands of
    inter-token latencies that differ by a constant per step.
    """

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: Sequence[float]) -> None:
        if list(bounds) != sorted(set(bounds)):
            raise ValueError(f"histogram bounds must be strictly increasing, got {bounds}")
        self.bounds: tuple[float, ...] = tuple(bounds)
        self.counts: list[int] = [0] * (len(self.bounds) + 1)  # last one is +Inf
        self.sum: float = 0.0
        self.count: int = 0

    def observe(self, value: float, weight: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += weight
        self.sum += value * weight
        self.count += weight

    def observe_arithmetic(self, first: float, step: float, n: int, weight: int = 1) -> None:
        """Observe ``first + i*step`` for i in 0..n-1, each `weight` times."""
        if n <= 0 or weight <= 0:
            return
        if n == 1 or step == 0.0:
            self.observe(first, n * weight)
            return
        below = 0  # values <= the previous bound
        counts = self.counts
        for i, bound in enumerate(self.bounds):
            k = _count_at_most(first, step, n, bound)
            counts[i] += (k - below) * weight
            below = k
        counts[-1] += (n - below) * weight
        self.sum += (n * first + step * n * (n - 1) / 2) * weight
        self.count += n * weight

    def snapshot(self) -> HistogramSnapshot:
        cumulative = []
        acc = 0
        for c in self.counts[:-1]:
            acc += c
            cumulative.append(acc)
        return HistogramSnapshot(self.bounds, tuple(cumulative), self.sum, self.count)


def _count_at_most(first: float, step: float, n: int, bound: float) -> int:
    """How many of ``first + i*step`` (i < n, step != 0) are <= bound.

    The closed form gives a candidate; the two loops fix float rounding so the
    result equals observing each value one by one.
    """
    if step > 0:
        k = 0 if bound < first else min(n, floor((bound - first) / step) + 1)
        while k > 0 and first + (k - 1) * step > bound:
            k -= 1
        while k < n and first + k * step <= bound:
            k += 1
        return k
    # decreasing: values <= bound are the tail i >= j
    if bound < first + (n - 1) * step:
        return 0
    j = max(0, min(n - 1, ceil((first - bound) / -step))) if first > bound else 0
    while j > 0 and first + (j - 1) * step <= bound:
        j -= 1
    while j < n and first + j * step > bound:
        j += 1
    return n - j


@dataclass(frozen=True)
class HistogramSnapshot:
    """Cumulative counts at each bound (`le`), then sum and total count."""

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]
    sum: float
    count: int

    def cumulative_at(self, bound: float) -> int:
        return self.cumulative[self.bounds.index(bound)]
