"""Traffic regimes where a scaler's lead time matters: per-minute demand curves, seeded.

A smooth daily cycle gives a reactive trigger time to follow it, so a
forecast buys little there (it is kept as the control). The other regimes
are the shapes where live signals come too late: a model idle for hours
that gets a few bursts a day, a business-hours step with a steep 09:00 ramp,
and a large nightly batch. Each is a function of time of day plus seeded
day-to-day variation, so settings tuned on one day are scored on a day they
have not seen. The curve is the expected requests per minute, replayed by
:func:`simulations.traffic.load_workload` from a ``minute_start_s,requests``
file; t = 0 is midnight (Monday 00:00 UTC for the cron trigger). Rates are
sized for ``llama-3-8b@g5.xlarge`` (about 0.6 requests/s a replica) and stay
below 16 replicas, the simulator's default ``maxReplicaCount``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["REGIMES", "Regime", "regime_counts"]

DAY_MIN = 1440
"""Minutes in a day: the curve's resolution is one minute."""


@dataclass(frozen=True)
class Regime:
    """A named demand shape and why it is realistic."""

    name: str
    realism: str
    """What production traffic it stands for, in a sentence or two."""
    day_rate: Callable[[int, np.random.Generator], np.ndarray]
    """(day index, generator) -> requests/s for each minute of that day."""
    focus: tuple[int, int]
    """(first hour, hours): the part of the day around what makes the regime,
    for a sweep that cannot afford whole days (:func:`regime_counts`'s
    ``focus``)."""
    hours: tuple[int, int]
    """``[first, last)``, minutes of the day (last up to 1440), the team
    knows its traffic comes in, as it would write them in a KEDA ``cron``
    window: the baseline a forecast must beat knows the schedule as well as
    the team does. The hours a team names, so a day's traffic can start a
    few minutes before them (business-hours' ramp from 08:55)."""


def _minutes() -> np.ndarray:
    return np.arange(DAY_MIN, dtype=np.float64)


def _sparse_bursts(day: int, rng: np.random.Generator) -> np.ndarray:
    """Nothing between four working sessions a day; each starts within 20
    minutes of its usual hour, at full rate at once, for 15-40 minutes."""
    rate = np.zeros(DAY_MIN)
    for hour in (8.5, 11.0, 14.0, 16.5):
        start = int(hour * 60 + rng.integers(-20, 21))
        length = int(rng.integers(15, 41))
        rate[start : start + length] = rng.uniform(1.0, 2.0)
    return rate


def _business_hours(day: int, rng: np.random.Generator) -> np.ndarray:
    """A trickle at night, a ramp from it to the plateau in about 10 minutes
    from 09:00 (give or take 5), a lunch dip, a decline from 17:00 to 19:00."""
    m = _minutes()
    night = 0.01
    plateau = 3.0 * rng.uniform(0.95, 1.05)
    start = 9 * 60 + int(rng.integers(-5, 6))
    ramp = np.clip((m - start) / 10.0, 0.0, 1.0)
    fall = np.clip((19 * 60 - m) / 120.0, 0.0, 1.0)
    lunch = 1.0 - 0.3 * np.exp(-0.5 * ((m - 12.5 * 60) / 25.0) ** 2)
    return night + (plateau - night) * np.minimum(ramp, fall) * lunch


def _scheduled_batch(day: int, rng: np.random.Generator) -> np.ndarray:
    """Light interactive use with a daily cycle, and a nightly job that sends
    its requests through the online endpoint from 02:00 for about 45 minutes."""
    m = _minutes()
    rate = 0.3 * (1.0 + 0.5 * np.sin(2 * np.pi * (m / DAY_MIN - 0.25)))
    start = 2 * 60
    length = int(rng.integers(40, 51))
    rate[start : start + length] += 5.0 * rng.uniform(0.9, 1.1)
    return rate


def _daily_cycle(day: int, rng: np.random.Generator) -> np.ndarray:
    """The control: a smooth sine around 3 requests/s (half to one and a half
    times), trough at 06:00, peak at 18:00, levels varying by a few percent."""
    m = _minutes()
    level = 3.0 * rng.uniform(0.97, 1.03)
    return level * (1.0 + 0.5 * np.sin(2 * np.pi * (m / DAY_MIN - 0.5)))


REGIMES: dict[str, Regime] = {
    "sparse-bursts": Regime(
        "sparse-bursts",
        "a model behind an internal tool or a team's notebooks: a few working sessions a day "
        "at roughly the same hours, idle for hours between them (the case for scale to zero)",
        _sparse_bursts,
        (7, 6),
        (8 * 60, 17 * 60 + 30),  # before the earliest first session (08:10), the last's latest end
    ),
    "business-hours": Regime(
        "business-hours",
        "an enterprise assistant used in one time zone: near nothing at night, everyone "
        "starts within minutes of 09:00, a lunch dip, gone by 19:00",
        _business_hours,
        (6, 6),
        (9 * 60, 19 * 60),
    ),
    "scheduled-batch": Regime(
        "scheduled-batch",
        "light interactive traffic plus a nightly job (summaries, evaluations, embeddings "
        "refresh) that a scheduler starts at 02:00 and that goes through the online endpoint",
        _scheduled_batch,
        (0, 6),
        (2 * 60, 3 * 60),
    ),
    "daily-cycle": Regime(
        "daily-cycle",
        "the control: consumer chat traffic's smooth daily cycle, which reactive triggers "
        "already follow well",
        _daily_cycle,
        (12, 6),
        (12 * 60, 24 * 60),  # the half of the day above the mean
    ),
}
"""The regimes, by name."""


def regime_counts(name: str, days: int, seed: int = 0, *, focus: bool = False) -> np.ndarray:
    """Expected requests per minute of regime ``name`` over ``days`` days,
    from a generator seeded by ``seed`` (the same arguments give the same
    curve; day ``d``'s variation does not depend on how many days follow).
    With ``focus`` only the regime's focus hours of each day are kept, one
    day's after the other's: t = 0 is then the focus window's first hour."""
    regime = REGIMES.get(name)
    if regime is None:
        raise ValueError(f"unknown regime {name!r} (known: {', '.join(REGIMES)})")
    if isinstance(days, bool) or not isinstance(days, int) or days < 1:
        raise ValueError(f"days must be an integer >= 1, got {days!r}")
    first, hours = regime.focus
    keep = slice(first * 60, (first + hours) * 60) if focus else slice(0, DAY_MIN)
    parts = [
        regime.day_rate(day, np.random.default_rng([seed, day]))[keep] * 60.0 for day in range(days)
    ]
    return np.concatenate(parts)
