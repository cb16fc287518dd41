"""The efficiency table's pieces: the written cron window, the config, and
the table from cells built by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lab.config import ConfigError
from lab.efficiency import (
    TRACES,
    TraceCase,
    cell_path,
    cell_request,
    load_config,
    written_window,
)
from lab.efficiency_ablation import flipped_mode, forecast_flipped
from lab.efficiency_report import (
    cells,
    choices_table,
    flip_table,
    markdown_table,
    meets,
    moves,
    report,
    slack_table,
    waterfalls,
)
from simulations.traffic import Workload
from simulations.tune.request import tune_request
from simulations.tune.run import tune

DAY_S = 86_400.0


def _history(rate_of_minute: Any, days: int = 3) -> Workload:
    """Requests at evenly spaced times, ``rate_of_minute(m)`` a second in
    minute ``m`` of the day."""
    times: list[float] = []
    for day in range(days):
        for m in range(1440):
            n = round(rate_of_minute(m) * 60)
            base = day * DAY_S + 60.0 * m
            times += [base + 60.0 * (k + 0.5) / n for k in range(n)]
    arr = np.array(times)
    ones = np.ones(arr.size, dtype=np.int64)
    return Workload(arr, ones, ones, "history", days * DAY_S)


def test_window_covers_the_busy_hours_opened_one_lead_early() -> None:
    history = _history(lambda m: 4.0 if 9 * 60 <= m < 17 * 60 else 1.0)
    window = written_window(history, 15.0, per_replica_s=1.0)
    # 09:00 - 15 min, on the quarter hour; closed at 17:00
    assert window.start_min == 8 * 60 + 45
    assert window.end_min == 17 * 60
    # the floor the lowest rate inside needs, not the peak's fleet
    assert window.replicas == 3


def test_window_across_midnight() -> None:
    history = _history(lambda m: 5.0 if m >= 22 * 60 or m < 4 * 60 else 0.5)
    window = written_window(history, 2.5, per_replica_s=2.0)
    assert window.start_min == 21 * 60 + 45
    assert window.end_min == 4 * 60 + 15
    assert window.replicas == 2
    assert window.end_min < window.start_min


def test_window_on_flat_traffic_is_the_longest_a_cron_trigger_holds() -> None:
    window = written_window(_history(lambda m: 2.0), 2.5, per_replica_s=1.0)
    assert (window.end_min - window.start_min) % 1440 == 1440 - 15
    assert window.replicas == 2  # not 3 for the mean's last bit


def test_window_without_a_capacity_keeps_the_default_replicas() -> None:
    history = _history(lambda m: 2.0 if m < 720 else 1.0, days=1)
    assert written_window(history, 2.5, None).replicas == 2


def _config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "lab.yaml"
    path.write_text(body, encoding="utf-8")
    return path


def test_config_defaults_and_errors_name_the_key(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, "efficiency: {seeds: [4], trials: 5}\n"))
    assert config.seeds == (4,) and config.trials == 5 and config.traces == tuple(TRACES)
    with pytest.raises(ConfigError, match=r"efficiency\.traces: unknown trace 'nope'"):
        load_config(_config(tmp_path, "efficiency: {traces: [nope]}\n"))
    with pytest.raises(ConfigError, match=r"efficiency\.leads_min: no lead-time preset of 7 min"):
        load_config(_config(tmp_path, "efficiency: {leads_min: [7]}\n"))
    with pytest.raises(ConfigError, match="no such section"):
        load_config(_config(tmp_path, "regimes: {}\n"))
    assert config.screen_refit_s == 0.0  # the table's cells: no screening unless asked
    assert (
        load_config(_config(tmp_path, "efficiency: {screen_refit_s: 1800}\n")).screen_refit_s
        == 1800
    )
    for bad in ("-1", "3600"):
        with pytest.raises(
            ConfigError, match=r"efficiency\.screen_refit_s: must be a number from 0"
        ):
            load_config(_config(tmp_path, f"efficiency: {{screen_refit_s: {bad}}}\n"))
    assert config.margin == 0.0  # the table's cells: no margin unless asked
    margined = load_config(_config(tmp_path, "efficiency: {margin: 1.5}\n"))
    assert margined.margin == 1.5
    request, _ = cell_request(margined, "worldcup98", 15.0, 0, "sqlite:///unused.db")
    assert request.protocol.margin == 1.5
    with pytest.raises(ConfigError, match=r"efficiency\.margin: must be points from 0"):
        load_config(_config(tmp_path, "efficiency: {margin: -1}\n"))


def test_a_trace_case_needs_three_days_before_its_tuning_day() -> None:
    with pytest.raises(ValueError, match="three days before it"):
        TraceCase("x.csv", 2 * DAY_S, 1.0)


def test_every_trace_is_in_the_checkout() -> None:
    for name, case in TRACES.items():
        assert case.resolved(name).is_file()


def _side(att: float, cost: float, multiple: float, seeds_meet: bool = True) -> dict[str, Any]:
    return {
        "holdout": {"slo_attainment": att, "cost_usd": cost},
        "holdout_multiple_of_hindsight": multiple,
        "holdout_seeds": [
            {"seed": 1, "slo_attainment": att, "cost_usd": cost, "meets": seeds_meet}
        ],
    }


def _terms() -> dict[str, Any]:
    """A bound's terms as ``tune --json`` writes them: a day of a 730-hour month."""
    return {
        "target_attainment": 0.9,
        "instant_start": {"cost_usd": 30.0, "multiple": 0.9},
        "lead_time_price_usd": 3.33,
        "bound": {"cost_usd": 33.33, "cost_per_month_usd": 1000.0, "met": True,
                  "slo_attainment": 0.91},
        "best_causal": {"policy": "prescaler", "cost_usd": 40.0, "multiple": 1.2,
                        "future_price_usd": 6.67},
        "shape": [{"policy": "keda-queue", "cost_usd": 50.0, "multiple": 1.5,
                   "shape_price_usd": 10.0}],
        "missed_target": ["keda-queue-kv"],
    }  # fmt: skip


