"""The tuner benches' knobs, read once as a fixture.

The options themselves are registered at the suite's root
(tests.support.options.add_tune_options) so ``pytest -m bench tests
--tune-trace PATH`` parses; a trace bench skips without its option (the
shipped trace: ``--tune-trace simulations/data/azure_llm2024_coding_per_minute.csv``).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pytest

from simulations.tune.cli import register, request_from, with_config
from simulations.tune.request import TuneRequest


@dataclass(frozen=True)
class TuneKnobs:
    """The options, read once; None: the bench's own default."""

    trace: str | None
    traces: str
    trials: int | None
    target: float
    rate_scale: float
    day_start_s: float | None
    day_hours: float
    trial_start_s: float | None
    trial_hours: float
    sides: tuple[str, ...]
    days: int
    profile: bool
    tokens_from: str | None
    screen_refit_s: float | None
    max_replicas: int | None
    seed: int


def _first(*given: float | None) -> float | None:
    return next((g for g in given if g is not None), None)


@pytest.fixture
def tune_knobs(request: pytest.FixtureRequest) -> TuneKnobs:
    opt = request.config.getoption
    start, hours = opt("tune_start"), opt("tune_hours")
    return TuneKnobs(
        trace=opt("tune_trace"),
        traces=str(opt("tune_traces")),
        trials=opt("tune_trials"),
        target=float(opt("tune_target")),
        rate_scale=float(opt("tune_rate_scale")),
        day_start_s=_first(opt("tune_day_start"), start),
        day_hours=float(_first(opt("tune_day_hours"), hours) or 24.0),
        trial_start_s=_first(opt("tune_trial_start"), start),
        trial_hours=float(_first(opt("tune_trial_hours"), hours) or 24.0),
        sides=tuple(s for s in str(opt("tune_sides")).split(",") if s),
        days=int(opt("tune_days")),
        profile=bool(opt("tune_profile")),
        tokens_from=opt("tune_tokens_from"),
        screen_refit_s=opt("tune_screen_refit"),
        max_replicas=opt("tune_max_replicas"),
        seed=int(opt("tune_seed")),
    )


def config_request(tmp_path: Path, text: str, *argv: str) -> TuneRequest:
    """The request ``prescaler tune t.csv ARGV --config FILE`` builds, FILE holding ``text``."""
    path = tmp_path / "tune.yaml"
    path.write_text(text, encoding="utf-8")
    parser = argparse.ArgumentParser(prog="prescaler")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["tune", "t.csv", *argv, "--config", str(path)])
    return request_from(with_config(args))
