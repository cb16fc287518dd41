"""``prescaler tune``: the cheapest predictive trigger settings that meet a TTFT SLO.

Takes every traffic flag of ``prescaler simulate`` as it is (the same
argument builder), searches the predictive trigger's metadata with
:mod:`simulations.tune` on the first part of the trace, finds the reactive
ScaledObject's best threshold under the same SLO, re-simulates both on the
held-back rest, and prints the ``metadata:`` block to paste, the expected
SLO attainment and monthly cost beside the reactive baseline's. Each run's
predictive tracker starts with the trace's demand before it as history
(:mod:`simulations.backfill`, the rule ``simulate --start`` uses): the
held-back rest gets the tuning part's; ``--no-backfill`` gives none.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from simulations.cli import UsageError, _finite, _int, add_simulate_arguments, run_subcommand

if TYPE_CHECKING:
    from forecasting.series import DemandSeries
    from simulations.backfill import DemandHistory
    from simulations.traffic import Workload

__all__ = ["DEFAULT_STORAGE", "TuneOptions", "register", "tune"]

DEFAULT_STORAGE = "sqlite:///prescaler-tune.db"
"""Without ``--storage`` the study lives in a SQLite file in the working
directory: every finished trial is committed as it ends, so a killed run
resumes where it stopped (the default study name is derived from the trace
and flags, so the same command resumes the same study)."""

EXIT_SLO_UNMET = 3
"""Exit status when no searched setting meets the SLO target."""


@dataclass(frozen=True)
class TuneOptions:
    """What ``prescaler tune`` was asked for, beyond the simulate flags."""

    target: float = 0.99
    trials: int = 100
    holdout: float = 0.3
    storage: str | None = None
    study: str | None = None
    prometheus: str | None = None
    selector: str = ""
    since: str = "7d"
    step_s: float = 60.0
    save_trace: str | None = None
    prune: str = "pace"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "tune",
        help="search the predictive trigger's settings for the cheapest that meet a TTFT SLO",
        description="Tune prescaler's trigger metadata on a trace (optuna TPE, the SLO as a "
        "constraint), compare with the reactive ScaledObject's best threshold, and print "
        "the metadata block to paste. Out of sample: scored on the held-back end of the trace.",
    )
    p.add_argument(
        "trace", metavar="TRACE", nargs="?", default=None, help="trace (or use --prometheus)"
    )
    add_simulate_arguments(p, trace=False)
    p.add_argument("--target", type=_fraction("--target"), default=0.99,
                   help="SLO attainment to meet, as a fraction of what an idle fleet "
                   "attains (default %(default)s)")  # fmt: skip
    p.add_argument("--trials", type=_int("--trials", 1), default=100,
                   help="trials in the study, all processes together "
                   "(default %(default)s)")  # fmt: skip
    p.add_argument("--holdout", type=_holdout, default=0.3,
                   help="fraction at the end of the trace held back for scoring (default "
                   "%(default)s; 0 tunes and scores on all of it)")  # fmt: skip
    p.add_argument("--storage", default=None,
                   help=f"optuna RDB URL shared by several tune processes (default "
                   f"{DEFAULT_STORAGE})")  # fmt: skip
    p.add_argument("--study", default=None,
                   help="study name (default: derived from the trace and flags)")  # fmt: skip
    p.add_argument("--prometheus", default=None, metavar="URL",
                   help="build the trace from this Prometheus's vLLM metrics")  # fmt: skip
    p.add_argument("--selector", default="",
                   help="label matches for --prometheus, "
                   "e.g. namespace=llm,model_name=m")  # fmt: skip
    p.add_argument("--since", default="7d", help="--prometheus history (default %(default)s)")
    p.add_argument("--step", dest="step_s", type=_finite("--step"), default=60.0,
                   help="--prometheus rate step, s (default %(default)s)")  # fmt: skip
    p.add_argument("--save-trace", default=None, metavar="DIR",
                   help="keep the trace built from --prometheus in DIR")  # fmt: skip
    p.add_argument("--prune", choices=("pace", "exact"), default="pace",
                   help="stop trials that cannot win (exact), or also those well off the "
                   "best's pace at checkpoints (pace, the default)")  # fmt: skip
    p.set_defaults(func=_run)


def _fraction(name: str) -> Any:
    def parse(text: str) -> float:
        value = _finite(name)(text)
        if value > 1.0:
            raise argparse.ArgumentTypeError(f"{name} must lie in (0, 1], got {text}")
        return float(value)

    return parse


def _holdout(text: str) -> float:
    value = _finite("--holdout", 0.0, strict=False)(text)
    if value >= 0.9:
        raise argparse.ArgumentTypeError(f"--holdout must lie in [0, 0.9), got {text}")
    return float(value)


# --------------------------------------------------------------------------
def _run_score(args: tuple[Any, ...]) -> Any:
    """(ScaledObject, workload, profile, config, history) -> its full run's Score."""
    from simulations.tune import score

    so, workload, profile, config, history = args
    return score(so, workload, profile, config, history=history)


