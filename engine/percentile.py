"""The percentile ``vllm bench serve`` reports, in one place.

The load client writes its result file with it and the profile check
compares with it, so both must compute the same figure as the benchmark:
numpy's default (linear interpolation), without importing numpy into either.
"""

from __future__ import annotations

from collections.abc import Sequence


def percentile(values: Sequence[float], p: float) -> float:
    """numpy's default (linear) percentile ``p`` (0 to 100) of ``values``; none is an error."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of nothing")
    k = (len(ordered) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)
