"""``prescaler simulate``: replay a trace under several scaling policies and compare them.

Thin: flags are validated here (NaN, infinities and negatives are usage
errors, bad input is a one-line error), then :func:`simulate` does the work
and is what ``prescaler demo`` calls too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from decision.tracker_data import TrackerConfig
from engine.profiles import use_profile
from simulations.autoscaling.scaledobject import load_scaledobject
from simulations.cli_messages import in_flags, message_of
from simulations.cli_types import count_flag, fraction_flag, number_flag, window_flag
from simulations.lead_time import with_startup
from simulations.policies import (
    PolicySpec,
    predictive_spec,
    reactive_spec,
    scaledobject_spec,
    with_history,
)
from simulations.replay_spec import ReplaySpec
from simulations.report import plot, summary, table
from simulations.runner import STATIC_SLO_TARGET, run_policies
from simulations.sim_inputs import (
    SimInputs,
    add_sim_input_flags,
    sim_inputs_from_args,
    window_start,
)
from simulations.sim_types import replay_config
from simulations.traffic import load_workload

__all__ = [
    "DEFAULT_POLICIES",
    "DEFAULT_PROFILE",
    "SimulateOptions",
    "add_replay_arguments",
    "add_simulate_arguments",
    "add_window_arguments",
    "register",
    "replay_spec_from",
    "simulate",
    "window_options",
]

DEFAULT_POLICIES = ("static", "reactive", "predictive", "oracle", "hindsight")
DEFAULT_PROFILE = "llama-3-8b@g5.xlarge"
_BUILTIN = frozenset(DEFAULT_POLICIES)


class UsageError(ValueError):
    """A flag value that makes no sense (exit status 2)."""


@dataclass(frozen=True, kw_only=True)
class SimulateOptions(ReplaySpec):
    """Everything ``prescaler simulate`` was asked for: the replay
    (:class:`ReplaySpec`'s fields and defaults, the profile defaulted) and its own."""

    profile: str = DEFAULT_PROFILE
    trace: str
    policies: tuple[str, ...] = DEFAULT_POLICIES
    json_path: str | None = None
    plot_path: str | None = None
    jobs: int = 1
    scaledobjects: tuple[str, ...] = ()
    static_replicas: int | None = None
    target: float | None = None
    """The attainment the hindsight schedule meets, as a fraction of what an
    idle fleet attains (None: ``tune``'s default, ``DEFAULT_TARGET``)."""
    quiet: bool = False
    prometheus_outage: tuple[float, float] | None = None
    """Prometheus down over ``[start, end)`` seconds of the window (``SimConfig``)."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="replay a trace under static/reactive/predictive/oracle/hindsight scaling and compare",
        description="Replay a request trace through emulated vLLM replicas, a Karpenter-like "
        "cluster and KEDA + HPA, under each policy; print a comparison table.",
    )
    add_simulate_arguments(p)
    p.set_defaults(func=_run)


def add_simulate_arguments(p: argparse.ArgumentParser, *, trace: bool = True) -> None:
    """``prescaler simulate``'s flags: the replay flags it shares with ``tune``
    (:func:`add_replay_arguments`) plus its own (policies, plots, processes,
    ScaledObjects to run, the static fleet)."""
    if trace:
        p.add_argument("trace", metavar="TRACE", help="trace or rate file (format from its header)")
        p.add_argument(
            "--policy",
            default=",".join(DEFAULT_POLICIES),
            help="comma-separated policies (default %(default)s)",
        )
    add_replay_arguments(p)
    p.add_argument(
        "--plot",
        dest="plot_path",
        default=None,
        help="write the timeline PNG here (and NAME-ttft.png beside it)",
    )
    p.add_argument(
        "--jobs", type=count_flag("--jobs", 1), default=1, help="policies run in parallel processes"
    )
    p.add_argument(
        "--scaledobject",
        dest="scaledobjects",
        action="append",
        default=[],
        metavar="FILE",
        help="also run this ScaledObject (named by metadata.name)",
    )
    p.add_argument(
        "--static-replicas",
        type=count_flag("--static-replicas", 1),
        default=None,
        help="static fleet size (default: the smallest whose SLO attainment reaches "
        f"{100 * STATIC_SLO_TARGET:g} %% of what an idle fleet attains)",
    )
    p.add_argument(
        "--target",
        type=fraction_flag("--target"),
        default=None,
        help="SLO attainment the hindsight schedule must meet, as a fraction of what an "
        "idle fleet attains (default 0.95, as tune's)",
    )
    p.add_argument(
        "--prometheus-outage",
        type=window_flag("--prometheus-outage"),
        default=None,
        metavar="START:END",
        help="Prometheus is down from START to END seconds into the window: no scrapes, "
        "every prometheus trigger's query fails (KEDA's fallback counts the failures) "
        "and prescaler's tracker gets no reading",
    )


def add_window_arguments(
    p: argparse.ArgumentParser, *, rate_scale: float = 1.0, duration_s: float | None = None
) -> None:
    """The flags every command that replays a trace window takes (``simulate``,
    ``tune``, ``stack``), defined once: the engine profile, the SLO, the client
    time-out, the summary JSON, the window (``start_s``, ``duration_s``), its
    rate and the seed; ``rate_scale`` and ``duration_s`` are the defaults."""
    p.add_argument(
        "--profile", default=DEFAULT_PROFILE, help="engine profile (default %(default)s)"
    )
    p.add_argument(
        "--slo-ttft",
        type=number_flag("--slo-ttft"),
        default=1.0,
        help="TTFT SLO in seconds (default %(default)s)",
    )
    p.add_argument(
        "--timeout",
        type=number_flag("--timeout"),
        default=60.0,
        help="client time-out without a first token, s (default %(default)s)",
    )
    p.add_argument("--json", dest="json_path", default=None, help="write the summary JSON here")
    p.add_argument(
        "--rate-scale",
        type=number_flag("--rate-scale"),
        default=rate_scale,
        help="multiply the arrival rate (default %(default)s)",
    )
    p.add_argument(
        "--start",
        dest="start_s",
        type=number_flag("--start", 0.0, strict=False),
        default=0.0,
        help="skip this many seconds of the trace",
    )
    p.add_argument(
        "--duration",
        dest="duration_s",
        type=number_flag("--duration"),
        default=duration_s,
        help="replay only this many seconds"
        + ("" if duration_s is None else " (default %(default)s)"),
    )
    p.add_argument(
        "--seed", type=count_flag("--seed", 0), default=0, help="random seed (default 0)"
    )


def window_options(args: argparse.Namespace) -> dict[str, Any]:
    """What :func:`add_window_arguments`'s flags were given, keyed as the options
    of the commands that take them name it (``SimulateOptions``, ``StackOptions``)."""
    keys = {
        "profile": "profile",
        "slo_ttft_s": "slo_ttft",
        "timeout_s": "timeout",
        "json_path": "json_path",
        "rate_scale": "rate_scale",
        "start_s": "start_s",
        "duration_s": "duration_s",
        "seed": "seed",
    }
    return {option: getattr(args, flag) for option, flag in keys.items()}


def add_replay_arguments(p: argparse.ArgumentParser) -> None:
    """The flags that say how a trace is replayed, defined once for every
    command that replays one in the simulator (``simulate``, ``tune``): the
    window's (:func:`add_window_arguments`), the token lengths, the backfill,
    the arrival process, the cluster and the scrape."""
    add_window_arguments(p)
    p.add_argument(
        "--tokens-from", default=None, help="per-request trace to draw token lengths from"
    )
    p.add_argument(
        "--no-backfill",
        dest="backfill",
        action="store_false",
        help="start prescaler's tracker empty even when --start leaves trace before the "
        "window (by default it gets that history, as the live scaler backfills from "
        "Prometheus)",
    )
    p.add_argument(
        "--arrivals",
        choices=("poisson", "gamma"),
        default="poisson",
        help="arrival process for rate curves",
    )
    p.add_argument(
        "--cv",
        type=number_flag("--cv"),
        default=1.0,
        help="gamma arrivals' coefficient of variation",
    )
    p.add_argument(
        "--forecaster",
        default=None,
        help="predictive: forecast method (trigger `forecast:`; statsforecast's sf_* "
        "baselines too, in the simulator only)",
    )
    p.add_argument("--spot", action="store_true", help="spot NodePool first, on-demand fallback")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--scrape-interval", type=number_flag("--scrape-interval"), default=15.0,
                   help="Prometheus scrape interval, s (default %(default)s)")  # fmt: skip
    p.add_argument("--rate-window", type=number_flag("--rate-window"), default=120.0,
                   help="rate() window, s (default %(default)s, like serve's)")  # fmt: skip
    p.add_argument("--refit-seconds", dest="refit_interval_s",
                   type=number_flag("--refit-seconds"), default=TrackerConfig.refit_interval_s,
                   help="how often prescaler's tracker refits its forecaster, s: serve's "
                   "--refit-seconds (default %(default)s, like serve's)")  # fmt: skip

    add_sim_input_flags(p)


def replay_spec_from(args: argparse.Namespace) -> ReplaySpec:
    """The replay flags (:func:`add_replay_arguments`) as one value, read the
    same way for ``simulate`` and ``tune``."""
    return ReplaySpec(
        profile=args.profile,
        slo_ttft_s=args.slo_ttft,
        timeout_s=args.timeout,
        rate_scale=args.rate_scale,
        start_s=args.start_s,
        duration_s=args.duration_s,
        seed=args.seed,
        tokens_from=args.tokens_from,
        arrivals=args.arrivals,
        cv=args.cv,
        forecaster=args.forecaster,
        spot=args.spot,
        scrape_interval_s=args.scrape_interval,
        rate_window_s=args.rate_window,
        refit_interval_s=args.refit_interval_s,
        backfill=args.backfill,
        inputs=_sim_inputs(args),
    )


def options_from(args: argparse.Namespace) -> SimulateOptions:
    policies = tuple(p.strip() for p in args.policy.split(",") if p.strip())
    unknown = [p for p in policies if p not in _BUILTIN]
    if unknown:
        raise UsageError(
            f"--policy: unknown policy {unknown[0]!r} (known: {', '.join(DEFAULT_POLICIES)})"
        )
    if not policies and not args.scaledobjects:
        raise UsageError("--policy: no policy given")
    return SimulateOptions(
        trace=args.trace,
        policies=policies,
        **replay_spec_from(args).fields(),
        json_path=args.json_path,
        plot_path=args.plot_path,
        jobs=args.jobs,
        scaledobjects=tuple(args.scaledobjects),
        static_replicas=args.static_replicas,
        target=args.target,
        quiet=args.quiet,
        prometheus_outage=args.prometheus_outage,
    )


def _sim_inputs(args: argparse.Namespace) -> SimInputs:
    try:
        return sim_inputs_from_args(args)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def simulate(opts: SimulateOptions, out: TextIO | None = None) -> dict[str, Any]:
    """Load, run every policy, print the table, write JSON/plots; returns the summary."""
    out = sys.stdout if out is None else out

    wall0 = time.perf_counter()
    # read once (a file too) and handed down as the object; its name now finds
    # it for the trigger metadata that names it (the predictive policy's, --scaledobject's)
    profile = use_profile(opts.profile)
    traffic = opts.traffic()
    workload = load_workload(opts.trace, traffic)
    if len(workload) == 0:
        raise ValueError(f"{opts.trace}: no requests in the selected window")
    inputs = opts.inputs or SimInputs()
    bound = inputs.max_replicas
    specs: list[PolicySpec] = []
    for name in opts.policies:
        if name == "static":
            specs.append(
                PolicySpec("static", "static", replicas=opts.static_replicas, max_replicas=bound)
            )
        elif name == "reactive":
            specs.append(reactive_spec(bound))
        elif name == "predictive":
            specs.append(
                predictive_spec(profile.name, max_replicas=bound, forecaster=opts.forecaster)
            )
        elif name == "oracle":
            specs.append(PolicySpec("oracle", "oracle", max_replicas=bound))
        elif name == "hindsight":
            specs.append(
                PolicySpec("hindsight", "hindsight", max_replicas=bound, target=opts.target)
            )
    for path in opts.scaledobjects:
        specs.append(scaledobject_spec(load_scaledobject(path)))
    config = replay_config(opts, prometheus_outage=opts.prometheus_outage)
    config = replace(config, startup=inputs.startup(profile))
    before = window_start(
        opts.trace, traffic, opts.start_s, profile, config, backfill=opts.backfill
    )
    config = inputs.apply(config, profile, before.opening)
    specs = [with_history(s, before.history) for s in specs]

    from tqdm import tqdm  # heavy: only a run that draws a progress bar loads it

    bar = tqdm(
        total=len(specs),
        desc=f"simulating {len(workload)} requests",
        unit="policy",
        file=sys.stderr,
        leave=False,
        delay=2.0,
        disable=opts.quiet or not sys.stderr.isatty(),
    )

    def done(name: str) -> None:
        bar.set_postfix_str(name)
        bar.update(1)

    try:
        outcomes = run_policies(specs, workload, profile, config, jobs=opts.jobs, on_done=done)
    finally:
        bar.close()
    doc = summary(
        workload.name,
        len(workload),
        workload.duration_s,
        time.perf_counter() - wall0,
        outcomes,
        tp=profile.tp,
        extra={
            "profile": profile.name,
            "max_replicas_bound": bound,
            "initial_replicas": config.initial_replicas,
            "lead_time_s": with_startup(profile, config.startup).startup.total_s,
            "capacity_error": config.capacity_error,
            "prometheus_outage_s": None
            if config.prometheus_outage is None
            else list(config.prometheus_outage),
        },
    )
    print(table(doc), file=out)
    if opts.json_path:
        Path(opts.json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.json_path).write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    if opts.plot_path:
        main_png, cdf_png = plot(outcomes, opts.plot_path, rate_scale=opts.rate_scale)
        print(f"plots: {main_png}, {cdf_png}", file=out)
    return doc


def _run(args: argparse.Namespace) -> int:
    try:
        opts = options_from(args)
        simulate(opts)
    except (ValueError, KeyError, OSError) as exc:
        print(f"prescaler simulate: {in_flags(message_of(exc))}", file=sys.stderr)
        return 2
    return 0


def run_subcommand(
    register_fn: Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None],
    command: str,
    argv: Sequence[str] | None,
) -> int:
    """Run one ``prescaler`` subcommand from its own module (``python -m ...``)."""
    parser = argparse.ArgumentParser(prog="prescaler")
    sub = parser.add_subparsers(dest="command", required=True)
    register_fn(sub)
    args = parser.parse_args([command, *(argv if argv is not None else sys.argv[1:])])
    return int(args.func(args))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m simulations.cli`` (the same as ``prescaler simulate``)."""
    return run_subcommand(register, "simulate", argv)


if __name__ == "__main__":
    sys.exit(main())
