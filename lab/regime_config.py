"""The regime sweep's config: its grid and budget, typed, frozen, checked once.

:class:`SweepConfig` is one sweep (one seed); :class:`RegimesRun` is what a
lab config's ``regimes`` section asks for (the sweep, its seeds, where its
studies go), read by :func:`load_run` (lab/configs/default.yaml holds every
key at its default). Every error names the key at fault.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from decision.settings import SettingsError, parse_settings
from forecasting import METHODS as FORECAST_METHODS
from forecasting.baselines import BASELINES
from lab.config import ConfigError, load_section
from lab.regime_generator import REGIMES

__all__ = [
    "KEDA_SIDES",
    "LEAD_TIMES",
    "PRESCALER_SIDES",
    "PROFILE",
    "RegimesRun",
    "SweepConfig",
    "load_run",
]

PROFILE = "llama-3-8b@g5.xlarge"
LEAD_TIMES: dict[float, str] = {
    2.5: "8b-cached",
    5.0: "8b-cold-engine",
    10.0: "8b-uncached-image",
    15.0: "70b-uncached",
}
"""Minutes from a replica asked for to it Ready -> the lead-time preset of that length."""
KEDA_SIDES = (
    "keda-queue",
    "keda-queue-kv",
    "keda-queue-kv-cron",
    "keda-gateway",
    "keda-gateway-cron",
)
"""The KEDA family every cell tunes (``keda_sides``), one study a side: a
cell's "best tuned KEDA" is the cheapest of the sides it ran, so two
sweeps compare only over the same family."""
PRESCALER_SIDES = ("prescaler-gateway", "prescaler", "prescaler-cron")
"""The prescaler sides the sweep can tune as its forecast on/off variants."""


@dataclass(frozen=True)
class SweepConfig:
    """The grid and the budget: every side gets ``trials`` trials; ``jobs``
    cells run at once."""

    regimes: tuple[str, ...] = tuple(REGIMES)
    leads_min: tuple[float, ...] = tuple(LEAD_TIMES)
    prewarm: tuple[bool, ...] = (True, False)
    trials: int = 40
    days: int = 2
    """Days after the history: the tuning part, then one held back. With more
    than one tuning day a chosen setting must meet the target on each of them
    (:mod:`simulations.tune.each_day`), for every side alike."""
    seed: int = 0
    jobs: int = 2
    keda_sides: tuple[str, ...] = KEDA_SIDES
    target: float = 0.95
    focus: bool = False
    """Only each regime's focus hours of each day (:mod:`lab.regime_generator`)."""
    history_days: int = 3
    """Days of the regime before the tuning day, backfilled into prescaler's
    tracker (at most :data:`simulations.backfill.BACKFILL_S` before a part)."""
    prescaler_side: str = "prescaler-gateway"
    """Which of :data:`PRESCALER_SIDES` the forecast on/off variants tune."""
    margin: float = 0.0
    """Points of attainment above the tuning day's target a chosen setting
    must reach there (``prescaler tune --margin``), for every side alike:
    a setting that meets the target by a hair on one day can miss it on
    the next."""
    busier: float = 0.0
    """Percent more traffic on the tuning day than the trace holds (its
    rate scaled by ``1 + busier / 100``), for every side alike: a setting
    chosen for a busier day than the one at hand holds on a day that grows,
    where one chosen for the day itself may fit only its sessions. The
    held-back day and every backfill are the trace's own."""
    capacity_error: float = 0.0
    """prescaler believes each replica carries (1 + e) x the profile's
    capacity (``prescaler simulate --capacity-error``): below 0 the fleet it
    sizes from the forecast is larger by 1 / (1 + e), headroom against an
    event bigger than the days it has seen. KEDA's sides ignore it."""
    prescaler_set: tuple[tuple[str, str], ...] = ()
    """Trigger keys held at a value on every prescaler trial (forecast on
    and off alike), beside ``prewarm``: a default under test, which the
    tuner does not search. KEDA's sides ignore it."""
    forecasters: tuple[str, ...] = ()
    """Further forecasters, each tuned as one more prescaler variant beside
    forecast on (``auto``) and off, to compare forecasters by the cost each
    buys: a method of the trigger's ``forecast:`` key, or statsforecast's
    ``sf_*`` (simulation only: the tracker forecasts with it, the key
    stays ``auto``)."""
    sampler_offset: int = 0
    """Added to ``seed`` for every study's sampler (the traces keep
    ``seed``): another TPE path over the same parts, for every side alike,
    to measure how far one study's path moves a result."""

    def __post_init__(self) -> None:
        unknown = [r for r in self.regimes if r not in REGIMES]
        if unknown:
            raise ConfigError(
                "regimes", f"unknown regime(s) {unknown} (known: {', '.join(REGIMES)})"
            )
        leads = [x for x in self.leads_min if x not in LEAD_TIMES]
        if leads:
            known = list(LEAD_TIMES)
            raise ConfigError(
                "leads_min", f"lead time(s) {leads} min have no preset (known: {known})"
            )
        for name, value, least in (("trials", self.trials, 1), ("jobs", self.jobs, 1)):
            if value < least:
                raise ConfigError(name, f"must be >= {least}, got {value}")
        if self.days < 2:
            raise ConfigError("days", f"must be >= 2 (one to tune, one held back), got {self.days}")
        if self.prescaler_side not in PRESCALER_SIDES:
            raise ConfigError(
                "prescaler_side",
                f"{self.prescaler_side!r} is not one of {', '.join(PRESCALER_SIDES)}",
            )
        if self.history_days < 0:
            raise ConfigError("history_days", f"must be >= 0, got {self.history_days}")
        if self.focus and self.days > 2:
            raise ConfigError(
                "days", "a focus sweep tunes on one day's focus hours: days must be 2"
            )
        if not 0.0 <= self.margin < 100.0:
            raise ConfigError("margin", f"must be in [0, 100) points, got {self.margin}")
        if not (math.isfinite(self.capacity_error) and self.capacity_error > -1.0):
            raise ConfigError("capacity_error", f"must be > -1, got {self.capacity_error}")
        if not 0.0 <= self.busier <= 100.0:
            raise ConfigError("busier", f"must be in [0, 100] percent, got {self.busier}")
        # "prescaler" is what forecast on (auto) runs: the same study twice
        methods = (*(m for m in FORECAST_METHODS if m != "prescaler"), *BASELINES)
        odd = [m for m in self.forecasters if m not in methods]
        if odd or len(set(self.forecasters)) != len(self.forecasters):
            raise ConfigError(
                "forecasters",
                f"must be distinct, of {', '.join(methods)}; got {list(self.forecasters)}",
            )
        held = dict(self.prescaler_set)
        for key, knob in (("prewarm", "prewarm"), ("forecast", "forecast on/off variants")):
            if key in held:
                raise ConfigError("prescaler_set", f"cannot hold {key}: the sweep's {knob} set it")
        try:
            parse_settings({"prometheusAddress": "http://prometheus:9090", **held})
        except SettingsError as exc:
            raise ConfigError("prescaler_set", str(exc)) from exc

    @property
    def joined_focus(self) -> bool:
        """The trace holds only the focus hours, joined day after day (focus
        without history); else whole days."""
        return self.focus and not self.history_days

    @property
    def trace_days(self) -> int:
        """Days in a regime's trace: the history, then the tuning and held-back days."""
        return self.history_days + self.days


