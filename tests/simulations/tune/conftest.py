"""The tuner benches' knobs, as pytest options rather than environment variables.

Each option's default is the bench's own; a bench that needs a trace no
repository ships skips without its option, e.g.
``pytest tests/simulations/tune -m bench --tune-trace PATH``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tune benches")
    group.addoption("--tune-trace", default=None, metavar="PATH",
                    help="a per-minute trace with a daily cycle")  # fmt: skip
    group.addoption("--tune-traces", default="", metavar="PATH[@START]:...",
                    help="os.pathsep-separated traces for the out-of-sample bench")  # fmt: skip
    group.addoption("--tune-trials", type=int, default=None,
                    help="trials per study (default: each bench's own)")  # fmt: skip
    group.addoption("--tune-target", type=float, default=0.95,
                    help="SLO target as a fraction of the idle ceiling (default 0.95)")  # fmt: skip
    group.addoption("--tune-rate-scale", type=float, default=0.1,
                    help="rate scale for the trace benches (default 0.1)")  # fmt: skip
    group.addoption("--tune-hours", type=float, default=24.0,
                    help="hours of the trace a bench tunes on (default 24)")  # fmt: skip
    group.addoption("--tune-start", type=float, default=None,
                    help="seconds into the trace (default: each bench's own)")  # fmt: skip
    group.addoption("--tune-sides", default="",
                    help="comma-separated sides for the day bench (default: tune's)")  # fmt: skip
    group.addoption("--tune-days", type=int, default=2,
                    help="days of each trace in the out-of-sample bench (default 2)")  # fmt: skip
    group.addoption("--tune-profile", action="store_true",
                    help="profile the trial-cost bench's trial (cProfile)")  # fmt: skip


@dataclass(frozen=True)
class TuneKnobs:
    """The options above, read once; None: the bench's own default."""

    trace: str | None
    traces: str
    trials: int | None
    target: float
    rate_scale: float
    hours: float
    start_s: float | None
    sides: tuple[str, ...]
    days: int
    profile: bool


@pytest.fixture
def tune_knobs(request: pytest.FixtureRequest) -> TuneKnobs:
    def opt(name: str, default: Any) -> Any:
        # the options exist only when this conftest was loaded at start-up
        return request.config.getoption(name, default=default)

    sides = str(opt("tune_sides", ""))
    return TuneKnobs(
        trace=opt("tune_trace", None),
        traces=str(opt("tune_traces", "")),
        trials=opt("tune_trials", None),
        target=float(opt("tune_target", 0.95)),
        rate_scale=float(opt("tune_rate_scale", 0.1)),
        hours=float(opt("tune_hours", 24.0)),
        start_s=opt("tune_start", None),
        sides=tuple(s for s in sides.split(",") if s),
        days=int(opt("tune_days", 2)),
        profile=bool(opt("tune_profile", False)),
    )
