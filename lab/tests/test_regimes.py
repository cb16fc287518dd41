"""The regime sweep's verdicts and table, on sweep documents built by hand."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.profiles import get_profile
from lab.regime_config import SweepConfig
from lab.regimes import (
    build_cell,
    busier_tuning_part,
    cron_window,
    focus_parts,
    keda_sides,
    peak_replicas,
    prescaler_variant,
    split_days,
    write_regime_trace,
    written_cron,
)
from lab.regimes_report import markdown_table, plot_sweep, targets_met
from simulations.backfill import BACKFILL_S
from simulations.servable import workload_capacity
from simulations.sim_inputs import SimInputs
from simulations.traffic import TrafficOptions, Workload, load_workload
from simulations.tune.sides import WrittenCron


def _variant(cost: float | None) -> dict[str, Any]:
    return {"cost_at_target_usd": cost}


def _doc(lead: float, keda: float | None, on: float | None, off: float | None) -> dict[str, Any]:
    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else a / b

    row = {
        "forecast-on": _variant(on),
        "forecast-off": _variant(off),
        "ratio_on_vs_best_keda": ratio(on, keda),
        "ratio_off_vs_best_keda": ratio(off, keda),
        "ratio_forecast_on_vs_off": ratio(on, off),
    }
    cell = {
        "lead_time_min": lead,
        "keda": {"keda-gateway": _variant(keda)},
        "best_keda_cost_usd": keda,
        "prescaler": {"prewarm-on": row},
    }
    return {
        "config": {"keda_sides": ["keda-gateway"]},
        "regimes": {"business-hours": {"cells": [cell]}},
    }


@pytest.mark.parametrize(
    ("keda", "on", "off"), [(10.0, 7.0, 9.0), (None, 7.0, None), (None, None, None)]
)
def test_the_plot_is_drawn_when_no_keda_side_met_the_target(
    keda: float | None, on: float | None, off: float | None, tmp_path: Path
) -> None:
    """A seed on which every tuned KEDA side missed (so no ratio exists) still
    gets its plot (warnings are errors here: an empty legend was one)."""
    path = tmp_path / "regimes.png"
    plot_sweep(_doc(15.0, keda=keda, on=on, off=off), path)
    assert path.read_bytes().startswith(b"\x89PNG")


def test_a_cell_much_cheaper_with_the_forecast_at_a_long_lead_meets_both_targets() -> None:
    verdict = targets_met(_doc(15.0, keda=10.0, on=7.0, off=9.0))
    assert verdict["never_worse"]["met"]
    assert verdict["somewhere_much_better"]["cells"] == ["business-hours @ 15 min, prewarm-on"]


@pytest.mark.parametrize(
    ("lead", "on", "off"),
    [(5.0, 7.0, 9.0), (15.0, 8.5, 9.0), (15.0, 7.0, 7.5)],
    ids=["short lead", "not 0.8x KEDA", "forecast buys under 15 %"],
)
def test_much_better_needs_a_long_lead_and_both_margins(lead: float, on: float, off: float) -> None:
    assert not targets_met(_doc(lead, keda=10.0, on=on, off=off))["somewhere_much_better"]["met"]


def test_never_worse_judges_the_cheaper_prescaler_variant_and_misses() -> None:
    assert targets_met(_doc(5.0, keda=10.0, on=11.0, off=9.5))["never_worse"]["met"]
    assert not targets_met(_doc(5.0, keda=10.0, on=11.0, off=10.5))["never_worse"]["met"]
    # prescaler missed the held-back target where KEDA met it: worse
    assert not targets_met(_doc(5.0, keda=10.0, on=None, off=None))["never_worse"]["met"]
    # KEDA missed where prescaler met it: not worse
    assert targets_met(_doc(5.0, keda=None, on=12.0, off=None))["never_worse"]["met"]
    both_missed = targets_met(_doc(5.0, keda=None, on=None, off=None))["never_worse"]
    assert both_missed["unjudged_cells"] == ["business-hours @ 5 min, prewarm-on"]


def test_the_table_shows_misses_and_ratios() -> None:
    text = markdown_table(_doc(15.0, keda=10.0, on=7.0, off=None))
    row = text.splitlines()[2]
    assert row == "| business-hours | 15 min | on | $10.00 | $7.00 | missed | 0.70x | - | - |"


def test_a_grid_without_a_preset_is_refused() -> None:
    with pytest.raises(ValueError, match="no preset"):
        SweepConfig(leads_min=(7.0,))
    with pytest.raises(ValueError, match="unknown regime"):
        SweepConfig(regimes=("weekly",))


def test_the_days_split_into_history_tuning_and_held_back_in_order() -> None:
    """Five days (three of history): each part on its own clock from 0, the
    history ending where the tuning day starts, no request in two parts."""
    day = 86400.0
    arrivals = np.arange(0.0, 5 * day, 3600.0) + 60.0  # one request an hour
    n = arrivals.size
    workload = Workload(arrivals, np.full(n, 10), np.full(n, 5), "regime", 5 * day)
    before, tuning, held = split_days(workload, SweepConfig(history_days=3))
    assert before is not None
    assert (before.duration_s, tuning.duration_s, held.duration_s) == (3 * day, day, day)
    assert (len(before), len(tuning), len(held)) == (72, 24, 24)
    assert tuning.arrival_s[0] == held.arrival_s[0] == before.arrival_s[0] == 60.0
    none, tuning0, _ = split_days(
        Workload(arrivals[:48], np.full(48, 10), np.full(48, 5), "regime", 2 * day),
        SweepConfig(history_days=0),
    )
    assert none is None and tuning0.duration_s == day


def test_two_tuning_days_end_on_the_same_held_back_day_judged_each_alone(
    tmp_path: Path,
) -> None:
    """Two days of history and two tuning days hold back the same last day
    as three and one: only the tuning part grows, by the day before it, and
    each of its days gets its own target (the margin on each)."""
    day = 86400.0
    arrivals = np.arange(0.0, 5 * day, 3600.0) + 60.0
    n = arrivals.size
    workload = Workload(arrivals, np.full(n, 10), np.full(n, 5), "regime", 5 * day)
    one = split_days(workload, SweepConfig(history_days=3))
    two = split_days(workload, SweepConfig(history_days=2, days=3))
    assert two[0] is not None and two[0].duration_s == 2 * day
    assert two[1].duration_s == pytest.approx(2 * day) and len(two[1]) == 48
    np.testing.assert_allclose(two[2].arrival_s, one[2].arrival_s)
    np.testing.assert_allclose(two[1].arrival_s[24:] - day, one[1].arrival_s)
    config = SweepConfig(
        regimes=("sparse-bursts",), leads_min=(2.5,), history_days=2, days=3, margin=0.5
    )
    cell = build_cell("sparse-bursts", write_regime_trace("sparse-bursts", config, tmp_path),
                      2.5, config)  # fmt: skip
    assert [s for s, _ in cell.day_targets] == [0.0, day]
    assert all(0.0 < t <= 1.0 for _, t in cell.day_targets)
    assert not build_cell(
        "sparse-bursts",
        write_regime_trace("sparse-bursts", config, tmp_path),
        2.5,
        dataclasses.replace(config, history_days=3, days=2),
    ).day_targets
    for history in (0, 3):
        with pytest.raises(ValueError, match="focus"):
            SweepConfig(focus=True, history_days=history, days=3)


def test_a_capacity_belief_reaches_both_parts_runs(tmp_path: Path) -> None:
    """capacity_error is prescaler's belief on both parts (the tuning day and
    the held-back day run with it); one at or below -1 is refused."""
    config = SweepConfig(regimes=("sparse-bursts",), leads_min=(2.5,), capacity_error=-0.3)
    trace = write_regime_trace("sparse-bursts", config, tmp_path)
    cell = build_cell("sparse-bursts", trace, 2.5, config)
    assert cell.sim.capacity_error == cell.held_sim.capacity_error == -0.3
    with pytest.raises(ValueError, match="capacity_error"):
        SweepConfig(capacity_error=-1.0)


class _Stop(Exception):
    pass


def test_a_sampler_offset_gives_every_study_another_path_and_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parts stay the seed's; each study's sampler seed is moved by the
    offset and its name says so, so it never joins the seed's own study."""
    import lab.regimes as regimes

    seen: list[tuple[int, str]] = []

    def fake_run_study(ctx: Any, **kw: Any) -> Any:
        seen.append((ctx.seed, kw["study_name"]))
        raise _Stop

    monkeypatch.setattr(regimes, "run_study", fake_run_study)
    for offset in (0, 100):
        config = SweepConfig(
            regimes=("sparse-bursts",), leads_min=(2.5,), seed=3, sampler_offset=offset,
            keda_sides=("keda-gateway",),
        )  # fmt: skip
        trace = write_regime_trace("sparse-bursts", config, tmp_path)
        with pytest.raises(_Stop):
            regimes.run_cell("sparse-bursts", trace, 2.5, config, "")
    (seed0, name0), (seed1, name1) = seen
    assert (seed0, seed1) == (3, 103)
    assert name1 == name0.replace("-keda-gateway", "-p100-keda-gateway") != name0


