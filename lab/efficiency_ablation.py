"""What the forecast alone does at a tuned choice: prescaler's chosen setting
replayed on the cell's held-back day with its ``forecast`` mode flipped
(``off`` where it was on, ``auto`` where it was off), every other key as
chosen. A choice made with the forecast off holds none of the forecast's
own keys (quantile, seasonal peak), so turned on they are the trigger's
defaults: the flip then says what an untuned forecast adds.

Not a retuned side: the other keys were chosen with the forecast as it was,
so this says what switching the forecast alone changes on that day (cost
and attainment), not what a study without it would find. The held-back day
opens as ``tune`` opens it (:func:`simulations.tune.inputs.part_starts`):
the fleet the tuning day left and the tracker's backfill.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.profile_types import Profile
from engine.profiles import use_profile
from simulations.sim_inputs import SimInputs
from simulations.sim_types import SimConfig, replay_config
from simulations.traffic import Workload, load_workload
from simulations.tune.inputs import PartStarts, part_starts, requests_before
from simulations.tune.manifest import apply_setting
from simulations.tune.request import TuneRequest
from simulations.tune.search import score, split_workload
from simulations.tune.sides import Side, make_sides

__all__ = ["CellDays", "cell_days", "flipped_mode", "forecast_flipped"]


@dataclass(frozen=True)
class CellDays:
    """A cell's two days as ``tune`` opens them, and its prescaler side."""

    profile: Profile
    tune_part: Workload
    held: Workload | None
    starts: PartStarts
    """Each day's opening fleet and tracker backfill, and its run config."""
    opening: SimConfig
    """The replay's config before either day's opening fleet."""
    side: Side


def cell_days(request: TuneRequest) -> CellDays:
    """``request``'s tuning and held-back days, each opened as ``tune`` opens
    it (:func:`simulations.tune.inputs.part_starts`), and its prescaler side.
    Reads the trace, as ``tune`` does: the experiment's shell, not pure."""
    replay = request.replay
    assert request.source.trace is not None, "a cell replays a trace"
    profile = use_profile(replay.profile)
    traffic = replay.traffic(replay.tokens_from)
    workload = load_workload(request.source.trace, traffic)
    before = requests_before(request.source.trace, traffic)
    tune_part, held = split_workload(workload, request.protocol.holdout)
    inputs = replay.inputs or SimInputs()
    opening = inputs.apply(replay_config(replay), profile, None)
    starts = part_starts(
        before, tune_part, held, profile, opening, inputs, backfill=replay.backfill
    )
    side = next(
        s for s in make_sides(request, profile, inputs.max_replicas) if s.name == "prescaler"
    )
    return CellDays(profile, tune_part, held, starts, opening, side)


def flipped_mode(chosen: str | None) -> str:
    """The mode the flip replays: off for any forecast, auto for none."""
    return "auto" if chosen in (None, "off") else "off"


def forecast_flipped(
    request: TuneRequest, setting: Mapping[str, str], mode: str | None = None
) -> dict[str, Any]:
    """The prescaler side's ``setting`` on ``request``'s held-back part
    (under its own arrival seed), its forecast flipped (or set to ``mode``:
    the chosen mode itself replays the held-back run ``tune`` reported)."""
    days = cell_days(request)
    if days.held is None or days.starts.held is None:
        raise ValueError("the forecast flip needs a held-back part")
    mode = flipped_mode(setting.get("forecast")) if mode is None else mode
    spec = apply_setting(days.side.base, {**setting, "forecast": mode}, days.side.manifest)
    run = score(
        spec, days.held, days.profile, days.starts.held_config,
        history=days.starts.held.history,
    )  # fmt: skip
    return {
        "chosen_forecast": setting.get("forecast"),
        "flipped_to": mode,
        "slo_attainment": round(run.attainment, 6),
        "cost_usd": round(run.cost_usd, 6),
    }