def _histories(
    series: DemandSeries | None,
    args: argparse.Namespace,
    tune_part: Workload,
    held: Workload | None,
) -> tuple[DemandHistory | None, DemandHistory | None]:
    """(history before the tuning part, history before the held-back part),
    by ``prescaler simulate``'s rule (:func:`simulations.backfill.window_history`):
    the tuning part has the trace before ``--start`` (none at the trace's
    start); the held-back part has the trace before the cut, the tuning
    part's demand, as the live scaler would have had it. None with
    ``--no-backfill`` (``series`` None)."""
    if series is None:
        return None, None
    from decision.tracker_data import TrackerConfig
    from simulations.backfill import window_history
    from simulations.policies import REFRESH_S

    bin_s = TrackerConfig(refresh_interval_s=REFRESH_S).step_s
    start = float(args.start_s)
    first = window_history(series, start, tune_part, bin_s=bin_s, rate_scale=args.rate_scale)
    rest = None
    if held is not None:
        rest = window_history(
            series, start + tune_part.duration_s, held, bin_s=bin_s, rate_scale=args.rate_scale
        )
    return first, rest


def _history_digest(history: DemandHistory) -> str:
    import hashlib

    h = hashlib.sha256()
    for arr in (history.times_s, history.requests_per_s, history.tokens_per_s):
        h.update(arr.tobytes())
    return h.hexdigest()[:16]


def _history_note(history: DemandHistory | None) -> str:
    if history is None or len(history) == 0:
        return "none"
    span = float(history.times_s[-1] - history.times_s[0]) + (
        float(history.times_s[1] - history.times_s[0]) if len(history) > 1 else 0.0
    )
    return f"{span / 3600:.2f} h"


def _summary(s: Any, tp: int) -> dict[str, Any]:
    from simulations.report import policy_summary
    from simulations.tune import outcome

    return policy_summary(outcome(s), None, tp)


def _digest(workload: Any) -> str:
    import hashlib

    h = hashlib.sha256()
    for arr in (workload.arrival_s, workload.prompt_tokens, workload.output_tokens):
        h.update(arr.tobytes())
    h.update(repr(workload.duration_s).encode())
    return h.hexdigest()[:16]


def _pct(x: float) -> str:
    return f"{100 * x:.2f} %"


def _month(summary: Mapping[str, Any]) -> str:
    v = summary.get("cost_per_month_usd")
    return "-" if v is None else f"${v:,.0f}/month"


def _metadata_block(meta: Mapping[str, str]) -> str:
    """The ``metadata:`` block, every value a double-quoted string (KEDA's
    trigger metadata is a map of strings; JSON quoting is valid YAML)."""
    return "\n".join(["metadata:", *(f"  {k}: {json.dumps(str(meta[k]))}" for k in sorted(meta))])