@pytest.mark.parametrize(
    "forecasters", [("seasonal_naive", "seasonal_naive"), ("prophet",), ("auto",), ("prescaler",)]
)
def test_a_further_forecaster_must_be_one_the_simulator_runs(
    forecasters: tuple[str, ...],
) -> None:
    with pytest.raises(ValueError, match="forecasters: must be distinct"):
        SweepConfig(forecasters=forecasters)
    assert SweepConfig(forecasters=("seasonal_naive", "sf_autoets")).forecasters == (
        "seasonal_naive",
        "sf_autoets",
    )


def test_a_focus_sweep_joins_focus_hours_only_without_history() -> None:
    with pytest.raises(ValueError, match="history_days"):
        SweepConfig(history_days=-1)
    assert SweepConfig(focus=True, history_days=0).joined_focus
    assert not SweepConfig(focus=True, history_days=3).joined_focus
    assert SweepConfig(focus=True, history_days=0).trace_days == 2
    assert SweepConfig().trace_days == 5


def test_focus_parts_open_with_what_came_before_each_first_hour(tmp_path: Path) -> None:
    """Focus with history: the tuning and held-back days' focus hours
    (business-hours: 06:00 - 12:00 of days 3 and 4), each opening with a
    backfill that ends at its first hour and spans the fit window's reach."""
    trace = tmp_path / "hourly.csv"
    rows = "".join(f"{60 * m},{1.0 if m % 60 == 30 else 0.0:.3f}\n" for m in range(5 * 1440))
    trace.write_text("minute_start_s,requests\n" + rows, encoding="utf-8")
    config = SweepConfig(focus=True, history_days=3, regimes=("business-hours",))
    tuning, held, starts = focus_parts("business-hours", trace, config, SimInputs())
    assert tuning.duration_s == held.duration_s == 6 * 3600.0
    # the trace's counts are expected values (Poisson draws): some requests
    # in each part, all within it
    for part in (tuning, held):
        assert (
            len(part) > 0 and 0.0 <= part.arrival_s.min() <= part.arrival_s.max() < part.duration_s
        )
    for opened in (starts.tuning, starts.held):
        assert opened is not None and opened.history is not None
        times = opened.history.times_s
        assert times[-1] <= 0.0  # nothing from the part itself
        assert times[-1] - times[0] >= BACKFILL_S - 3600.0


