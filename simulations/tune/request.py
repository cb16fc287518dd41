"""What ``prescaler tune`` is asked for: small frozen parts, each checked once.

At the bottom of the tuner so every module below the command can name a
request without importing the run; the replay part
(:class:`~simulations.replay_spec.ReplaySpec`, re-exported here) is ``simulate``'s too.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Literal

from simulations.replay_spec import ReplaySpec
from simulations.tune.storage import GRACE_S, MIN_GRACE_S, check_url

__all__ = [
    "CRON_REPLICAS",
    "DEFAULT_TARGET",
    "SCREEN_REFIT_MAX_S",
    "SCREEN_REFIT_S",
    "PasteSpec",
    "Protocol",
    "ReplaySpec",
    "SideChoice",
    "StudySpec",
    "TraceSource",
    "TuneRequest",
    "WrittenCron",
    "tune_request",
]

DEFAULT_TARGET = 0.95
"""The default ``--target``: 95 % of what an idle fleet attains. A burst on
the held-back part that nothing tuned before it anticipates costs a few
tenths of a percent, so 0.99 is often out of reach on a real history."""

CRON_REPLICAS = "2"
"""The replicas a cron side's window holds unless the request says."""


@dataclass(frozen=True)
class TraceSource:
    """Where the requests come from: a trace file, or Prometheus's vLLM metrics."""

    trace: str | None = None
    prometheus: str | None = None
    selector: str = ""
    since: str = "7d"
    step_s: float = 60.0
    save_trace: str | None = None

    def check(self) -> None:
        if self.prometheus and self.trace is not None:
            raise ValueError("give TRACE or --prometheus, not both")
        if not self.prometheus and self.trace is None:
            raise ValueError("a TRACE (or --prometheus URL) is required")


@dataclass(frozen=True)
class Protocol:
    """The out-of-sample protocol: the bar, the held-back share and its seeds."""

    target: float = DEFAULT_TARGET
    margin: float = 0.0
    """Points of attainment the chosen setting must clear the target by on the tuning part."""
    holdout: float = 0.3
    holdout_seeds: int = 1
    """Arrival seeds (``seed``, ``seed + 1``, ...) the chosen setting is scored under."""
    short_history: Literal["refuse", "warn"] = "refuse"

    def __post_init__(self) -> None:
        if not 0.0 < self.target <= 1.0:
            raise ValueError(f"target must lie in (0, 1], got {self.target}")
        if not 0.0 <= self.holdout < 0.9:
            raise ValueError(f"holdout must lie in [0, 0.9), got {self.holdout}")
        if self.holdout_seeds < 1 or self.margin < 0.0:
            raise ValueError("holdout_seeds must be >= 1 and margin >= 0")


SCREEN_REFIT_S = 1800.0
"""The prescaler side's trials' refit interval by default (s): three times
the scaler's 600 s (``docs/decisions/screening-fidelity.md``)."""
SCREEN_REFIT_MAX_S = 1800.0
"""The longest screening refit: the tracker's history must span the fit
window, a refit and the longest scale-in wait searched (1800 s), and the
backfill offers the fit window plus an hour (``simulations.backfill``)."""