def _cell(seed: int, prescaler: dict[str, Any], keda: dict[str, Any]) -> dict[str, Any]:
    return {
        "trace": "worldcup98", "lead_min": 2.5, "seed": seed,
        "target_attainment": {"tuned": 0.9, "holdout": 0.9},
        "hindsight": {"stated_lead": {"lead_s": 150.0}, "terms": _terms()},
        "sides": {"keda-queue": keda, "prescaler": prescaler},
    }  # fmt: skip


def test_table_medians_counts_and_ratio(tmp_path: Path) -> None:
    made = [
        _cell(0, _side(0.95, 110.0, 1.10), _side(0.93, 100.0, 1.00)),
        _cell(1, _side(0.95, 120.0, 1.20), _side(0.91, 150.0, 1.50)),
        # prescaler misses under another arrival seed: not counted
        _cell(2, _side(0.95, 90.0, 0.90, seeds_meet=False), _side(0.89, 80.0, 0.80)),
    ]
    for c in made:
        cell_path(tmp_path, c["trace"], c["lead_min"], c["seed"]).write_text(json.dumps(c))
    assert not meets(made[2], "prescaler") and not meets(made[2], "keda-queue")
    table = markdown_table(cells(tmp_path))
    row = table.splitlines()[-1]
    assert "| worldcup98 | 2.5 min | 0,1,2 | $1,000/month |" in row
    assert "1.15x (1.10-1.20) 2/3" in row  # prescaler
    assert "1.25x (1.00-1.50) 2/3" in row  # keda-queue
    assert row.endswith("| 0.95x (0.80-1.10) 2 of 3 |")  # 110/100 and 120/150


def test_report_of_an_empty_directory(tmp_path: Path) -> None:
    assert "no cells" in report(tmp_path)


def test_a_bound_that_missed_its_target_is_marked(tmp_path: Path) -> None:
    cell = _cell(0, _side(0.95, 40.0, 1.2), _side(0.95, 50.0, 1.5))
    cell["hindsight"]["terms"]["bound"]["met"] = False
    assert "| $1,000/month † |" in markdown_table([cell])


def test_moves_names_the_keys_that_differ_between_seeds() -> None:
    a = {"threshold": "5", "minReplicaCount": "2"}
    b = {"threshold": "7", "minReplicaCount": "2", "activationThreshold": "1"}
    assert moves([a, b]) == "threshold 5/7; activationThreshold -/1"
    assert moves([a, dict(a)]) == "none"
    assert moves([a]) == "-"


