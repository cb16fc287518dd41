"""What a longer refit interval changes in one prescaler trial: the tuner's
screening fidelity (:mod:`simulations.tune.screening`) against the scaler's
own cadence, setting by setting.

Why: ``prescaler tune`` runs the prescaler side's trials with the tracker
refitting its forecaster less often than the live scaler does (a trial's
time is mostly refits) and confirms the chosen setting at the scaler's
cadence. Whether that is safe depends on how far a trial's attainment and
cost move with the cadence, against the slack a chosen setting has over its
target (tenths of a point on the real days of ``lab/efficiency.py``).

One efficiency cell's tuning day (``lab/efficiency.py``'s request, the same
trace, rate, tokens, lead time, backfill and opening fleet): the prescaler
side's settings from the cells already written for that trace and lead
time (the settings chosen there, the ones closest to their target), then
``--random`` settings drawn from the side's search space, each run at every
refit interval given. Reads the trace: the experiment's shell, not pure.

    python -m lab.screening_fidelity azure-coding-2024 2.5 --refits 600 1800 3600 \\
        --random 5 --json lab/results/screening/2026-12-06.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lab.efficiency import TRACES, cell_request, load_config
from lab.efficiency_ablation import CellDays, cell_days
from simulations.tune.manifest import apply_setting
from simulations.tune.search import sample_metadata, score, slo_ceiling

__all__ = ["chosen_settings", "main", "run"]

ROOT = Path(__file__).resolve().parents[1]


def chosen_settings(directory: Path, trace: str, lead_min: float) -> list[dict[str, str]]:
    """The prescaler side's chosen setting in every cell of ``directory`` for
    ``trace`` at ``lead_min``, by seed."""
    found: list[tuple[int, dict[str, str]]] = []
    for path in sorted(directory.glob(f"{trace}-lead{lead_min:g}-seed*.json")):
        cell = json.loads(path.read_text())
        setting = (cell["sides"].get("prescaler") or {}).get("setting")
        if setting:
            found.append((int(cell["seed"]), dict(setting)))
    return [s for _, s in sorted(found, key=lambda x: x[0])]


def _random_settings(
    space: Sequence[Any], max_replicas: int, n: int, seed: int
) -> list[dict[str, str]]:
    import optuna  # heavy: only this draw needs it

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    out = []
    for _ in range(n):
        trial = study.ask()
        out.append(sample_metadata(trial, space, max_replicas))
        study.tell(trial, 0.0)
    return out


def run(
    days: CellDays,
    target_fraction: float,
    settings: Sequence[Mapping[str, str]],
    refits: Sequence[float],
) -> dict[str, Any]:
    """Each setting on the cell's tuning day (``days``) at each refit interval;
    ``target_fraction`` of the day's idle-fleet ceiling is the target."""
    tune_part, side, starts = days.tune_part, days.side, days.starts
    ceiling = slo_ceiling(tune_part, days.profile, days.opening.slo_ttft_s)
    rows = []
    for k, setting in enumerate(settings):
        spec = apply_setting(side.base, setting, side.manifest)
        runs = []
        for refit in refits:
            cfg = dataclasses.replace(starts.tuning_config, refit_interval_s=float(refit))
            t0 = time.perf_counter()
            s = score(spec, tune_part, days.profile, cfg, history=starts.tuning.history)
            wall = time.perf_counter() - t0
            runs.append({"refit_s": refit, "attainment": round(s.attainment, 6),
                         "cost_usd": round(s.cost_usd, 4), "wall_s": round(wall, 1)})  # fmt: skip
            print(f"  setting {k}: refit {refit:g} s: {100 * s.attainment:.2f} %, "
                  f"${s.cost_usd:,.2f}, {wall:.0f} s", flush=True)  # fmt: skip
        rows.append({"setting": dict(setting), "runs": runs})
    return {
        "target": round(target_fraction * ceiling, 6), "tuned_requests": len(tune_part),
        "refits_s": list(refits), "settings": rows,
    }  # fmt: skip


def report(doc: Mapping[str, Any]) -> str:
    """A table: per setting, each screening refit's attainment (points) and
    cost (%) against the first refit's (the scaler's), and its wall time."""
    refits = doc["refits_s"]
    head = ["setting", f"{refits[0]:g} s: attainment, cost, wall"] + [
        f"{r:g} s: d attainment (pt), d cost, wall" for r in refits[1:]
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    target = doc["target"]
    for k, row in enumerate(doc["settings"]):
        full = row["runs"][0]
        cells = [f"{k} ({'meets' if full['attainment'] >= target else 'misses'})",
                 f"{100 * full['attainment']:.2f} %, ${full['cost_usd']:,.0f}, "
                 f"{full['wall_s']:.0f} s"]  # fmt: skip
        for run_ in row["runs"][1:]:
            d_att = 100 * (run_["attainment"] - full["attainment"])
            d_cost = 100 * (run_["cost_usd"] / full["cost_usd"] - 1)
            flip = (
                ""
                if (run_["attainment"] >= target) == (full["attainment"] >= target)
                else " (flips)"
            )
            cells.append(f"{d_att:+.2f}, {d_cost:+.1f} %, {run_['wall_s']:.0f} s{flip}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m lab.screening_fidelity", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("trace", choices=sorted(TRACES))
    p.add_argument("lead_min", type=float)
    p.add_argument("--refits", type=float, nargs="+", default=[600.0, 1800.0, 3600.0])
    p.add_argument("--random", type=int, default=5, help="random settings after the chosen ones")
    p.add_argument("--seed", type=int, default=0, help="the cell's study seed (arrivals)")
    p.add_argument(
        "--cells", default="lab/results/efficiency", help="cells to take chosen settings from"
    )
    p.add_argument("--json", default=None)
    p.add_argument(
        "--report", default=None, metavar="JSON", help="print the table of a written JSON"
    )
    args = p.parse_args(argv)
    if args.report:
        print(report(json.loads(Path(args.report).read_text())))
        return 0
    config = load_config(ROOT / "lab/configs/default.yaml")
    chosen = chosen_settings(ROOT / args.cells, args.trace, args.lead_min)
    with tempfile.TemporaryDirectory() as tmp:
        request, _ = cell_request(
            config, args.trace, args.lead_min, args.seed, f"sqlite:///{tmp}/unused.db"
        )
    days = cell_days(request)
    drawn = _random_settings(days.side.space, days.side.max_replicas, args.random, args.seed)
    doc = {
        "trace": args.trace, "lead_min": args.lead_min, "seed": args.seed,
        **run(days, request.protocol.target, [*chosen, *drawn], args.refits),
    }  # fmt: skip
    doc["chosen_from_cells"] = len(chosen)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    print(report(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
