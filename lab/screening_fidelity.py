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

from engine.profiles import use_profile
from lab.efficiency import TRACES, EfficiencyConfig, cell_request, load_config
from simulations.sim_inputs import SimInputs
from simulations.sim_types import replay_config
from simulations.traffic import load_workload
from simulations.tune.inputs import part_starts, requests_before
from simulations.tune.manifest import apply_setting
from simulations.tune.search import sample_metadata, score, slo_ceiling, split_workload
from simulations.tune.sides import make_sides

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
    config: EfficiencyConfig,
    trace: str,
    lead_min: float,
    settings: Sequence[Mapping[str, str]],
    refits: Sequence[float],
    seed: int = 0,
) -> dict[str, Any]:
    """Each setting on the cell's tuning day at each refit interval."""
    with tempfile.TemporaryDirectory() as tmp:
        request, _ = cell_request(config, trace, lead_min, seed, f"sqlite:///{tmp}/unused.db")
    replay = request.replay
    assert request.source.trace is not None
    profile = use_profile(replay.profile)
    traffic = replay.traffic(replay.tokens_from)
    workload = load_workload(request.source.trace, traffic)
    before = requests_before(request.source.trace, traffic)
    tune_part, held = split_workload(workload, request.protocol.holdout)
    inputs = replay.inputs or SimInputs()
    opening = inputs.apply(replay_config(replay), profile, None)
    starts = part_starts(before, tune_part, held, profile, opening, inputs,
                         backfill=replay.backfill)  # fmt: skip
    side = next(
        s for s in make_sides(request, profile, inputs.max_replicas) if s.name == "prescaler"
    )
    target = request.protocol.target * slo_ceiling(tune_part, profile, opening.slo_ttft_s)
    rows = []
    for k, setting in enumerate(settings):
        spec = apply_setting(side.base, setting, side.manifest)
        runs = []
        for refit in refits:
            cfg = dataclasses.replace(starts.tuning_config, refit_interval_s=float(refit))
            t0 = time.perf_counter()
            s = score(spec, tune_part, profile, cfg, history=starts.tuning.history)
            wall = time.perf_counter() - t0
            runs.append({"refit_s": refit, "attainment": round(s.attainment, 6),
                         "cost_usd": round(s.cost_usd, 4), "wall_s": round(wall, 1)})  # fmt: skip
            print(f"  setting {k}: refit {refit:g} s: {100 * s.attainment:.2f} %, "
                  f"${s.cost_usd:,.2f}, {wall:.0f} s", flush=True)  # fmt: skip
        rows.append({"setting": dict(setting), "runs": runs})
    return {
        "trace": trace, "lead_min": lead_min, "seed": seed, "target": round(target, 6),
        "tuned_requests": len(tune_part), "refits_s": list(refits), "settings": rows,
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
            config, args.trace, args.lead_min, args.seed, f"sqlite:///{tmp}/x.db"
        )
    profile = use_profile(request.replay.profile)
    inputs = request.replay.inputs or SimInputs()
    side = next(
        s for s in make_sides(request, profile, inputs.max_replicas) if s.name == "prescaler"
    )
    drawn = _random_settings(side.space, side.max_replicas, args.random, args.seed)
    doc = run(config, args.trace, args.lead_min, [*chosen, *drawn], args.refits, args.seed)
    doc["chosen_from_cells"] = len(chosen)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    print(report(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