def test_choices_table_rows(tmp_path: Path) -> None:
    def side(att: float, worst: float, setting: dict[str, str], tie: bool) -> dict[str, Any]:
        s = _side(att, 100.0, 1.25)
        s["holdout_seeds"][0]["slo_attainment"] = worst
        s["holdout"]["cost_per_month_usd"] = 3000.0
        s["setting"] = setting
        s["tie_break"] = {"ties": 3} if tie else None
        return s

    none = {"holdout": None, "setting": None}
    made = [
        _cell(0, side(0.95, 0.93, {"forecast": "auto"}, True), none),
        _cell(1, side(0.96, 0.96, {"forecast": "off"}, False), none),
    ]
    for c in made:
        cell_path(tmp_path, c["trace"], c["lead_min"], c["seed"]).write_text(json.dumps(c))
    lines = choices_table(cells(tmp_path)).splitlines()
    prescaler = next(line for line in lines if "| prescaler |" in line)
    assert "0: 93.00 % (90.00), 1: 96.00 % (90.00)" in prescaler
    assert "| $3,000, $3,000 | 1.25, 1.25 | 1/2 | forecast auto/off |" in prescaler
    keda = next(line for line in lines if "| keda-queue |" in line)
    assert "0: none chosen, 1: none chosen" in keda


def test_waterfall_per_cell(tmp_path: Path) -> None:
    cell = _cell(3, _side(0.95, 40.0, 1.2), _side(0.95, 50.0, 1.5))
    cell_path(tmp_path, "worldcup98", 2.5, 3).write_text(json.dumps(cell))
    text = waterfalls(cells(tmp_path))
    assert text.startswith("worldcup98, 2.5 min, seed 3:")
    assert "+ the lead time (150 s)" in text
    assert "= best causal set-up (prescaler)" in text and "$1,200" in text
    assert "missed the target: keda-queue-kv" in text


def test_flipped_mode() -> None:
    assert flipped_mode("auto") == "off"
    assert flipped_mode("prescaler") == "off"
    assert flipped_mode("off") == "auto"
    assert flipped_mode(None) == "auto"


def _flip_cell(seed: int, chosen: str, flipped: tuple[float, float]) -> dict[str, Any]:
    cell = _cell(seed, _side(0.95, 40.0, 1.2), _side(0.95, 50.0, 1.5))
    cell["sides"]["prescaler"]["holdout"]["cost_per_month_usd"] = 1200.0
    cell["forecast_flipped"] = {
        "chosen_forecast": chosen,
        "flipped_to": flipped_mode(chosen),
        "slo_attainment": flipped[0],
        "cost_usd": flipped[1],
    }
    return cell


def test_flip_table_gap_closed(tmp_path: Path) -> None:
    # bound $33.33: off costs $46.67, on $40 -> (46.67 - 40) / (46.67 - 33.33) = 50 %
    cells_ = [
        _flip_cell(0, "auto", (0.95, 46.67)),
        _flip_cell(1, "auto", (0.85, 30.0)),  # off misses the 0.9 target
        _flip_cell(2, "off", (0.95, 36.0)),  # chosen off; auto, cheaper, closes a share
        _flip_cell(3, "auto", (0.85, 30.0)),
    ]
    cells_[3]["sides"]["prescaler"]["holdout"]["slo_attainment"] = 0.89
    for c in cells_:
        cell_path(tmp_path, c["trace"], c["lead_min"], c["seed"]).write_text(json.dumps(c))
    rows = flip_table(cells(tmp_path)).splitlines()[2:]
    assert rows[0].endswith(
        "| auto: 95.00 %, $1,200 | off: 95.00 %, $1,400 | +50 % (off 1.40x, on 1.20x the bound) |"
    )
    assert rows[1].endswith("| off misses the target |")
    # chosen off at $40, auto at $36: auto closes (40 - 36) / (40 - 33.33) = 60 %
    assert rows[2].endswith(
        "| off: 95.00 %, $1,200 | auto (forecast keys at their defaults): 95.00 %, $1,080 "
        "| +60 % (off 1.20x, on 1.08x the bound) |"
    )
    assert rows[3].endswith("| both miss the target |")


