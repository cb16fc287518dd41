"""``prescaler tune``: the cheapest ScaledObject settings that meet a TTFT SLO,
for prescaler's trigger and for plain KEDA alike, as a frontier.

A thin command around :func:`simulations.tune.run.tune`: flags (and
``--config``) in, a validated request out; then it prints, writes the
``--json`` document and the plots, and picks the exit status.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import yaml

from engine.profiles import get_profile
from simulations.cli import UsageError, add_replay_arguments, replay_spec_from, run_subcommand
from simulations.cli_messages import in_flags, message_of
from simulations.cli_types import count_flag, fraction_flag, number_flag
from simulations.tune.interrupted import TuneInterrupted, so_far_line, write_so_far
from simulations.tune.interrupts import EXIT_INTERRUPTED
from simulations.tune.plot import plot_all_trials, plot_frontier
from simulations.tune.report import paste_block, print_event, print_report, report_document
from simulations.tune.request import (
    CRON_REPLICAS,
    DEFAULT_TARGET,
    SCREEN_REFIT_S,
    PasteSpec,
    Protocol,
    SideChoice,
    StudySpec,
    TraceSource,
    TuneRequest,
    WrittenCron,
)
from simulations.tune.run import default_storage, tune
from simulations.tune.sides import CRON_SIDES, DEFAULT_SIDES, SIDES
from simulations.tune.storage import GRACE_S, MIN_GRACE_S, StorageUnavailable

__all__ = [
    "CONFIG_KEYS",
    "EXIT_SLO_UNMET",
    "JOB_INDEX_ENV",
    "ConfigError",
    "register",
    "report_document",
    "request_from",
    "run",
    "with_config",
    "worker_index",
]

EXIT_SLO_UNMET = 3
"""Exit status when no searched prescaler setting meets the SLO target."""

_EXTRA_SIDES = tuple(n for n in SIDES if n not in DEFAULT_SIDES)
"""The sides a plain ``prescaler tune`` leaves out (each costs a study)."""

JOB_INDEX_ENV = "JOB_COMPLETION_INDEX"
"""The pod's index Kubernetes sets in an Indexed Job: ``--worker-index``'s default."""


CONFIG_KEYS = (
    "holdout-seeds", "margin", "short-history", "storage", "study", "trial-grace", "prune",
    "screen-refit",
    "selector", "since", "step", "save-trace", "prometheus-address", "model",
    "scaler-address", "name", "namespace", "target-name", "add-sides", "cron-window",
    "tokens-from", "arrivals", "cv", "timeout", "scrape-interval", "rate-window", "refit-seconds",
)  # fmt: skip
"""The flags a ``--config`` file may set, by name without the dashes: the
rarely changed half; a flag on the command line wins over the file."""


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
    known: dict[str, argparse.Action] = {}
    noting = _noting_store(known)
    # argparse's action registry makes every plain store flag (the replay's
    # too) a NotingStore: _run gets no argv to parse again for what was given
    p.register("action", None, noting)
    p.register("action", "store", noting)
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
    p.add_argument("--target", type=fraction_flag("--target"), default=DEFAULT_TARGET,
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
    p.add_argument("--worker-index", type=count_flag("--worker-index", 0), default=None,
                   metavar="N",
                   help="this command's place among commands started together on one "
                   "--storage/--study (a pod of an Indexed Job): its sampler seeds are "
                   f"offset by it so they draw different settings (default: ${JOB_INDEX_ENV}, "
                   "which Kubernetes sets in an Indexed Job, else 0)")  # fmt: skip
    p.add_argument("--screen-refit", type=number_flag("--screen-refit", 0.0, strict=False),
                   default=SCREEN_REFIT_S, metavar="SECONDS",
                   help="the prescaler side's trials refit their forecaster this often, at "
                   "most 1800 (cheaper than the scaler's own); the chosen setting is "
                   "confirmed at --refit-seconds on the tuning part (default %(default)g; "
                   "0, or --refit-seconds or less, runs every trial at that)")  # fmt: skip
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
    p.add_argument("--config", dest="config_path", default=None, metavar="FILE",
                   help="a YAML mapping of flags to values (names without the dashes): "
                   f"{', '.join(CONFIG_KEYS)}; a flag given here wins")  # fmt: skip
    flags = {key: known[f"--{key}"] for key in CONFIG_KEYS}
    p.set_defaults(func=_run, config_flags=flags, given_flags=frozenset())


def _noting_store(known: dict[str, argparse.Action]) -> type[argparse.Action]:
    """argparse's plain store action that also notes, on the namespace's
    ``given_flags``, that its flag was on the command line (so a ``--config``
    file's value yields to it, even to a value equal to the default); each
    action made is filed in ``known`` under its option strings."""

    class NotingStore(argparse.Action):
        def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
            super().__init__(option_strings, dest, **kwargs)
            known.update(dict.fromkeys(option_strings, self))

        def __call__(
            self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
            values: Any, option_string: str | None = None,
        ) -> None:  # fmt: skip
            setattr(namespace, self.dest, values)
            namespace.given_flags = getattr(namespace, "given_flags", frozenset()) | {self.dest}

    return NotingStore


class ConfigError(UsageError):
    """A ``--config`` file's error: one line naming the file (and the key),
    printed in the file's own words (its keys are not rewritten as flags)."""


_NULL_TAG = "tag:yaml.org,2002:null"


def _config_entries(path: str) -> list[tuple[str, yaml.Node]]:
    """The file's top-level (key, value node) pairs, in order. Composed, not
    loaded: a scalar's text stays as written (``0123``, ``no``, ``1e3``)
    for its flag's own parser, while a null is still told from a string."""
    try:
        root = yaml.compose(Path(path).read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except OSError as exc:
        raise ConfigError(f"--config {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"--config {path}: not UTF-8 text ({exc.reason})") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = " ".join(str(exc.problem or exc.context or "not YAML").split())
        raise ConfigError(f"--config {path}{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--config {path}: {' '.join(str(exc).split())}") from None
    if root is None or (isinstance(root, yaml.ScalarNode) and root.tag == _NULL_TAG):
        return []
    if not isinstance(root, yaml.MappingNode):
        raise ConfigError(f"--config {path}: want a mapping of flag names to values")
    entries: list[tuple[str, yaml.Node]] = []
    for key_node, value_node in root.value:
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        if not isinstance(key, str):
            line = key_node.start_mark.line + 1
            raise ConfigError(f"--config {path}:{line}: a key must be a flag name")
        if any(key == k for k, _ in entries):
            line = key_node.start_mark.line + 1
            raise ConfigError(f"--config {path}:{line}: {key} is given twice")
        entries.append((key, value_node))
    return entries


def _config_text(path: str, key: str, node: yaml.Node) -> str:
    """The value node as the flag's text: a scalar as written; a list of
    scalars (``add-sides: [a, b]``) as the flag's ``a,b``."""
    where = f"--config {path}:{node.start_mark.line + 1}: {key}"
    if isinstance(node, yaml.ScalarNode):
        if node.tag == _NULL_TAG:
            raise ConfigError(f"{where}: no value (null): give one, or leave the key out")
        return str(node.value)
    if isinstance(node, yaml.SequenceNode) and key == "add-sides":
        items = node.value
        if not all(isinstance(n, yaml.ScalarNode) and n.tag != _NULL_TAG for n in items):
            raise ConfigError(f"{where}: want a list of side names")
        return ",".join(str(n.value) for n in items)
    kind = "a list" if isinstance(node, yaml.SequenceNode) else "a mapping"
    raise ConfigError(f"{where}: {kind} where one value is wanted")


def with_config(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with the ``--config`` file's values for the flags not given
    on the command line, each read by its flag's own parser; an unknown key
    or a bad value is a :class:`ConfigError` naming the file and the key.
    Sides chosen on the command line win whole: the file's ``add-sides``
    yields to ``--sides``, its ``cron-window`` (said on stderr) to sides
    without a cron one."""
    if not args.config_path:
        return args
    path = args.config_path
    merged = argparse.Namespace(**vars(args))
    from_file: set[str] = set()
    for key, node in _config_entries(path):
        action = args.config_flags.get(key)
        if action is None:
            known = ", ".join(CONFIG_KEYS)
            raise ConfigError(f"--config {path}: unknown key {key!r} (known: {known})")
        if action.dest in args.given_flags:
            continue
        text = _config_text(path, key, node)
        try:
            parsed = action.type(text) if action.type is not None else text
        except (argparse.ArgumentTypeError, ValueError) as exc:
            raise ConfigError(f"--config {path}: {key}: {exc}") from None
        if action.choices is not None and parsed not in action.choices:
            raise ConfigError(
                f"--config {path}: {key}: {text!r} is not one of "
                f"{', '.join(map(str, action.choices))}"
            )
        setattr(merged, action.dest, parsed)
        from_file.add(action.dest)
    given = args.given_flags
    if "add_sides" in from_file and "only_sides" in given:
        merged.add_sides = args.add_sides  # --sides names exactly the sides to tune
    named = set(merged.add_sides) | set(merged.only_sides)
    if "cron_window" in from_file and not named & set(CRON_SIDES):
        if given & {"only_sides", "add_sides"}:
            merged.cron_window = args.cron_window  # the sides chosen have no cron one
            print(
                f"prescaler tune: --config {path}: cron-window ignored: the sides named "
                f"on the command line include none of {', '.join(CRON_SIDES)}",
                file=sys.stderr,
            )
        else:
            raise ConfigError(
                f"--config {path}: cron-window writes the window of {', '.join(CRON_SIDES)}: "
                "name one in the file's add-sides, or in --add-sides or --sides"
            )
    return merged


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
        replay=replay_spec_from(args),
        source=TraceSource(
            trace=args.trace, prometheus=args.prometheus, selector=args.selector,
            since=args.since, step_s=args.step_s, save_trace=args.save_trace,
        ),
        protocol=Protocol(
            target=args.target, margin=args.margin, holdout=args.holdout,
            holdout_seeds=args.holdout_seeds, short_history=args.short_history,
        ),
        study=StudySpec(
            trials=args.trials, jobs=args.jobs, storage=args.storage or default_storage(),
            study=args.study, trial_grace_s=args.trial_grace, prune=args.prune,
            screen_refit_s=args.screen_refit,
            worker_index=worker_index(args.worker_index),
        ),
        paste=PasteSpec(
            model=args.model, scaler_address=args.scaler_address,
            prometheus_address=args.prometheus_address, name=args.name,
            namespace=args.namespace, target_name=args.target_name,
        ),
        choice=SideChoice(
            sides=args.only_sides or ((*DEFAULT_SIDES, *args.add_sides) if args.add_sides else ()),
            scaledobject=args.scaledobject,
            cron_window=args.cron_window,
        ),
    )  # fmt: skip


def worker_index(given: int | None) -> int:
    """``--worker-index`` as given, else the Indexed Job's pod index
    (:data:`JOB_INDEX_ENV`), else 0 (a lone command)."""
    if given is not None:
        return given
    raw = os.environ.get(JOB_INDEX_ENV, "").strip()
    if not raw:
        return 0
    try:
        index = int(raw)
    except ValueError:
        raise UsageError(f"${JOB_INDEX_ENV} is {raw!r}: want a whole number >= 0") from None
    if index < 0:
        raise UsageError(f"${JOB_INDEX_ENV} is {raw!r}: want a whole number >= 0")
    return index


def run(request: TuneRequest, json_path: str | None, plot_path: str | None, out: TextIO) -> int:
    """Tune, report, write; the exit status (0, or :data:`EXIT_SLO_UNMET`;
    130 after Ctrl-C, the trials so far written)."""
    try:
        result = tune(request, lambda event: print_event(event, out))
    except TuneInterrupted as stop:
        written = write_so_far(stop.so_far, json_path, plot_path)
        print(so_far_line(stop.so_far, written, "prescaler tune"), file=sys.stderr)
        return EXIT_INTERRUPTED
    doc = report_document(result)
    print_report(out, result, doc)
    _remind_unchecked(request.replay.profile)
    p = result.side("prescaler")
    # prescaler's side decides the exit status when it was tuned, else any side
    met = (p is not None and p.study.best is not None) or (
        p is None and any(s.study.best is not None for s in result.sides)
    )
    if any(s.manifest is not None for s in result.sides):
        paste_block(request, result, out)
    if plot_path:
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
    # heavy: profile_check loads scipy.optimize (a third of a second), and
    # only a finished tune says this
    from engine.profile_check import check_reminder

    line = check_reminder(get_profile(given), given)
    if line:
        print(line, file=sys.stderr)


def _run(args: argparse.Namespace) -> int:
    try:
        return run(request_from(with_config(args)), args.json_path, args.plot_path, sys.stdout)
    except (ConfigError, StorageUnavailable) as exc:  # already one line, in its own words
        print(f"prescaler tune: {exc}", file=sys.stderr)
        return 2
    except (UsageError, ValueError, KeyError, OSError) as exc:
        print(f"prescaler tune: {in_flags(message_of(exc))}", file=sys.stderr)
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