@pytest.mark.parametrize("focus", [False, True], ids=["whole days", "focus hours"])
def test_a_busier_tuning_day_has_more_requests_on_the_same_span(
    focus: bool, tmp_path: Path
) -> None:
    """``busier`` scales the tuning day's rate; its span is the plain part's."""
    trace = tmp_path / "flat.csv"
    rows = "".join(f"{60 * m},10.000\n" for m in range(5 * 1440))
    trace.write_text("minute_start_s,requests\n" + rows, encoding="utf-8")
    plain_config = SweepConfig(focus=focus, history_days=3, regimes=("business-hours",))
    busy_config = SweepConfig(focus=focus, history_days=3, regimes=("business-hours",), busier=25.0)
    if focus:
        plain, _, _ = focus_parts("business-hours", trace, plain_config, SimInputs())
    else:
        _, plain, _ = split_days(load_workload(trace, TrafficOptions()), plain_config)
    busy = busier_tuning_part("business-hours", trace, busy_config)
    assert busy.duration_s == plain.duration_s
    # 10 requests a minute: Poisson counts, so within a few percent of 1.25x
    assert len(busy) / len(plain) == pytest.approx(1.25, rel=0.03)
    with pytest.raises(ValueError, match="busier: must be in"):
        SweepConfig(busier=-5.0)


