"""``prescaler tune``: the cheapest ScaledObject settings that meet a TTFT SLO,
for prescaler's trigger and for plain KEDA alike, as a frontier.

A thin command around :func:`simulations.tune.run.tune`: its own flags (the
replay flags are ``simulate``'s, defined once in
:func:`simulations.cli.add_replay_arguments`), validated here; the report,
the ``--json`` document, the plot and the exit status. The ScaledObject it
prints is complete and paste-ready (the addresses and model it was given,
``minReplicaCount`` agreeing with the trigger's ``minReplicas``), or it says
in words what is missing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from simulations.cli import UsageError, add_replay_arguments, run_subcommand
from simulations.cli_messages import in_flags
from simulations.cli_types import count_flag, number_flag
from simulations.sim_inputs import sim_inputs_from_args
from simulations.tune.report import paste_block, print_report, report_document
from simulations.tune.run import DEFAULT_TARGET, TuneRequest, default_storage, tune
from simulations.tune.sides import CRON_REPLICAS, CRON_SIDES, DEFAULT_SIDES, SIDES, WrittenCron
from simulations.tune.storage import GRACE_S, MIN_GRACE_S

__all__ = ["EXIT_SLO_UNMET", "register", "report_document", "request_from", "run"]

EXIT_SLO_UNMET = 3
"""Exit status when no searched prescaler setting meets the SLO target."""

_EXTRA_SIDES = tuple(n for n in SIDES if n not in DEFAULT_SIDES)
"""The sides a plain ``prescaler tune`` leaves out (each costs a study)."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "tune",
        help="tune prescaler's trigger and plain KEDA ScaledObjects under a TTFT SLO",
        description="Tune ScaledObjects on a trace with the same optimizer (optuna TPE, the "
        "SLO a constraint), the same trial budget and the same protocol for every side: "
        "prescaler's trigger, KEDA's queue-length trigger, and your own --scaledobject. "
        "Tuned on the first part of the trace, scored on the held-back rest; prints the "
        "cost-vs-attainment frontier per side and the ScaledObject to paste.",
    )
    p.add_argument(
        "trace", metavar="TRACE", nargs="?", default=None, help="trace (or use --prometheus)"
    )
    add_replay_arguments(p)
    p.add_argument("--plot", dest="plot_path", default=None, metavar="FILE",
                   help="write the frontier PNG here (every side, held-back part) and the "
                   "trials PNG beside it as NAME-trials.png; written on every exit")  # fmt: skip
    p.add_argument("--jobs", type=count_flag("--jobs", 1), default=1,
                   help="processes sharing each side's study (trials run in parallel; "
                   "the worker seeds follow from --seed)")  # fmt: skip
    p.add_argument("--scaledobject", default=None, metavar="FILE",
                   help="your ScaledObject: one with prescaler's trigger is where the "
                   "prescaler side starts (cron or prometheus triggers beside it are tuned "
                   "with it); a prometheus trigger one is tuned as its own side")  # fmt: skip
    p.add_argument("--target", type=_fraction("--target"), default=DEFAULT_TARGET,
                   help="SLO attainment to meet, as a fraction of what an idle fleet "
                   "attains (default %(default)s)")  # fmt: skip
    p.add_argument("--margin", type=number_flag("--margin", 0.0, strict=False), default=0.0,
                   metavar="POINTS",
                   help="points of attainment the chosen setting must clear the target by "
                   "on the tuning part, so it holds on traffic it did not see (default "
                   "%(default)s)")  # fmt: skip
    p.add_argument("--holdout-seeds", type=count_flag("--holdout-seeds", 1), default=3,
                   metavar="N",
                   help="arrival seeds (--seed, --seed + 1, ...) each side's chosen setting "
                   "is scored under on the held-back part (default %(default)s)")  # fmt: skip
    p.add_argument("--trials", type=count_flag("--trials", 1), default=100,
                   help="trials in each side's study, all processes together "
                   "(default %(default)s)")  # fmt: skip
    p.add_argument("--holdout", type=_holdout, default=0.3,
                   help="fraction at the end of the trace held back for scoring (default "
                   "%(default)s; 0 tunes and scores on all of it)")  # fmt: skip
    p.add_argument("--short-history", choices=("refuse", "warn"), default="refuse",
                   help="a part under 5 minutes: refuse (exit 2, the default) or warn")  # fmt: skip
    p.add_argument("--storage", default=None,
                   help="optuna RDB URL shared by several tune processes (default: "
                   "a SQLite file in ~/.cache/prescaler)")  # fmt: skip
    p.add_argument("--study", default=None,
                   help="study name prefix (default: from the trace and flags)")  # fmt: skip
    p.add_argument("--trial-grace", type=count_flag("--trial-grace", MIN_GRACE_S),
                   default=GRACE_S, metavar="SECONDS",
                   help="a trial whose heartbeat is silent this long (its process was "
                   "killed) is failed and run again (default %(default)s)")  # fmt: skip
    p.add_argument("--prometheus", default=None, metavar="URL",
                   help="build the trace from this Prometheus's vLLM metrics (and write it "
                   "as the trigger's prometheusAddress)")  # fmt: skip
    p.add_argument("--selector", default="",
                   help="label matches for --prometheus, "
                   "e.g. namespace=llm,model_name=m")  # fmt: skip
    p.add_argument("--since", default="7d", help="--prometheus history (default %(default)s)")
    p.add_argument("--step", dest="step_s", type=number_flag("--step"), default=60.0,
                   help="--prometheus rate step, s (default %(default)s)")  # fmt: skip
    p.add_argument("--save-trace", default=None, metavar="DIR",
                   help="keep the trace built from --prometheus in DIR")  # fmt: skip
    p.add_argument("--prune", choices=("pace", "exact"), default="pace",
                   help="stop trials that cannot win (exact), or also those well off the "
                   "best's pace at checkpoints (pace, the default)")  # fmt: skip
    p.add_argument("--prometheus-address", default=None, metavar="URL",
                   help="the trigger's prometheusAddress (default: --prometheus)")  # fmt: skip
    p.add_argument("--model", default=None,
                   help="the trigger's model (default: model_name in --selector)")  # fmt: skip
    p.add_argument("--scaler-address", default=None, metavar="ADDR",
                   help="the trigger's scalerAddress (default: --scaledobject's)")  # fmt: skip
    p.add_argument("--sides", dest="only_sides", type=_any_sides, default=(),
                   metavar="NAME[,NAME...]",
                   help="tune exactly these sides, each with its own study: "
                   f"{', '.join(SIDES)} (user: a prometheus --scaledobject's own; "
                   "default: prescaler, keda-queue, keda-queue-kv and user)")  # fmt: skip
    p.add_argument("--name", default=None, metavar="NAME",
                   help="the printed ScaledObject's metadata.name (default: "
                   "--scaledobject's, else listed under 'still to set')")  # fmt: skip
    p.add_argument("--namespace", default=None, metavar="NS",
                   help="its metadata.namespace, the vLLM Deployment's (default: "
                   "--scaledobject's)")  # fmt: skip
    p.add_argument("--target-name", default=None, metavar="NAME",
                   help="its scaleTargetRef.name, the vLLM Deployment it scales (default: "
                   "--scaledobject's)")  # fmt: skip
    p.add_argument("--add-sides", type=_side_list, default=(), metavar="NAME[,NAME...]",
                   help="also tune these sides, each with its own study: "
                   f"{', '.join(_EXTRA_SIDES)} (docs/tuning.md, 'The sides')")  # fmt: skip
    p.add_argument("--cron-window", type=_cron_window, default=None,
                   metavar="HH:MM-HH:MM[/N]",
                   help="the cron sides' window as your team writes it, UTC, holding N "
                   "replicas (default 2 replicas 08:00-18:00); its first trial")  # fmt: skip
    p.set_defaults(func=_run)


