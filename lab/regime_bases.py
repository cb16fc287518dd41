"""Each side's ScaledObject as written, scored on a regime sweep's parts.

A tuned study's answer is only as good as its budget: the sweep's first
trial of every side is its ScaledObject as written, but the stop rules may
end it early and TPE may never come back near it. Scoring the written
ScaledObjects to the end on the same parts, against the same targets, says
whether a tuned side did better than not tuning at all, and whether a
setting the study passed over was within reach.

``python -m lab.regime_bases sparse-bursts --leads 2.5,15 --target 0.85``;
``--trials N`` also tunes each side with N trials, as the sweep does (a
budget probe: what a larger budget finds for one side, without the sweep's
other sides).
"""

from __future__ import annotations

import argparse
import math
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from lab.regime_config import KEDA_SIDES, LEAD_TIMES, PROFILE, SweepConfig
from lab.regime_generator import REGIMES
from lab.regimes import RegimeCell, build_cell, study_side, write_regime_trace
from simulations.runner import met_slo
from simulations.sim_inputs import SimInputs
from simulations.simulation import SimResult
from simulations.tune.manifest import apply_setting
from simulations.tune.request import tune_request
from simulations.tune.search import score
from simulations.tune.sides import Side, WrittenCron, make_sides

__all__ = [
    "BaseScore",
    "main",
    "markdown_hours",
    "misses_by_hour",
    "regime_cells",
    "score_bases",
    "tune_sides",
]


@dataclass(frozen=True)
class BaseScore:
    """One side's written ScaledObject on one cell's two parts."""

    side: str
    lead_min: float
    tuning_attainment: float
    tuning_target: float
    tuning_cost_usd: float
    held_attainment: float
    held_target: float
    held_cost_usd: float
    held_misses_by_hour: tuple[int, ...] = ()
    """Requests that missed the SLO on the held-back part, per hour of it
    (by arrival): where in the day a setting loses what it loses."""

    @property
    def would_be_chosen(self) -> bool:
        """Meets the tuning part's target (what a study's winner must)."""
        return self.tuning_attainment >= self.tuning_target


def regime_cells(regime: str, config: SweepConfig, directory: Path) -> dict[float, RegimeCell]:
    """The sweep's parts at each lead of ``config``, from one trace written
    under ``directory`` (each lead's study storage beside it)."""
    trace = write_regime_trace(regime, config, directory)
    return {
        lead: build_cell(
            regime, trace, lead, config, f"sqlite:///{directory / f'{regime}-{lead:g}.db'}"
        )
        for lead in config.leads_min
    }


def score_bases(
    regime: str,
    config: SweepConfig,
    sides: Sequence[str],
    directory: Path,
    setting: Mapping[str, str] | None = None,
    cells: Mapping[float, RegimeCell] | None = None,
) -> list[BaseScore]:
    """Every side in ``sides`` as written (with ``setting`` applied, as a
    tuned setting is: a hand-tuned neighbour), at every lead of ``config``,
    on the parts the sweep tunes and scores (prescaler's sides with their
    backfill, as the sweep gives it); ``cells`` when already built."""
    cells = cells if cells is not None else regime_cells(regime, config, directory)
    out: list[BaseScore] = []
    for lead, cell in cells.items():
        for side in _sides(sides, lead, cell.cron):
            so = apply_setting(side.base, setting, side.manifest) if setting else side.base
            tuning = score(so, cell.tuning, PROFILE, cell.sim, history=cell.histories[0])
            held = score(so, cell.held, PROFILE, cell.held_sim, history=cell.histories[1])
            assert held.result is not None
            row = BaseScore(
                side.name, lead,
                tuning.attainment, cell.targets[0], tuning.cost_usd,
                held.attainment, cell.targets[1], held.cost_usd,
                misses_by_hour(held.result, cell.held.arrival_s, cell.held.duration_s),
            )  # fmt: skip
            out.append(row)
    return out


def tune_sides(
    regime: str, cells: Mapping[float, RegimeCell], sides: Sequence[str], trials: int
) -> list[tuple[str, float, dict[str, Any]]]:
    """Each side tuned as the sweep tunes it (the cells' ``config.trials``),
    at every lead: (side, lead, the sweep's row for it)."""
    out: list[tuple[str, float, dict[str, Any]]] = []
    for lead, cell in cells.items():
        for side in _sides(sides, lead, cell.cron):
            tag = (
                f"probe-{regime}-{lead:g}-t{trials}-m{cell.config.margin:g}-b{cell.config.busier:g}"
            )
            out.append((side.name, lead, study_side(side, cell, tag)))
    return out