def test_held_keys_reach_every_prescaler_trial_and_are_not_searched() -> None:
    config = SweepConfig(
        regimes=("sparse-bursts",), leads_min=(15.0,),
        prescaler_set=(("seasonalSizeWanderSeconds", "21600"), ("seasonalWanderSeconds", "2700")),
    )  # fmt: skip
    searched = {p.key for p in prescaler_variant(SweepConfig(), False, "auto").space}
    assert "seasonalWanderSeconds" in searched
    for forecast in ("auto", "off"):
        side = prescaler_variant(config, False, forecast)
        held = side.base.trigger.metadata
        assert held["seasonalSizeWanderSeconds"] == "21600"
        assert (held["seasonalWanderSeconds"], held["prewarm"]) == ("2700", "false")
        assert held["forecast"] == forecast
        assert not {"seasonalWanderSeconds", "seasonalSizeWanderSeconds"} & {
            p.key for p in side.space
        }


def test_the_prescaler_cron_variant_is_written_with_the_cells_window() -> None:
    """prescaler beside the cron window the KEDA cron side starts from: the
    cell's hours and replicas, the forecast and prewarm held as on the
    other prescaler sides."""
    config = SweepConfig(prescaler_side="prescaler-cron")
    side = prescaler_variant(config, False, "off", 15.0, WrittenCron(525, 720, 4))
    prescaler, cron = side.base.triggers
    assert (prescaler.metadata["forecast"], prescaler.metadata["prewarm"]) == ("off", "false")
    assert (cron.metadata["start"], cron.metadata["end"]) == ("45 8 * * *", "0 12 * * *")
    assert cron.metadata["desiredReplicas"] == "4"
    assert "triggers.1.desiredReplicas" in {p.key for p in side.space}


def test_each_cell_searches_a_fixed_lead_time_from_its_own_cold_start() -> None:
    """At 15 minutes a study cannot plan two minutes ahead of a 15-minute
    start (a tuning day that rewards it says nothing of the next)."""
    for lead, floor in ((2.5, 150), (15.0, 900)):
        side = prescaler_variant(SweepConfig(), False, "auto", lead)
        fixed = next(p for p in side.space if p.key == "leadTimeSeconds:fixed")
        assert (fixed.low, fixed.high) == (floor, max(900, 2 * floor))