@dataclass(frozen=True)
class RegimesRun:
    """A lab config's ``regimes`` section: the sweep, run once per seed, and
    where its traces and study storage go (None: a temporary directory).
    A later run given the same directory joins the studies it finds
    finished (the same side, space, grid point and budget) and only scores
    them."""

    sweep: SweepConfig
    seeds: tuple[int, ...] = (0,)
    directory: Path | None = None

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ConfigError("seeds", "names no seed")
        if len(set(self.seeds)) != len(self.seeds):
            raise ConfigError("seeds", f"must be distinct, got {list(self.seeds)}")


RUN_KEYS = (
    "regimes", "leads_min", "prewarm", "trials", "seeds", "jobs", "keda_sides", "focus",
    "history_days", "tuning_days", "prescaler_side", "target", "margin", "busier",
    "capacity_error", "prescaler_set", "forecasters", "sampler_offset", "directory",
)  # fmt: skip
"""The keys of a lab config's ``regimes`` section."""


def load_run(path: Path) -> RegimesRun:
    """The ``regimes`` section of the lab config at ``path``, every key absent
    at its default (``history_days`` 3, or 0 with ``focus``; ``tuning_days``
    1: the sweep's ``days`` is one more, the held-back day)."""
    s = load_section(path, "regimes", RUN_KEYS)
    focus = s.get_bool("focus", False)
    tuning_days = s.get_int("tuning_days", 1)
    if tuning_days < 1:
        raise s.error("tuning_days", f"must be >= 1, got {tuning_days}")
    with s.fields({"days": "tuning_days", "seed": "seeds"}):
        sweep = SweepConfig(
            regimes=s.strs("regimes", tuple(REGIMES)),
            leads_min=s.floats("leads_min", tuple(LEAD_TIMES)),
            prewarm=s.bools("prewarm", (True, False)),
            trials=s.get_int("trials", 40),
            days=tuning_days + 1,
            jobs=s.get_int("jobs", 2),
            keda_sides=s.strs("keda_sides", KEDA_SIDES),
            target=s.get_float("target", 0.95),
            focus=focus,
            history_days=s.get_int("history_days", 0 if focus else 3),
            prescaler_side=s.get_str("prescaler_side", "prescaler-gateway"),
            margin=s.get_float("margin", 0.0),
            busier=s.get_float("busier", 0.0),
            capacity_error=s.get_float("capacity_error", 0.0),
            prescaler_set=s.pairs("prescaler_set"),
            forecasters=s.strs("forecasters", ()),
            sampler_offset=s.get_int("sampler_offset", 0),
        )
        return RegimesRun(sweep, s.ints("seeds", (0,)), s.path("directory"))
