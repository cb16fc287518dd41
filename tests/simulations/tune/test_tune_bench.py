"""Benchmarks of `prescaler tune` (``make bench``; results under bench-results/).

- ``tune_speed.json``: trials over one day of a per-minute trace with a
  daily cycle at a rate that keeps about 10 replicas busy, in 2 processes,
  at the SLO target the test is parametrized with (``--target``: 0.95 of
  what an idle fleet attains, a level settings in the space can meet on
  this day, so the cost rules and full runs are measured, not only SLO
  stops; ``PRESCALER_TUNE_BENCH_TARGET`` replaces it, e.g. 0.99, the CLI
  default, at which every trial is stopped for the SLO). The speed goal is
  100 trials in under 15 minutes on 2 cores; by default the bench runs
  ``PRESCALER_TUNE_BENCH_TRIALS`` (4) trials and projects 100 from the
  measured wall time per trial (set it to 100 to run them all: the early
  stops make later trials cheaper than the first few, so only a full run
  measures them). Beside the wall time it records the CPU time the study
  used, and the projection from it
  (``projected_100_trials_on_free_cores_s``), which other work on a shared
  machine does not inflate, and the SLO target (``target``, and the
  attainment it stands for, ``target_attainment``).
- ``tune_daily.json``: for each trace in ``PRESCALER_TUNE_TRACES``
  (``os.pathsep``-separated; per-minute traces with a daily cycle, e.g. the
  Azure LLM inference 2024 per-minute counts; ``PATH@SECONDS`` tunes the
  day from that ``--start``), the tuned predictive settings scored on the
  held-back part meet the SLO target there (``target_attainment`` of
  ``tune --json``) and cost less than the tuned reactive threshold, and the
  hindsight schedule (``tune --json``'s ``hindsight``) meets the held-back
  target with no side's held-back setting below it. Skipped
  when the variable is unset: no trace with a full daily cycle ships with
  the repository.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.profiles import get_profile
from simulations.policies import fleet_bound
from simulations.simulation import SimConfig
from simulations.traffic import TrafficOptions, load_workload
from simulations.tune.search import default_bases, slo_ceiling
from simulations.tune.study import TuneContext, run_study

pytestmark = [pytest.mark.bench, pytest.mark.timeout(4 * 3600)]

RESULTS = Path(__file__).resolve().parents[3] / "bench-results"
PROFILE = "llama-3-8b@g5.xlarge"
MEAN_RPS = 6.0
"""Mean arrival rate of the synthetic day: about 10 replicas of the default
profile at the shipped token lengths (peak 1.5x the mean, trough 0.5x)."""
TARGET_S = 15 * 60.0
"""Wall-time goal for 100 trials (``meets_target`` in the JSON)."""
SLO_TARGETS = (float(os.environ.get("PRESCALER_TUNE_BENCH_TARGET", "0.95")),)
"""``--target`` of the benched study, as a fraction of the idle fleet's
attainment: 0.95 by default, which this day can meet."""


def _day_trace(path: Path) -> Path:
    minutes = np.arange(1440)
    rate = MEAN_RPS * (1.0 + 0.5 * np.sin(2 * np.pi * (minutes / 1440.0 - 0.25)))
    rows = "".join(f"{60 * i},{60 * r:.1f}\n" for i, r in enumerate(rate))
    path.write_text("minute_start_s,requests\n" + rows)
    return path


def _day_context(tmp_path: Path, target: float) -> tuple[TuneContext, float]:
    """The benches' study context over the synthetic day (about 10 replicas
    of the default profile, the shipped defaults as base) at ``target`` x
    the idle fleet's attainment, and that attainment."""
    workload = load_workload(_day_trace(tmp_path / "day.csv"), TrafficOptions(seed=0))
    bound = fleet_bound(workload, get_profile(PROFILE))
    base, _ = default_bases(PROFILE, bound)
    config = SimConfig()
    ceiling = slo_ceiling(workload, PROFILE, config.slo_ttft_s)
    ctx = TuneContext(workload, PROFILE, config, base, target * ceiling, max_replicas=bound)
    return ctx, ceiling