@pytest.mark.parametrize(
    ("held", "match"),
    [
        ((("seasonalSizeWanderSeconds", "99999"),), "seasonalSizeWanderSeconds"),
        ((("noSuchKey", "1"),), "noSuchKey"),
        ((("prewarm", "true"),), "prewarm"),
        ((("forecast", "off"),), "forecast"),
    ],
)
def test_a_held_key_the_trigger_refuses_is_refused_at_once(
    held: tuple[tuple[str, str], ...], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        SweepConfig(prescaler_set=held)


def test_a_sweep_asked_for_no_keda_side_tunes_none() -> None:
    """An empty ``keda_sides`` reruns prescaler's columns alone
    (KEDA's read nothing prescaler's held keys change)."""
    assert keda_sides(SweepConfig(keda_sides=())) == {}
    named = keda_sides(SweepConfig(keda_sides=("keda-queue-kv", "keda-gateway")))
    assert sorted(named) == ["keda-gateway", "keda-queue-kv"]


@pytest.mark.parametrize(
    ("regime", "lead", "focus", "window"),
    [
        # the batch at 02:00: opened 15 minutes early, closed at 03:00
        ("scheduled-batch", 15.0, False, (105, 180)),
        # 2.5 minutes early falls on the quarter hour before
        ("business-hours", 2.5, False, (525, 1140)),
        # a focus part's clock starts at its first hour (06:00)
        ("business-hours", 10.0, True, (165, 780)),
        # the daily cycle's window ends at midnight
        ("daily-cycle", 5.0, False, (705, 0)),
    ],
)
def test_the_cron_side_opens_its_window_one_lead_time_before_the_known_hours(
    regime: str, lead: float, focus: bool, window: tuple[int, int]
) -> None:
    assert cron_window(regime, lead, focus) == window


def test_the_cron_side_is_written_with_the_window_and_replicas_the_past_days_needed(
    tmp_path: Path,
) -> None:
    """The batch's cell: its window opened a lead time early, holding the
    replicas the history days' batch peak needed at the profile's capacity
    (no fewer than the batch's rate over what one replica serves, rounded
    up); without history days, the shipped 2 replicas."""
    config = SweepConfig(regimes=("scheduled-batch",), keda_sides=("keda-queue-kv-cron",))
    trace = write_regime_trace("scheduled-batch", config, tmp_path)
    cell = build_cell("scheduled-batch", trace, 15.0, config)
    assert cell.cron is not None
    assert (cell.cron.start_min, cell.cron.end_min) == (105, 180)
    assert cell.cron.replicas == written_cron("scheduled-batch", trace, 15.0, config).replicas
    assert cell.cron.replicas > 2
    cron = keda_sides(config, cell.cron)["keda-queue-kv-cron"].base.triggers[-1]
    assert cron.kind == "cron"
    assert tuple(_minute_of_day(cron.metadata[k]) for k in ("start", "end")) == (105, 180)
    assert cron.metadata["desiredReplicas"] == str(cell.cron.replicas)
    bare = dataclasses.replace(config, history_days=0)
    assert written_cron("scheduled-batch", trace, 15.0, bare).replicas == 2


def test_peak_replicas_reads_only_the_hours_it_is_given() -> None:
    """Two days, each with a 4 requests/s hour at 02:00, a 12 requests/s
    hour at 14:00 and an 8 requests/s half hour at 23:00: sized for 02:00 -
    03:00 the window holds what 4/s needs, for 13:00 - 15:00 what 12/s
    needs, and a window from 22:00 to 03:00 reads both ends of the day (the
    late half hour's 8/s)."""
    profile = get_profile("llama-3-8b@g5.xlarge")
    arrivals: list[np.ndarray] = []
    for day in range(2):
        for hour, rate, span in ((2, 4.0, 3600.0), (14, 12.0, 3600.0), (23, 8.0, 1800.0)):
            start = day * 86_400.0 + hour * 3600.0
            arrivals.append(start + np.arange(0.0, span, 1.0 / rate))
    times = np.sort(np.concatenate(arrivals))
    n = times.size
    # long requests: under one request/s per replica, so the rates differ in replicas
    tokens = np.full(n, 1000, dtype=np.int64), np.full(n, 400, dtype=np.int64)
    w = Workload(times, *tokens, "two days", 172_800.0)
    cap = workload_capacity(w, profile).requests_per_s
    assert cap is not None
    need = {rate: math.ceil(rate / cap - 1e-9) for rate in (4.0, 8.0, 12.0)}
    assert need[4.0] < need[8.0] < need[12.0]
    assert peak_replicas(w, (120, 180), 100) == need[4.0]
    assert peak_replicas(w, (780, 900), 100) == need[12.0]
    assert peak_replicas(w, (1320, 180), 100) == need[8.0]
    assert peak_replicas(w, (780, 900), 2) == min(2, need[12.0])
    assert peak_replicas(w, (300, 360), 100) == 1


def _minute_of_day(expr: str) -> int:
    minute, hour = expr.split()[:2]
    return int(hour) * 60 + int(minute)