def tune(args: argparse.Namespace, opts: TuneOptions, out: TextIO | None = None) -> int:
    """Do the whole tune; returns the exit status (0, or EXIT_SLO_UNMET)."""
    out = sys.stdout if out is None else out
    from decision.settings import parse_settings
    from engine.profiles import get_profile
    from forecasting.readers import read_series
    from simulations.scaledobject import load_scaledobject, seeds_reactive
    from simulations.sim_inputs import sim_inputs_from_args
    from simulations.simulation import SimConfig
    from simulations.traffic import TrafficOptions, load_workload
    from simulations.tune import (
        PREDICTIVE_SPACE,
        apply_metadata,
        default_bases,
        reactive_with_threshold,
        search_reactive,
        slo_ceiling,
        split_workload,
    )
    from simulations.tune_study import TuneContext, run_study, study_fingerprint

    wall0 = time.perf_counter()
    if args.static_replicas is not None:
        raise UsageError("--static-replicas does not apply to tune")
    if len(args.scaledobjects) > 1:
        raise UsageError("--scaledobject: tune starts from one ScaledObject, got several")
    profile = get_profile(args.profile)
    trace, tokens_from = args.trace, args.tokens_from
    tmp: tempfile.TemporaryDirectory[str] | None = None
    if opts.prometheus:
        if trace is not None:
            raise UsageError("give TRACE or --prometheus, not both")
        from simulations.fleet_prometheus import fetch_fleet_trace, parse_since, write_fleet_trace
        from simulations.fleet_trace import parse_labels

        fleet = fetch_fleet_trace(
            opts.prometheus,
            parse_labels(opts.selector),
            since_s=parse_since(opts.since),
            end_s=time.time(),
            step_s=opts.step_s,
            seed=args.seed,
        )
        if opts.save_trace:
            directory = Path(opts.save_trace)
        else:
            tmp = tempfile.TemporaryDirectory(prefix="prescaler-fleet-")
            directory = Path(tmp.name)
        counts, tokens = write_fleet_trace(fleet, directory, "fleet")
        trace, tokens_from = str(counts), str(tokens)
        print(f"fleet trace: {fleet.minutes} minutes, {fleet.requests:,.0f} requests "
              f"from {opts.prometheus}", file=out)  # fmt: skip
    elif trace is None:
        raise UsageError("a TRACE (or --prometheus URL) is required")
    try:
        traffic = TrafficOptions(
            rate_scale=args.rate_scale,
            start_s=args.start_s,
            duration_s=args.duration_s,
            seed=args.seed,
            arrivals=args.arrivals,
            cv=args.cv,
            tokens_from=Path(tokens_from) if tokens_from else None,
        )
        workload = load_workload(trace, traffic)
        # the trace's rate curve, for the history each run starts with (read
        # before a --prometheus trace's temporary files go)
        wanted = args.backfill and len(workload) and (args.start_s > 0 or opts.holdout > 0)
        series = read_series(trace) if wanted else None
    finally:
        if tmp is not None:
            tmp.cleanup()
    if len(workload) == 0:
        raise ValueError(f"{trace}: no requests in the selected window")
    tune_part, held = split_workload(workload, opts.holdout)
    if len(tune_part) == 0 or (held is not None and len(held) == 0):
        raise ValueError(f"{trace}: --holdout {opts.holdout:g} leaves a part with no requests")
    tune_history, held_history = _histories(series, args, tune_part, held)
    # the stated bound (--max-replicas), never the peak of the held-back part
    inputs = sim_inputs_from_args(args)
    bound = inputs.max_replicas
    p_base, r_base = default_bases(profile.name, bound)
    if args.scaledobjects:
        p_base = load_scaledobject(args.scaledobjects[0])
        if p_base.trigger.kind != "prescaler":
            raise ValueError(
                f"{args.scaledobjects[0]}: its trigger is not prescaler's external trigger"
            )
        bound = p_base.keda.max_replica_count
        r_base = seeds_reactive(max_replicas=bound)
    space = PREDICTIVE_SPACE
    if args.forecaster:
        p_base = apply_metadata(p_base, {"forecast": args.forecaster})
        space = tuple(p for p in space if p.key != "forecast")
    config = SimConfig(
        slo_ttft_s=args.slo_ttft,
        timeout_s=args.timeout,
        spot=args.spot,
        seed=args.seed,
        scrape_interval_s=args.scrape_interval,
        rate_window_s=args.rate_window,
    )
    config = inputs.apply(config, profile, None)
    ceiling = slo_ceiling(tune_part, profile.name, config.slo_ttft_s)
    target = opts.target * ceiling
    settings_max = p_base.trigger.settings.max_replicas if p_base.trigger.settings else bound
    ctx = TuneContext(
        tune_part, profile.name, config, p_base, target, space,
        max_replicas=min(bound, settings_max), seed=args.seed,
        prune="exact" if opts.prune == "exact" else "pace", history=tune_history,
    )  # fmt: skip
    parts: dict[str, Any] = {
        # the requests themselves, not the path: the same trace at another
        # path (another machine) joins the study, another window does not
        "requests": _digest(workload), "profile": profile.name,
        "config": repr(config), "target": opts.target, "holdout": opts.holdout,
        "base": sorted(p_base.trigger.metadata.items()), "space": repr(space),
    }  # fmt: skip
    if tune_history is not None:
        # trials with a backfilled tracker do not compare with trials without
        parts["history"] = _history_digest(tune_history)
    fingerprint = study_fingerprint(parts)
    storage = opts.storage or DEFAULT_STORAGE
    study_name = opts.study or f"prescaler-tune-{fingerprint}"
    print(f"{workload.name}: tuning on {len(tune_part):,} requests "
          f"({tune_part.duration_s / 3600:.2f} h), holding back "
          f"{0 if held is None else len(held):,} ({opts.holdout:.0%}); "
          f"study {study_name!r} in {storage}", file=out)  # fmt: skip
    print(f"tracker history: {_history_note(tune_history)} before the tuning part, "
          f"{_history_note(held_history) if held is not None else '-'} before the held-back "
          f"part{' (--no-backfill)' if not args.backfill else ''}", file=out)  # fmt: skip
    print(f"SLO: TTFT <= {config.slo_ttft_s:g} s for {_pct(target)} of requests "
          f"({opts.target:g} x the {_pct(ceiling)} an idle fleet attains)", file=out)  # fmt: skip
    # the reactive bisection runs beside the study, in its own process
    import multiprocessing

    side = multiprocessing.get_context().Pool(1)
    try:
        job = side.apply_async(search_reactive, (r_base, tune_part, profile.name, config, target))
        result = run_study(
            ctx, storage=storage, study_name=study_name, n_trials=opts.trials,
            jobs=args.jobs, fingerprint=fingerprint,
            worker=f"{socket.gethostname()}:{os.getpid()}",
        )  # fmt: skip
        trial_s = (time.perf_counter() - wall0) / max(1, len(result.trials))
        reactive = job.get()
        side.close()
    except BaseException:
        side.terminate()
        raise
    finally:
        side.join()
    best = result.best
    if best is None:
        c = result.closest
        if c is None:
            print(f"no setting met the SLO target {_pct(target)}: no trial completed; "
                  "lower --target or raise --slo-ttft", file=out)  # fmt: skip
        else:
            months = tune_part.duration_s / 3600 / 730
            reached = (
                f"was {_pct(c.attainment)} at ${c.cost_usd / months:,.0f}/month"
                if c.finished
                else f"was on course for {_pct(c.attainment)} (stopped early: {c.stopped})"
            )
            print(f"no setting met the SLO target {_pct(target)}: the best attainment reached "
                  f"{reached} "
                  f"(trial {c.number}: {json.dumps(dict(c.metadata), sort_keys=True)}); "
                  f"the reactive threshold {reactive.threshold:g} reached "
                  f"{_pct(reactive.score.attainment)}. Lower --target, raise --slo-ttft or "
                  "maxReplicaCount", file=out)  # fmt: skip
        return EXIT_SLO_UNMET
    chosen = apply_metadata(p_base, best.metadata)
    meta = dict(chosen.trigger.metadata)
    parse_settings(meta)  # the block printed is one the live scaler accepts
    r_so = reactive_with_threshold(r_base, reactive.threshold)
    runs: list[tuple[Any, ...]] = [(chosen, tune_part, profile.name, config, tune_history)]
    if held is not None:
        runs += [
            (chosen, held, profile.name, config, held_history),
            (r_so, held, profile.name, config, None),
        ]
    if args.jobs > 1 and len(runs) > 1:
        with ProcessPoolExecutor(max_workers=min(args.jobs, len(runs))) as pool:
            scores = list(pool.map(_run_score, runs))
    else:
        scores = [_run_score(r) for r in runs]
    tp = profile.tp
    p_tuned = _summary(scores[0], tp)
    r_tuned = _summary(reactive.score, tp)
    p_hold = _summary(scores[1], tp) if held is not None else p_tuned
    r_hold = _summary(scores[2], tp) if held is not None else r_tuned
    held_target = (
        target if held is None else opts.target * slo_ceiling(held, profile.name, config.slo_ttft_s)
    )
    doc = {
        "trace": workload.name,
        "slo_ttft_s": config.slo_ttft_s,
        "target": opts.target,
        "trials": len(result.trials),
        "predictive": {"metadata": meta, "tuned": p_tuned, "holdout": p_hold},
        "reactive": {"threshold": reactive.threshold, "tuned": r_tuned, "holdout": r_hold},
        # the attainment ``target`` stands for on each part (x its idle ceiling)
        "target_attainment": {"tuned": target, "holdout": held_target},
    }
    _print_report(out, doc, best.number, reactive.met, trial_s, (target, held_target))
    if args.json_path:
        Path(args.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_path).write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    if args.plot_path:
        from simulations.tune_plot import plot_trials

        months = tune_part.duration_s / 3600 / 730
        path = plot_trials(
            result.trials, best.number, target, months, args.plot_path,
            reactive=(reactive.score.attainment, reactive.score.cost_usd, reactive.threshold),
        )  # fmt: skip
        print(f"plot: {path}", file=out)
    return 0


