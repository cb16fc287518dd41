"""The sessions of a regime's days: when each starts, what it brings, its peak.

Why: a held-back day is missed for a reason found in its events, not in a
day's total. Listing each day's sessions (a run of minutes with demand,
between idle ones) shows whether the day that was missed held an event the
days before it did not: a session larger than any before it at its hour,
or one that starts earlier.

``python -m lab.regime_sessions sparse-bursts --days 5 --seed 1``
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lab.regime_generator import DAY_MIN, REGIMES, regime_counts

__all__ = ["Session", "day_sessions", "main", "markdown"]


@dataclass(frozen=True)
class Session:
    """One run of busy minutes of one day."""

    day: int
    start_min: int
    """Minute of the day its first busy minute starts."""
    minutes: int
    requests: float
    """Expected requests over it."""
    peak_per_min: float


def day_sessions(counts: np.ndarray, busy_above: float = 0.5) -> list[Session]:
    """Every session of whole days of per-minute expected counts: a run of
    minutes above ``busy_above`` requests (a session running past midnight
    is cut there)."""
    if counts.size % DAY_MIN:
        raise ValueError(f"need whole days of minutes, got {counts.size} minutes")
    out: list[Session] = []
    for day, minutes in enumerate(np.split(counts, counts.size // DAY_MIN)):
        busy = np.concatenate([[False], minutes > busy_above, [False]])
        edges = np.flatnonzero(np.diff(busy.astype(np.int8)))
        for lo, hi in zip(edges[::2], edges[1::2], strict=True):
            part = minutes[lo:hi]
            out.append(Session(day, int(lo), int(hi - lo), float(part.sum()), float(part.max())))
    return out


def markdown(sessions: Sequence[Session]) -> str:
    head = "| day | starts | minutes | requests | peak a minute |\n|---|---|---|---|---|\n"
    rows = "".join(
        f"| {s.day} | {s.start_min // 60:02d}:{s.start_min % 60:02d} | {s.minutes} "
        f"| {s.requests:,.0f} | {s.peak_per_min:.1f} |\n"
        for s in sessions
    )
    return head + rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.regime_sessions")
    parser.add_argument("regime")
    parser.add_argument("--days", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.regime not in REGIMES:
        parser.error(f"regime {args.regime!r} is not one of {', '.join(REGIMES)}")
    if args.days < 1:
        parser.error(f"--days must be >= 1, got {args.days}")
    print(markdown(day_sessions(regime_counts(args.regime, args.days, args.seed))), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