def _side_list(text: str) -> tuple[str, ...]:
    """``--add-sides``: names beyond the default family, each once."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    already = [n for n in names if n in DEFAULT_SIDES]
    if already:
        raise argparse.ArgumentTypeError(
            f"{', '.join(already)} already tuned by default (add: {', '.join(_EXTRA_SIDES)})"
        )
    unknown = [n for n in names if n not in _EXTRA_SIDES]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown side(s) {', '.join(unknown) or repr(text)} (known: {', '.join(_EXTRA_SIDES)})"
        )
    return names


def _any_sides(text: str) -> tuple[str, ...]:
    """``--sides``: any of the known sides, each once, in the order given."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    unknown = [n for n in names if n not in SIDES]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown side(s) {', '.join(unknown) or repr(text)} (known: {', '.join(SIDES)})"
        )
    return names


_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})$")
"""A time of day as ``--cron-window`` takes it."""


def _minute_of_day(text: str, whole: str) -> int:
    """``HH:MM`` (00:00 - 24:00) as a minute of the day; ``whole`` names the flag's value."""
    m = _CLOCK.match(text.strip())
    hour, minute = (int(m.group(1)), int(m.group(2))) if m else (-1, -1)
    if not (hour >= 0 and 0 <= minute <= 59 and hour * 60 + minute <= 1440):
        raise argparse.ArgumentTypeError(
            f"{text!r} in {whole!r} is not a time of day HH:MM (00:00 - 24:00)"
        )
    return hour * 60 + minute


def _cron_window(text: str) -> WrittenCron:
    """``--cron-window START-END[/REPLICAS]``, UTC: the window a team writes."""
    hours, _, replicas = text.partition("/")
    start, sep, end = hours.partition("-")
    if not sep:
        raise argparse.ArgumentTypeError(
            f"want START-END[/REPLICAS], e.g. 07:45-17:30/2, got {text!r}"
        )
    count = replicas.strip() or CRON_REPLICAS
    if not count.isdigit():
        raise argparse.ArgumentTypeError(
            f"replicas must be a whole number >= 1, got {count!r} in {text!r}"
        )
    try:
        return WrittenCron(_minute_of_day(start, text), _minute_of_day(end, text), int(count))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


