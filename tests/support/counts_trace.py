"""A small per-minute counts trace (``minute_start_s,requests``) on disk.

Why: the CLI and tuner tests replay a trace file as a user would; each wants
a few minutes of random counts, differing only in length, seed and range.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["write_counts_trace"]


def write_counts_trace(
    directory: Path, minutes: int, seed: int, low: int = 60, high: int = 160
) -> Path:
    """``directory/counts.csv``: ``minutes`` rows of counts drawn uniformly
    from ``[low, high)`` under ``seed``."""
    rng = np.random.default_rng(seed)
    rows = [f"{60 * i},{int(c)}" for i, c in enumerate(rng.integers(low, high, minutes))]
    path = directory / "counts.csv"
    path.write_text("minute_start_s,requests\n" + "\n".join(rows) + "\n")
    return path