def test_the_flip_at_the_chosen_mode_replays_the_held_back_run(tmp_path: Path) -> None:
    """``forecast_flipped`` opens the held-back part as ``tune`` does: given
    the chosen mode itself, it reproduces the run ``tune`` reported."""
    minutes = np.arange(3 * 1440 + 240)
    counts = 20.0 + 15.0 * np.sin(2 * np.pi * minutes / 1440.0)
    trace = tmp_path / "counts.csv"
    rows = "".join(f"{60 * int(m)},{c:.3f}\n" for m, c in zip(minutes, counts, strict=True))
    trace.write_text("minute_start_s,requests\n" + rows, encoding="utf-8")
    request = tune_request(
        trace=str(trace), profile="llama-3-8b@g5.xlarge", trials=2, holdout=0.5,
        start_s=3 * DAY_S, duration_s=4 * 3600.0, storage=f"sqlite:///{tmp_path / 's.db'}",
        sides=("prescaler",), short_history="warn", holdout_seeds=1,
    )  # fmt: skip
    side = tune(request).sides[0]
    assert side.holdout is not None and side.study.best is not None
    setting = dict(side.study.best.metadata)
    again = forecast_flipped(request, setting, mode=setting["forecast"])
    assert again["slo_attainment"] == pytest.approx(side.holdout["slo_attainment"], abs=1e-6)
    assert again["cost_usd"] == pytest.approx(side.holdout["cost_usd"], abs=1e-5)


def test_the_report_reads_cells_by_trace_then_lead_as_a_number_then_seed(tmp_path: Path) -> None:
    """A name order would put ``lead15`` before ``lead2.5``."""
    for trace, lead, seed in (("b", 15.0, 0), ("a", 2.5, 1), ("a", 15.0, 0), ("a", 2.5, 0)):
        cell = {"trace": trace, "lead_min": lead, "seed": seed}
        (tmp_path / f"{trace}-lead{lead:g}-seed{seed}.json").write_text(json.dumps(cell))
    order = [(c["trace"], c["lead_min"], c["seed"]) for c in cells(tmp_path)]
    assert order == [("a", 2.5, 0), ("a", 2.5, 1), ("a", 15.0, 0), ("b", 15.0, 0)]


def test_slack_table_gives_each_choices_drop_out_of_sample(tmp_path: Path) -> None:
    """Points over the target on the tuning day and on the held-back day's
    worst arrival seed, their difference, and the margin covering them all;
    a side with no choice has no row."""
    chosen = _side(0.91, 100.0, 1.1)
    chosen["tuned"] = {"slo_attainment": 0.915}
    chosen["holdout_seeds"][0]["slo_attainment"] = 0.898  # the worst: 0.2 under
    none = {"holdout": None, "tuned": None, "setting": None}
    cell = _cell(0, chosen, none)
    cell["target_attainment"] = {"tuned": 0.91, "holdout": 0.90}
    cell_path(tmp_path, cell["trace"], cell["lead_min"], 0).write_text(json.dumps(cell))
    text = slack_table(cells(tmp_path))
    rows = [line for line in text.splitlines() if line.startswith("| worldcup98")]
    assert rows == ["| worldcup98 | 2.5 min | prescaler | 0 | +0.50 | -0.20 | +0.70 |"]
    assert "worldcup98: drop median +0.70, largest +0.70 points over 1 choices" in text
    assert "a margin of 0.70 points would have covered every drop" in text


def _one_side(cell: dict[str, Any], side: str, cost: float, multiple: float) -> dict[str, Any]:
    """``cell`` as a run that tuned ``side`` alone: its waterfall names only that side."""
    cell["sides"] = {side: cell["sides"][side]}
    terms = cell["hindsight"]["terms"]
    terms["best_causal"] = {
        "policy": side,
        "cost_usd": cost,
        "multiple": multiple,
        "cost_per_month_usd": 30 * cost,
        "future_price_usd": cost - 33.33,
    }
    terms["shape"], terms["missed_target"] = [], []
    return cell  # fmt: skip