def misses_by_hour(result: SimResult, arrival_s: np.ndarray, duration_s: float) -> tuple[int, ...]:
    """Requests of a finished run that missed the SLO (late, timed out or
    rejected), counted by the hour they arrived in."""
    ok = met_slo(result)
    hours = max(1, math.ceil(duration_s / 3600.0 - 1e-9))
    counts = np.bincount((arrival_s[~ok] // 3600.0).astype(int), minlength=hours)
    return tuple(int(c) for c in counts[:hours])


def markdown_hours(rows: Sequence[BaseScore]) -> str:
    """Each row's held-back misses in the hours where any row has some."""
    width = max((len(r.held_misses_by_hour) for r in rows), default=0)
    keep = [h for h in range(width) if any(_at(r.held_misses_by_hour, h) for r in rows)]
    if not keep:
        return "no request missed the SLO on the held-back part\n"
    head = "| side, as written | lead | " + " | ".join(f"{h:02d}h" for h in keep) + " |\n"
    rule = "|---|---|" + "---|" * len(keep) + "\n"
    body = "".join(
        f"| {r.side} | {r.lead_min:g} min | "
        + " | ".join(str(_at(r.held_misses_by_hour, h)) for h in keep) + " |\n"
        for r in rows
    )  # fmt: skip
    return "held-back misses by hour of arrival:\n\n" + head + rule + body


def _at(counts: Sequence[int], hour: int) -> int:
    return counts[hour] if hour < len(counts) else 0


def _sides(names: Sequence[str], lead_min: float, window: WrittenCron | None) -> tuple[Side, ...]:
    inputs = SimInputs(lead_time_preset=LEAD_TIMES[lead_min])
    request = tune_request(
        trace=None, profile=PROFILE, sides=tuple(names), inputs=inputs, cron_window=window
    )
    return make_sides(request, PROFILE, inputs.max_replicas)


def markdown(rows: Sequence[BaseScore]) -> str:
    head = (
        "| side, as written | lead | tuning part: attainment (target), cost "
        "| held back: attainment (target), cost | a study could choose it |\n"
        "|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {r.side} | {r.lead_min:g} min "
        f"| {r.tuning_attainment:.4f} ({r.tuning_target:.4f}), ${r.tuning_cost_usd:.2f} "
        f"| {r.held_attainment:.4f} ({r.held_target:.4f}), ${r.held_cost_usd:.2f} "
        f"| {'yes' if r.would_be_chosen else 'no'} |\n"
        for r in rows
    )
    return head + body


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.regime_bases")
    parser.add_argument("regime")
    parser.add_argument("--leads", default="2.5,15", help="minutes, comma-separated")
    parser.add_argument("--target", type=float, default=0.95)
    parser.add_argument("--sides", default=",".join(KEDA_SIDES))
    parser.add_argument("--focus", action="store_true", help="each day's focus hours")
    parser.add_argument("--history-days", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trials", type=int, default=0, help="also tune each side (0: no)")
    parser.add_argument(
        "--margin", type=float, default=0.0, help="points above the tuning target (as tune's)"
    )
    parser.add_argument(
        "--busier", type=float, default=0.0, help="percent more traffic on the tuning day"
    )
    parser.add_argument(
        "--capacity-error", type=float, default=0.0,
        help="prescaler believes (1 + E) x each replica's capacity (E < 0: headroom)",
    )  # fmt: skip
    parser.add_argument(
        "--by-hour", action="store_true", help="also the held-back misses by hour of arrival"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="a setting key (as tune writes them) applied to every side before scoring",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.regime not in REGIMES:
        parser.error(f"regime {args.regime!r} is not one of {', '.join(REGIMES)}")
    leads = tuple(float(x) for x in args.leads.split(","))
    unknown = [x for x in leads if x not in LEAD_TIMES]
    if unknown:
        parser.error(f"--leads: no preset for {unknown} (known: {sorted(LEAD_TIMES)})")
    config = SweepConfig(
        regimes=(args.regime,), leads_min=leads, prewarm=(False,), target=args.target,
        focus=args.focus, history_days=args.history_days, seed=args.seed,
        trials=max(1, args.trials), margin=args.margin, busier=args.busier,
        capacity_error=args.capacity_error,
    )  # fmt: skip
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    bad = [x for x in args.set if "=" not in x]
    if bad:
        parser.error(f"--set wants KEY=VALUE, got {bad}")
    setting = dict(x.split("=", 1) for x in args.set)
    with tempfile.TemporaryDirectory() as tmp:
        cells = regime_cells(args.regime, config, Path(tmp))
        rows = score_bases(args.regime, config, sides, Path(tmp), setting, cells)
        print(markdown(rows), end="")
        if args.by_hour:
            print("\n" + markdown_hours(rows), end="")
        if args.trials > 0:
            for name, lead, row in tune_sides(args.regime, cells, sides, args.trials):
                print(f"{name} at {lead:g} min, tuned with {args.trials} trials: {_tuned(row)}")
    return 0


def _tuned(row: dict[str, Any]) -> str:
    if row["holdout"] is None:
        return f"no trial met the tuning part's target ({row['trials_finished']} ran to the end)"
    held, tuned = row["holdout"], row["tuning"]
    meets = "meets" if row["cost_at_target_usd"] is not None else "misses"
    return (
        f"held back {held['slo_attainment']:.4f} at ${held['cost_usd']:.2f} ({meets} its target; "
        f"tuning part {tuned['slo_attainment']:.4f} at ${tuned['cost_usd']:.2f}; "
        f"{row['trials_finished']} of {row['trials']} ran to the end); setting {row['setting']}"
    )


if __name__ == "__main__":
    raise SystemExit(main())