@pytest.mark.parametrize("target", SLO_TARGETS, ids=lambda t: f"target={t:g}")
def test_tune_speed(tmp_path: Path, target: float) -> None:
    """Wall time per trial on one simulated day at about 10 replicas, 2 jobs,
    at SLO target ``target``; the projection to 100 trials is recorded beside
    the 15-minute goal."""
    trials = int(os.environ.get("PRESCALER_TUNE_BENCH_TRIALS", "4"))
    jobs = 2
    ctx, ceiling = _day_context(tmp_path, target)
    workload, config = ctx.workload, ctx.config
    t0 = time.perf_counter()
    cpu0 = _cpu_s()
    result = run_study(
        ctx,
        storage=f"sqlite:///{tmp_path / 'bench.db'}",
        study_name="bench",
        n_trials=trials,
        jobs=jobs,
        fingerprint="bench",
    )
    wall = time.perf_counter() - t0
    cpu = _cpu_s() - cpu0
    per_trial = wall / max(1, len(result.trials))
    finished = [t for t in result.trials if t.finished]
    stopped = Counter(t.stopped.split(":", 1)[0] for t in result.trials if not t.finished)
    doc = {
        "trace": "synthetic day, per-minute counts, daily cycle",
        "profile": PROFILE,
        "mean_rps": MEAN_RPS,
        "requests": len(workload),
        "max_replicas": ctx.max_replicas,
        "jobs": jobs,
        "cpu_count": os.cpu_count(),
        "trials": len(result.trials),
        "trials_finished": len(finished),
        "trials_stopped": dict(sorted(stopped.items())),
        "target": target,
        "slo_ttft_s": config.slo_ttft_s,
        "idle_attainment": round(ceiling, 6),
        "target_attainment": round(target * ceiling, 6),
        "feasible_found": result.best is not None,
        "trials_feasible": sum(1 for t in result.trials if t.feasible),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
        "simulated_share": round(sum(t.simulated for t in result.trials) / trials, 4),
        "wall_s": round(wall, 1),
        "wall_per_trial_s": round(per_trial, 1),
        "cpu_s": round(cpu, 1),
        "simulated_requests_per_cpu_s": round(
            len(workload) * sum(t.simulated for t in result.trials) / max(cpu, 1e-9), 0
        ),
        "projected_100_trials_s": round(100 * per_trial, 0),
        "projected_100_trials_on_free_cores_s": round(100 * cpu / trials / jobs, 0),
        "target_100_trials_s": TARGET_S,
        "meets_target": 100 * per_trial <= TARGET_S,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tune_speed.json").write_text(json.dumps(doc, indent=2) + "\n")
    assert len(result.trials) == trials


DAY_TRACE_ENV = "PRESCALER_TUNE_DAY_TRACE"
"""A per-minute trace with a daily cycle for the day-study bench (its path:
none ships with the repository, so the bench skips without it)."""


@pytest.mark.skipif(not os.environ.get(DAY_TRACE_ENV), reason=f"{DAY_TRACE_ENV} is not set")
def test_tune_day_study_speed(tmp_path: Path) -> None:
    """``prescaler tune`` as a user runs it on a real history: tune on
    ``PRESCALER_TUNE_DAY_HOURS`` (24) hours of ``$PRESCALER_TUNE_DAY_TRACE``
    from ``PRESCALER_TUNE_DAY_START`` (0) s, score on the same span held
    back, at ``PRESCALER_TUNE_RATE_SCALE`` (0.1), ``PRESCALER_TUNE_BENCH_TRIALS``
    (40) trials a side in 2 processes, every default side (or the
    comma-separated ``PRESCALER_TUNE_DAY_SIDES``). Writes
    ``bench-results/tune_day_speed.json``: per side the study's wall time,
    trials per second, trials finished and stopped by rule, the share of the
    tuning part simulated, the forecast memo's counts; the whole run's wall
    time (the studies plus the held-back re-runs); whether the compiled
    modules of ``make native`` were loaded; and the load average before and
    after (the machine may be shared); and the BLAS threads (``blas_threads``: run it
    with ``OPENBLAS_NUM_THREADS=1``, as the ``prescaler`` command sets it, or
    each process's fits take a second thread the other process needed). The
    goal it records: each study within 5 minutes."""
    import io

    import simulations.router as router
    from prescaler_native.loader import is_native
    from simulations.tune.run import TuneRequest, tune

    hours = float(os.environ.get("PRESCALER_TUNE_DAY_HOURS", "24"))
    trials = int(os.environ.get("PRESCALER_TUNE_BENCH_TRIALS", "40"))
    scale = float(os.environ.get("PRESCALER_TUNE_RATE_SCALE", "0.1"))
    start = float(os.environ.get("PRESCALER_TUNE_DAY_START", "0"))
    picked = os.environ.get("PRESCALER_TUNE_DAY_SIDES", "")
    request = TuneRequest(
        trace=os.environ[DAY_TRACE_ENV], profile=PROFILE, target=SLO_TARGETS[0],
        trials=trials, holdout=0.5, jobs=2, rate_scale=scale, start_s=start,
        duration_s=2 * hours * 3600.0, storage=f"sqlite:///{tmp_path / 'day.db'}",
        sides=tuple(s for s in picked.split(",") if s),
    )  # fmt: skip
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    result = tune(request, io.StringIO())
    wall = time.perf_counter() - t0
    sides: dict[str, Any] = {}
    for s in result.sides:
        done = s.study.trials
        sides[s.side.name] = {
            "trials": len(done),
            "study_wall_s": round(s.study_wall_s, 1),
            "trials_per_s": round(len(done) / s.study_wall_s, 4),
            "trials_finished": sum(1 for t in done if t.finished),
            "trials_stopped": dict(
                sorted(Counter(t.stopped.split(":", 1)[0] for t in done if not t.finished).items())
            ),
            "simulated_share": round(sum(t.simulated for t in done) / max(1, len(done)), 4),
            "chosen_trial": None if s.study.best is None else s.study.best.number,
            "held_back_attainment": None if s.holdout is None else s.holdout["slo_attainment"],
            "forecast_memo": _memo_totals(s.study.storage, s.study.study_name),
        }
    doc = {
        "trace": Path(request.trace or "").name,
        "start_s": start,
        "tuning_hours": hours,
        "rate_scale": scale,
        "target": request.target,
        "profile": PROFILE,
        "jobs": request.jobs,
        "cpu_count": os.cpu_count(),
        "native_loaded": is_native(router),
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "wall_s": round(wall, 1),
        "study_goal_s": 300.0,
        "sides": sides,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tune_day_speed.json").write_text(json.dumps(doc, indent=2) + "\n")
    assert all(v["trials"] == trials for v in sides.values())


MEMO_SIZES = ("fitted", "fitted_bytes", "forecasts", "forecast_bytes")
"""What a process's forecast memo held after a trial (the largest is kept)."""


def _memo_totals(storage: str, name: str) -> dict[str, float]:
    """The study's forecast memo counts (simulations.forecast_memo), summed
    over its trials (each trial records what its forecasts took from earlier
    trials in its process), and the most its stores held (``max_*``)."""
    import optuna

    totals: Counter[str] = Counter()
    for t in optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False):
        for k, v in t.user_attrs.get("forecast_memo", {}).items():
            if k in MEMO_SIZES:
                totals[f"max_{k}"] = max(totals[f"max_{k}"], v)
            elif k != "predict_hit_rate":
                totals[k] += v
    asked = totals["predicts_run"] + totals["predicts_reused"]
    return {
        **totals,
        "predict_hit_rate": round(totals["predicts_reused"] / asked, 4) if asked else 0.0,
    }


def _cpu_s() -> float:
    """CPU seconds of this process and its finished children (the study's
    worker processes): on a shared machine the wall time also counts other
    people's work, this does not."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _traces() -> list[str]:
    raw = os.environ.get("PRESCALER_TUNE_TRACES", "")
    return [p for p in raw.split(os.pathsep) if p]


@pytest.mark.skipif(not _traces(), reason="PRESCALER_TUNE_TRACES is not set")
def test_tuned_predictive_beats_tuned_reactive_out_of_sample(tmp_path: Path) -> None:
    """On each daily-cycle trace: tuned on one day, the predictive settings
    meet the target on the next (held back) and cost less there than the
    reactive ScaledObject at its own tuned threshold (at the speed bench's
    target, 0.95 unless ``PRESCALER_TUNE_BENCH_TARGET`` says)."""
    from simulations.tune.cli import main

    trials = os.environ.get("PRESCALER_TUNE_BENCH_TRIALS", "40")
    scale = os.environ.get("PRESCALER_TUNE_RATE_SCALE", "0.1")
    # Two days: tune on the first, score on the second, the same hours of the
    # cycle (one day split 70/30 scores settings tuned on a morning on an
    # evening). PRESCALER_TUNE_DAYS=1 keeps the CLI's --holdout 0.3 on one day.
    days = int(os.environ.get("PRESCALER_TUNE_DAYS", "2"))
    split = ["--holdout", f"{1 - 1 / days:g}"] if days > 1 else []
    rows = {}
    for k, entry in enumerate(_traces()):
        trace, _, start = entry.partition("@")
        out = tmp_path / f"t{k}.json"
        code = main([
            trace, "--duration", str(86400 * days), *split, "--rate-scale", scale,
            "--trials", trials,
            "--target", str(SLO_TARGETS[0]), *(["--start", start] if start else []),
            "--jobs", "2", "--quiet", "--storage", f"sqlite:///{tmp_path / 'daily.db'}",
            "--json", str(out),
        ])  # fmt: skip
        assert code == 0
        doc = json.loads(out.read_text())
        rows[Path(trace).name + (f"@{start}" if start else "")] = doc
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tune_daily.json").write_text(json.dumps(rows, indent=2) + "\n")
    for name, doc in rows.items():
        p, r = doc["predictive"]["holdout"], doc["reactive"]["holdout"]
        held_target = doc["target_attainment"]["holdout"]
        assert p["slo_attainment"] >= held_target, (name, p["slo_attainment"], held_target)
        assert p["cost_usd"] < r["cost_usd"], (name, p["cost_usd"], r["cost_usd"])
        # the bound holds: it meets the target (within 0.2 points) and no
        # side's held-back setting that meets it costs less
        bound = doc["hindsight"]["stated_lead"]
        assert bound["slo_attainment"] >= held_target - 0.002, (name, bound)
        below = [
            (side, s["holdout"]["cost_usd"])
            for side, s in doc["sides"].items()
            if s["holdout"] is not None
            and s["holdout"]["slo_attainment"] >= held_target
            and s["holdout"]["cost_usd"] < bound["cost_usd"]
        ]
        assert not below, (name, bound["cost_usd"], below)


SHARE_FRACTIONS = (1 / 32, *(k / 16 for k in range(1, 16)))
"""Where the pace bench reads each run: at 1/32 and every 1/16 of the requests."""


@dataclass(frozen=True)
class FullRun:
    """One setting run to the end, read at each of ``SHARE_FRACTIONS``."""

    metadata: dict[str, str]
    attainment: float
    cost_usd: float
    share: dict[float, float]
    """Fraction of the requests -> share of the run's whole cost spent by then."""
    so_far: dict[float, float]
    """Fraction of the requests -> attainment so far."""


def _full_run(args: tuple[Any, ...]) -> FullRun:
    """A worker process's job in the pace-rules bench."""
    from simulations.tune.search import score

    so, workload, profile, config, rungs, meta = args
    s = score(so, workload, profile, config, rungs=rungs)
    assert s.finished
    return FullRun(
        meta,
        s.attainment,
        s.cost_usd,
        {f: p.cost_usd / s.cost_usd for f, p in s.curve},
        {f: p.running_attainment for f, p in s.curve},
    )


def test_tune_pace_rules(tmp_path: Path) -> None:
    """The pace rules' slacks against what they must cover, measured.

    Cost: a trial is stopped at rung r when it has spent more than
    ``1 + cost_pace_slack(r)`` times what the best feasible trial had spent
    there. No trial that would end cheaper than the best is stopped when no
    two settings differ more in their share of the day's cost spent by r: if
    trial t ends cheaper than best b, C_t(r) / C_b(r) < s_t(r) / s_b(r).
    SLO: a trial is stopped at rung r (up to 1/2) when its attainment so far
    is more than ``slo_slack(r)`` below the target; none that would meet the
    target is stopped when attainment so far is never that far below the
    final one. This runs ``PRESCALER_TUNE_PACE_TRIALS`` (16) settings of the
    search space over the speed bench's day to the end (the base and random
    draws), reads both at 1/32 and every 1/16, and fails where a slack does
    not cover what the settings that meet the speed bench's target show."""
    from concurrent.futures import ProcessPoolExecutor

    import optuna

    from simulations.tune.search import (
        PREDICTIVE_SPACE,
        apply_metadata,
        rung_times,
        sample_metadata,
    )
    from simulations.tune.stop_rules import SLO_PACE_UNTIL

    n = int(os.environ.get("PRESCALER_TUNE_PACE_TRIALS", "16"))
    ctx, _ = _day_context(tmp_path, SLO_TARGETS[0])
    workload, config, base, bound, target = (
        ctx.workload, ctx.config, ctx.base, ctx.max_replicas, ctx.target
    )  # fmt: skip
    rungs = rung_times(workload, SHARE_FRACTIONS)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    jobs: list[tuple[Any, ...]] = [(base, workload, PROFILE, config, rungs, {})]
    for _ in range(n - 1):
        meta = sample_metadata(study.ask(), PREDICTIVE_SPACE, bound)
        jobs.append((apply_metadata(base, meta), workload, PROFILE, config, rungs, meta))
    t0 = time.perf_counter()
    with ProcessPoolExecutor(2) as pool:
        runs = list(pool.map(_full_run, jobs))
    wall = time.perf_counter() - t0
    near = [r for r in runs if r.attainment >= target]
    assert len(near) >= 2, "too few settings met the target to measure a spread"
    rows: list[dict[str, float | None]] = []
    uncovered: list[dict[str, float | None]] = []
    for f in SHARE_FRACTIONS:
        shares = [r.share[f] for r in runs]
        near_shares = [r.share[f] for r in near]
        widest = max(near_shares) / min(near_shares)
        shortfall = max(r.attainment - r.so_far[f] for r in near)
        cost_slack = ctx.cost_pace_slack(f)
        slo_slack = ctx.slo_slack(f) if f <= SLO_PACE_UNTIL else None
        rows.append({
            "fraction": f,
            "share_min": round(min(shares), 4),
            "share_max": round(max(shares), 4),
            "widest_share_ratio": round(max(shares) / min(shares), 4),
            "widest_share_ratio_meeting_target": round(widest, 4),
            "cost_pace_slack": cost_slack,
            "largest_attainment_shortfall_meeting_target": round(shortfall, 5),
            "slo_pace_slack": slo_slack,
        })  # fmt: skip
        if (cost_slack is not None and 1.0 + cost_slack < widest) or (
            slo_slack is not None and slo_slack < shortfall
        ):
            uncovered.append(rows[-1])
    doc = {
        "trace": "synthetic day, per-minute counts, daily cycle (the speed bench's)",
        "settings": len(runs),
        "settings_meeting_target": len(near),
        "target_attainment": round(target, 6),
        "wall_s": round(wall, 1),
        "rungs": rows,
        "runs": [
            {
                "metadata": r.metadata,
                "attainment": round(r.attainment, 6),
                "cost_usd": round(r.cost_usd, 4),
                "share": {f"{f:.4f}": round(v, 5) for f, v in r.share.items()},
                "attainment_so_far": {f"{f:.4f}": round(v, 6) for f, v in r.so_far.items()},
            }
            for r in runs
        ],
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "tune_pace_rules.json").write_text(json.dumps(doc, indent=2) + "\n")
    assert not uncovered, uncovered