def _runs_apart(tmp_path: Path) -> tuple[Path, Path]:
    """A prescaler run (two seeds, and another trace) and a KEDA run (seed 0)."""
    ours, theirs = tmp_path / "prescaler", tmp_path / "keda"
    ours.mkdir()
    theirs.mkdir()
    for seed, cost, multiple in ((0, 110.0, 1.10), (1, 120.0, 1.20)):
        cell = _cell(seed, _side(0.95, cost, multiple), _side(0.93, 100.0, 1.00))
        cell = _one_side(cell, "prescaler", cost, multiple)
        cell["forecast_flipped"] = {"chosen_forecast": "auto", "cost_usd": cost}
        cell_path(ours, cell["trace"], cell["lead_min"], seed).write_text(json.dumps(cell))
    keda = _cell(0, _side(0.95, 110.0, 1.10), _side(0.93, 100.0, 1.00))
    keda = _one_side(keda, "keda-queue", 100.0, 1.00)
    keda["forecast_flipped"], keda["warnings"] = None, ["keda-queue: every trial tied"]
    cell_path(theirs, keda["trace"], keda["lead_min"], 0).write_text(json.dumps(keda))
    other = _one_side(_cell(0, _side(0.95, 110.0, 1.10), _side(0.93, 100.0, 1.00)),
                      "prescaler", 110.0, 1.10)  # fmt: skip
    other["trace"] = "azure-coding-2024"
    cell_path(ours, other["trace"], 2.5, 0).write_text(json.dumps(other))
    return ours, theirs


def test_sides_tuned_in_separate_runs_are_one_cell(tmp_path: Path) -> None:
    """A KEDA run's cells beside a prescaler run's, one directory each: one row, every
    side counted over the seeds it was tuned under, the ratio saying how many seeds it
    stands on; the same in either order, the waterfall, flip and warnings of both kept."""
    ours, theirs = _runs_apart(tmp_path)
    found = cells(ours, theirs)
    assert [sorted(c["sides"]) for c in found] == [
        ["prescaler"], ["keda-queue", "prescaler"], ["prescaler"]
    ]  # fmt: skip
    assert cells(theirs, ours) == found
    rows = markdown_table(found).splitlines()
    assert rows[-2].endswith("| 1.10x 1/1 | not run | - |")  # azure: no KEDA run
    assert rows[-1].endswith("| 1.15x (1.10-1.20) 2/2 | 1.00x 1/1 | 1.10x 1 of 2 |")
    merged = found[1]
    terms = merged["hindsight"]["terms"]
    assert terms["best_causal"]["policy"] == "keda-queue"  # 100 against prescaler's 110
    assert terms["best_causal"]["future_price_usd"] == pytest.approx(100.0 - 33.33)
    assert [(t["policy"], t["shape_price_usd"]) for t in terms["shape"]] == [("prescaler", 10.0)]
    assert merged["forecast_flipped"] == {"chosen_forecast": "auto", "cost_usd": 110.0}
    assert merged["warnings"] == ["keda-queue: every trial tied"]
    for c in found:
        for side in c["sides"].values():
            side["holdout"]["cost_per_month_usd"] = 30 * side["holdout"]["cost_usd"]
            side["setting"] = {}
    keda_line = next(x for x in choices_table(found).splitlines() if "| keda-queue |" in x)
    assert "| 0: 93.00 % (90.00) | $3,000 |" in keda_line  # seed 1 did not run it


def test_cells_that_cannot_share_a_table_are_refused_by_file(tmp_path: Path) -> None:
    """Another target, the same side tuned twice, or a directory with no cells."""
    ours, theirs = _runs_apart(tmp_path)
    with pytest.raises(ValueError, match="no cell files"):
        cells(ours, tmp_path / "missing")
    with pytest.raises(ValueError, match="tuned in two directories"):
        cells(ours, ours / ".." / "prescaler")
    path = cell_path(theirs, "worldcup98", 2.5, 0)
    keda = json.loads(path.read_text())
    keda["target_attainment"] = {"tuned": 0.8, "holdout": 0.8}
    path.write_text(json.dumps(keda))
    with pytest.raises(ValueError, match=r"keda/worldcup98-lead2.5-seed0.json: its target"):
        cells(ours, theirs)