def _fraction(name: str) -> Any:
    def parse(text: str) -> float:
        value = number_flag(name)(text)
        if value > 1.0:
            raise argparse.ArgumentTypeError(f"{name} must lie in (0, 1], got {text}")
        return float(value)

    return parse


def _holdout(text: str) -> float:
    value = number_flag("--holdout", 0.0, strict=False)(text)
    if value >= 0.9:
        raise argparse.ArgumentTypeError(f"--holdout must lie in [0, 0.9), got {text}")
    return float(value)


def request_from(args: argparse.Namespace) -> TuneRequest:
    """The typed request for the parsed flags."""
    if args.only_sides and args.add_sides:
        raise UsageError(
            "give --sides (exactly these sides) or --add-sides (these beside the default "
            "ones), not both"
        )
    if "user" in args.only_sides and not args.scaledobject:
        raise UsageError("--sides user tunes your --scaledobject FILE as written: give it")
    named = set(args.add_sides) | set(args.only_sides)
    if args.cron_window is not None and not named & set(CRON_SIDES):
        raise UsageError(
            f"--cron-window writes the window of {', '.join(CRON_SIDES)}: name one in "
            "--add-sides or --sides (a cron trigger in your --scaledobject is tuned from "
            "what it says)"
        )
    return TuneRequest(
        trace=args.trace,
        profile=args.profile,
        slo_ttft_s=args.slo_ttft,
        timeout_s=args.timeout,
        target=args.target,
        margin=args.margin,
        holdout_seeds=args.holdout_seeds,
        trials=args.trials,
        holdout=args.holdout,
        jobs=args.jobs,
        seed=args.seed,
        tokens_from=args.tokens_from,
        rate_scale=args.rate_scale,
        start_s=args.start_s,
        duration_s=args.duration_s,
        arrivals=args.arrivals,
        cv=args.cv,
        forecaster=args.forecaster,
        spot=args.spot,
        scrape_interval_s=args.scrape_interval,
        rate_window_s=args.rate_window,
        backfill=args.backfill,
        scaledobject=args.scaledobject,
        storage=args.storage or default_storage(),
        study=args.study,
        trial_grace_s=args.trial_grace,
        prune=args.prune,
        prometheus=args.prometheus,
        selector=args.selector,
        since=args.since,
        step_s=args.step_s,
        save_trace=args.save_trace,
        short_history=args.short_history,
        model=args.model,
        scaler_address=args.scaler_address,
        prometheus_address=args.prometheus_address,
        inputs=sim_inputs_from_args(args),
        sides=args.only_sides or ((*DEFAULT_SIDES, *args.add_sides) if args.add_sides else ()),
        name=args.name,
        namespace=args.namespace,
        target_name=args.target_name,
        cron_window=args.cron_window,
    )


def run(request: TuneRequest, json_path: str | None, plot_path: str | None, out: TextIO) -> int:
    """Tune, report, write; the exit status (0, or :data:`EXIT_SLO_UNMET`;
    130 after Ctrl-C, the trials so far written)."""
    from simulations.tune.interrupted import TuneInterrupted, so_far_line, write_so_far
    from simulations.tune.interrupts import EXIT_INTERRUPTED

    try:
        result = tune(request, out)
    except TuneInterrupted as stop:
        written = write_so_far(stop.so_far, json_path, plot_path)
        print(so_far_line(stop.so_far, written, "prescaler tune"), file=sys.stderr)
        return EXIT_INTERRUPTED
    doc = report_document(result)
    print_report(out, result, doc)
    _remind_unchecked(request.profile)
    p = result.side("prescaler")
    # prescaler's side decides the exit status when it was tuned, else any side
    met = (p is not None and p.study.best is not None) or (
        p is None and any(s.study.best is not None for s in result.sides)
    )
    if any(s.manifest is not None for s in result.sides):
        paste_block(request, result, out)
    if plot_path:
        from simulations.tune.plot import plot_all_trials, plot_frontier

        path = plot_frontier(result, doc, plot_path)
        trials_path = Path(plot_path).with_name(Path(plot_path).stem + "-trials.png")
        plot_all_trials(
            [(s.side.name, s.study.trials, s.study.best.number if s.study.best else None)
             for s in result.sides],
            result.target_attainment[0], result.months[0], trials_path,
        )  # fmt: skip
        print(f"plots: {path}, {trials_path}", file=out)
    if not met:
        return EXIT_SLO_UNMET
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    return 0


def _remind_unchecked(given: str) -> None:
    """A line on stderr when the profile under the result was never checked."""
    from engine.profile_check import check_reminder
    from engine.profiles import get_profile

    line = check_reminder(get_profile(given), given)
    if line:
        print(line, file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    try:
        return run(request_from(args), args.json_path, args.plot_path, sys.stdout)
    except (UsageError, ValueError, KeyError, OSError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"prescaler tune: {in_flags(str(msg))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # before any study began, or while writing the report
        print("prescaler tune: interrupted before a trial ran or while writing the "
              "report; run the same command again to resume", file=sys.stderr)  # fmt: skip
        return 130


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m simulations.tune.cli`` (the same as ``prescaler tune``)."""
    return run_subcommand(register, "tune", argv)


if __name__ == "__main__":
    sys.exit(main())