def _print_report(
    out: TextIO,
    doc: Mapping[str, Any],
    best: int,
    reactive_met: bool,
    trial_s: float,
    targets: tuple[float, float],
) -> None:
    p, r = doc["predictive"], doc["reactive"]
    print(f"\n{doc['trials']} trials ({trial_s:.1f} s of wall time per trial, all "
          f"processes together); chosen: trial {best}", file=out)  # fmt: skip
    rows = [
        ("", "tuning part", "held back"),
        (f"SLO target ({doc['target']:g} x the idle fleet's)", _pct(targets[0]), _pct(targets[1])),
        ("predictive SLO attainment",
         _pct(p["tuned"]["slo_attainment"]), _pct(p["holdout"]["slo_attainment"])),
        ("predictive cost", _month(p["tuned"]), _month(p["holdout"])),
        (f"reactive (threshold {r['threshold']:g}) SLO attainment",
         _pct(r["tuned"]["slo_attainment"]), _pct(r["holdout"]["slo_attainment"])),
        ("reactive cost", _month(r["tuned"]), _month(r["holdout"])),
    ]  # fmt: skip
    w = max(len(a) for a, _, _ in rows)
    for a, b, c in rows:
        print(f"  {a:<{w}}  {b:>16}  {c:>16}", file=out)
    if not reactive_met:
        print("  (no reactive threshold met the SLO target: the lowest tried is shown)", file=out)
    print("\npaste into the ScaledObject's prescaler trigger:\n", file=out)
    print(_metadata_block(p["metadata"]), file=out)


def options_from(args: argparse.Namespace) -> TuneOptions:
    return TuneOptions(
        target=args.target,
        trials=args.trials,
        holdout=args.holdout,
        storage=args.storage,
        study=args.study,
        prometheus=args.prometheus,
        selector=args.selector,
        since=args.since,
        step_s=args.step_s,
        save_trace=args.save_trace,
        prune=args.prune,
    )


def _run(args: argparse.Namespace) -> int:
    try:
        return tune(args, options_from(args))
    except UsageError as exc:
        print(f"prescaler tune: {exc}", file=sys.stderr)
        return 2
    except (ValueError, KeyError, OSError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"prescaler tune: {msg}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m simulations.tune_cli`` (the same as ``prescaler tune``)."""
    return run_subcommand(register, "tune", argv)


if __name__ == "__main__":
    sys.exit(main())