@dataclass(frozen=True)
class StudySpec:
    """The optuna studies: budget, processes, where they live, how trials are pruned."""

    trials: int = 100
    jobs: int = 1
    storage: str | None = None
    study: str | None = None
    """The study name prefix; None: derived from the trace and flags."""
    trial_grace_s: int = GRACE_S
    prune: Literal["pace", "exact"] = "pace"
    worker_index: int = 0
    """This command's place among commands started together on one study
    (an Indexed Job's pod index): its processes' sampler seeds are offset by
    it, so pods started at once do not draw alike."""
    screen_refit_s: float = SCREEN_REFIT_S
    """The prescaler side's trials refit their forecaster this often (s);
    the chosen setting is confirmed at the scaler's own interval
    (:mod:`simulations.tune.screening`). 0: trials at the scaler's."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.screen_refit_s) and self.screen_refit_s >= 0):
            raise ValueError(
                f"the screening refit interval must be a finite number >= 0 s, "
                f"got {self.screen_refit_s!r}"
            )
        if self.screen_refit_s > SCREEN_REFIT_MAX_S:
            raise ValueError(
                f"--screen-refit (screen_refit_s) must be at most {SCREEN_REFIT_MAX_S:g} s, "
                f"got {self.screen_refit_s:g}: the backfill holds the fit window plus "
                "an hour, which a longer refit and the longest scale-in wait would outrun"
            )
        if self.trials < 1 or self.jobs < 1:
            raise ValueError(f"trials and jobs must be >= 1, got {self.trials}, {self.jobs}")
        if self.worker_index < 0:
            raise ValueError(f"the worker index must be >= 0, got {self.worker_index}")
        if self.trial_grace_s < MIN_GRACE_S:
            raise ValueError(f"the trial grace period must be >= {MIN_GRACE_S} s")
        if self.storage is not None:
            check_url(self.storage)


@dataclass(frozen=True)
class PasteSpec:
    """What the printed ScaledObject is written with beyond the tuned setting."""

    model: str | None = None
    scaler_address: str | None = None
    prometheus_address: str | None = None
    name: str | None = None
    namespace: str | None = None
    target_name: str | None = None


@dataclass(frozen=True)
class WrittenCron:
    """A cron side's window as its team writes it: the minutes of the day
    (UTC) it opens and closes at, and the replicas it holds in between."""

    start_min: int
    end_min: int
    replicas: int = int(CRON_REPLICAS)

    def __post_init__(self) -> None:
        minutes = (self.start_min, self.end_min)
        if not all(isinstance(m, int) and not isinstance(m, bool) for m in minutes) or not all(
            0 <= m <= 1440 for m in minutes
        ):
            raise ValueError(f"cron_window: minutes of the day in [0, 1440], got {minutes!r}")
        if self.start_min % 1440 == self.end_min % 1440:
            raise ValueError(f"cron_window: a window cannot end where it starts, got {minutes!r}")
        if not isinstance(self.replicas, int) or self.replicas < 1:
            raise ValueError(f"cron_window: replicas must be >= 1, got {self.replicas!r}")


@dataclass(frozen=True)
class SideChoice:
    """Which sides are tuned, and what they start from."""

    sides: tuple[str, ...] = ()
    """Side names (:data:`simulations.tune.sides.SIDES`); empty: the default set."""
    scaledobject: str | None = None
    prescaler_fixed: tuple[tuple[str, str], ...] = ()
    """Prescaler trigger keys held at a value rather than searched."""
    cron_window: WrittenCron | None = None
    """Every cron side's window as written; None: 2 replicas 08:00-18:00."""


@dataclass(frozen=True)
class TuneRequest:
    """Everything a tune was asked for, one frozen part per concern."""

    replay: ReplaySpec
    source: TraceSource = field(default_factory=TraceSource)
    protocol: Protocol = field(default_factory=Protocol)
    study: StudySpec = field(default_factory=StudySpec)
    paste: PasteSpec = field(default_factory=PasteSpec)
    choice: SideChoice = field(default_factory=SideChoice)

    # The flat request's names, read-only, for callers written against it.
    @property
    def sides(self) -> tuple[str, ...]:
        return self.choice.sides

    @property
    def cron_window(self) -> WrittenCron | None:
        return self.choice.cron_window

    @property
    def prescaler_fixed(self) -> tuple[tuple[str, str], ...]:
        return self.choice.prescaler_fixed


_PARTS: dict[str, type[Any]] = {
    "replay": ReplaySpec,
    "source": TraceSource,
    "protocol": Protocol,
    "study": StudySpec,
    "paste": PasteSpec,
    "choice": SideChoice,
}


def tune_request(**given: Any) -> TuneRequest:
    """A request from flat keywords (``trace=``, ``trials=``, ``sides=``...),
    each routed to its part; a keyword no part has is a ``TypeError``."""
    parts: dict[str, Any] = {}
    left = dict(given)
    for part, cls in _PARTS.items():
        names = {f.name for f in dataclasses.fields(cls)}
        mine = {k: left.pop(k) for k in list(left) if k in names}
        if mine or part == "replay":
            parts[part] = cls(**mine)
    if left:
        raise TypeError(f"tune_request: unknown field(s) {', '.join(sorted(left))}")
    return TuneRequest(**parts)
