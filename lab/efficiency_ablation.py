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
from typing import Any

from engine.profiles import use_profile
from simulations.sim_inputs import SimInputs
from simulations.sim_types import replay_config
from simulations.traffic import load_workload
from simulations.tune.inputs import part_starts, requests_before
from simulations.tune.manifest import apply_setting
from simulations.tune.request import TuneRequest
from simulations.tune.search import score, split_workload
from simulations.tune.sides import make_sides

__all__ = ["flipped_mode", "forecast_flipped"]


def flipped_mode(chosen: str | None) -> str:
    """The mode the flip replays: off for any forecast, auto for none."""
    return "auto" if chosen in (None, "off") else "off"


def forecast_flipped(
    request: TuneRequest, setting: Mapping[str, str], mode: str | None = None
) -> dict[str, Any]:
    """The prescaler side's ``setting`` on ``request``'s held-back part
    (under its own arrival seed), its forecast flipped (or set to ``mode``:
    the chosen mode itself replays the held-back run ``tune`` reported).
    Reads the trace, as ``tune`` does: the experiment's shell, not pure."""
    replay = request.replay
    assert request.source.trace is not None, "a cell replays a trace"
    profile = use_profile(replay.profile)
    traffic = replay.traffic(replay.tokens_from)
    workload = load_workload(request.source.trace, traffic)
    before = requests_before(request.source.trace, traffic)
    tune_part, held = split_workload(workload, request.protocol.holdout)
    if held is None:
        raise ValueError("the forecast flip needs a held-back part")
    inputs = replay.inputs or SimInputs()
    opening = inputs.apply(replay_config(replay), profile, None)
    starts = part_starts(
        before, tune_part, held, profile, opening, inputs, backfill=replay.backfill
    )
    assert starts.held is not None
    side = next(
        s for s in make_sides(request, profile, inputs.max_replicas) if s.name == "prescaler"
    )
    mode = flipped_mode(setting.get("forecast")) if mode is None else mode
    spec = apply_setting(side.base, {**setting, "forecast": mode}, side.manifest)
    run = score(spec, held, profile, starts.held_config, history=starts.held.history)
    return {
        "chosen_forecast": setting.get("forecast"),
        "flipped_to": mode,
        "slo_attainment": round(run.attainment, 6),
        "cost_usd": round(run.cost_usd, 6),
    }
