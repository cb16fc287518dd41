"""`prescaler demo`: what `make demo` runs.

It replays the held-back part of the shipped trace for llama-3-8b on
g5.xlarge and tells the fair story: the recipe's ScaledObject as written,
KEDA tuned, prescaler tuned the same way, a static fleet, the oracle, and
the cost ratio of prescaler to the best tuned KEDA in plain words. The
tuned settings come from a fixture (:mod:`prescaler.demo_tuned`) that
``--retune`` regenerates, so the demo only scores. ``--emulator`` runs
:mod:`prescaler.demo_emulator` instead.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import io
import json
import math
import sys
import textwrap
from pathlib import Path
from typing import TextIO

import yaml

from prescaler.demo_emulator import DEFAULT_DURATION_S, DEFAULT_PROFILE, run_demo
from prescaler.demo_tuned import FIXTURE, RETUNE_COMMAND, TRIALS, TunedFixture

DEFAULT_OUT = "demo-results"


def limits(tuned_s: float, scored_s: float) -> str:
    """Said after every run: the reach of the figures above it."""
    return (
        f"what this does not show: one trace (one public conversation trace, "
        f"{tuned_s / 60:.0f} minutes tuned on and {scored_s / 60:.1f} scored), one model on one "
        "GPU type, settings tuned on minutes rather than a week, one seed, and a simulator "
        "rather than a cluster."
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "demo",
        help="the recipe as written, tuned KEDA and tuned prescaler on the shipped trace "
        "(what `make demo` runs)",
        description="Score, on the held-back part of the shipped Azure conversation trace, "
        "the KEDA recipe's ScaledObject as written, plain KEDA tuned, prescaler's trigger tuned "
        "the same way, a static fleet and the oracle; print the table and the cost ratio, write "
        "plots. --retune regenerates the tuned settings. With --emulator: start an emulated "
        "replica and stream a bursty load through HTTP.",
    )
    p.add_argument("--out", default=DEFAULT_OUT,
                   help="folder for the plots, ScaledObjects and summary JSON "
                        "(default %(default)s)")  # fmt: skip
    p.add_argument("--jobs", type=int, default=2, help="parallel processes (default %(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--no-plot", dest="plot", action="store_false",
                   help="skip the plots (drawing them is most of the demo's time)")  # fmt: skip
    p.add_argument("--tuned", default=str(FIXTURE),
                   help="the tuned settings to score (default: the shipped fixture)")  # fmt: skip
    p.add_argument("--retune", action="store_true",
                   help="tune every side on the trace's first 70 %% (the same optimizer, "
                        "trials and seed for each), write --tuned, then score")  # fmt: skip
    p.add_argument("--trials", type=int, default=TRIALS,
                   help="--retune: trials per side (default %(default)s)")  # fmt: skip
    p.add_argument("--emulator", action="store_true",
                   help="the emulator demo instead: one replica behind real HTTP")  # fmt: skip
    p.add_argument("--duration", type=float, default=None,
                   help="seconds of the held-back part to replay (default: all); "
                        f"--emulator: load seconds (default {DEFAULT_DURATION_S:g})")  # fmt: skip
    p.add_argument("--profile", default=DEFAULT_PROFILE,
                   help="engine profile (default %(default)s; the tuned settings must be "
                        "for it)")  # fmt: skip
    p.add_argument("--rate", type=float, default=None,
                   help="--emulator: calm-phase requests/s (default: from profile)")  # fmt: skip
    p.set_defaults(func=_run)


def write_scaledobjects(fixture: TunedFixture, folder: Path) -> list[Path]:
    """Each tuned side's ScaledObject as a file the simulator (and kubectl) reads,
    named ``SIDE-tuned`` so every row of the table has its own name; a
    prescaler trigger without a ``scalerAddress`` gets the one the shipped
    manifests deploy the scaler at, so the file applies as written."""
    from simulations.tune.paste import DEFAULT_SCALER_ADDRESS

    folder.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for side in fixture.sides:
        if side.manifest is None:
            continue
        doc = copy.deepcopy(dict(side.manifest))
        doc["metadata"] = {**dict(doc.get("metadata") or {}), "name": side.run_name}
        for trig in (doc.get("spec") or {}).get("triggers") or []:
            if trig.get("type") in ("external", "external-push"):
                trig.setdefault("metadata", {}).setdefault("scalerAddress", DEFAULT_SCALER_ADDRESS)
        path = folder / f"{side.run_name}.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        paths.append(path)
    return paths


def run_simulator_demo(
    profile: str,
    out_dir: str,
    jobs: int,
    quiet: bool,
    out: TextIO,
    duration_s: float | None = None,
    tuned: str | Path = FIXTURE,
    plot: bool = True,
) -> int:
    """Score the tuned fixture's settings and the references on the held-back
    part; the table and the verdict to ``out``, files to ``out_dir``."""
    from engine.profiles import get_profile
    from prescaler.demo_story import (
        demo_document,
        keda_gain,
        oracle_note,
        render,
        story_rows,
        verdict,
    )
    from prescaler.demo_tuned import held_back_start, load_fixture
    from simulations.cli import SimulateOptions, simulate
    from simulations.report import ttft_plot_path
    from simulations.runner import idle_attainment
    from simulations.traffic import DEFAULT_TOKENS_TRACE, TrafficOptions, load_workload

    fixture = load_fixture(tuned)
    prof = get_profile(profile)
    if fixture.profile != prof.name:
        raise ValueError(
            f"{tuned}: tuned for {fixture.profile}, not {prof.name}; run "
            f"`{RETUNE_COMMAND} --profile {profile} --tuned FILE` first"
        )
    trace = str(DEFAULT_TOKENS_TRACE)
    if fixture.trace != DEFAULT_TOKENS_TRACE.name:
        raise ValueError(f"{tuned}: tuned on {fixture.trace}, not {DEFAULT_TOKENS_TRACE.name}")
    start_s = held_back_start(trace, fixture.holdout)
    folder = Path(out_dir)
    paths = write_scaledobjects(fixture, folder / "scaledobjects")
    print(
        f"prescaler demo: {DEFAULT_TOKENS_TRACE.name} for {prof.name}; settings tuned on the "
        f"first {start_s / 60:.0f} minutes ({fixture.trials} trials a side, {tuned}), scored on "
        "the rest",
        file=out,
        flush=True,
    )
    opts = SimulateOptions(
        trace=trace,
        policies=("static", "reactive", "oracle", "hindsight"),
        profile=prof.name,
        slo_ttft_s=fixture.slo_ttft_s,
        json_path=None,
        plot_path=str(folder / "timeline.png") if plot else None,
        jobs=jobs,
        quiet=quiet,
        start_s=start_s,
        duration_s=duration_s,
        seed=fixture.seed,
        scaledobjects=tuple(str(p) for p in paths),
        target=fixture.target,
    )
    doc = simulate(opts, io.StringIO())  # its table is in summary.json; ours is below
    workload = load_workload(
        trace, TrafficOptions(start_s=start_s, duration_s=duration_s, seed=fixture.seed)
    )
    ceiling = idle_attainment(workload, prof, fixture.slo_ttft_s)
    target = fixture.target * ceiling
    rows = story_rows(doc, fixture.sides, ceiling, fixture.slo_ttft_s)
    found = verdict(rows, fixture.sides, target)
    print(
        f"held-back part: {doc['requests']:,} requests over {doc['duration_s'] / 60:.1f} "
        f"minutes; target: TTFT <= {fixture.slo_ttft_s:g} s for {100 * target:.1f} % of "
        f"requests ({fixture.target:g} x the best possible)\n",
        file=out,
    )
    for line in render(rows, target):
        print(line, file=out)
    print("\n" + textwrap.fill(found.text, width=88), file=out)
    gain = keda_gain(rows, found.keda)
    if gain:
        print(textwrap.fill(gain, width=88), file=out)
    bound = doc.get("hindsight")
    if bound is not None:
        from simulations.bound_report import waterfall_lines

        months = doc["duration_s"] / 3600.0 / 730.0
        print("", file=out)
        for line in waterfall_lines(bound["terms"], months, bound["stated_lead"]["lead_s"]):
            print(line, file=out)
    prescaler = fixture.side("prescaler")
    note = oracle_note(doc, prof, prescaler.run_name) if prescaler else None
    if note:
        print("\n" + textwrap.fill(note, width=88), file=out)
    print("\n" + textwrap.fill(limits(start_s, doc["duration_s"]), width=88), file=out)
    story = demo_document(rows, found, fixture.sides, str(tuned), start_s, target, ceiling)
    doc = {**doc, "demo": story}
    (folder / "summary.json").write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    main_png = folder / "timeline.png"
    plots = f"plots: {main_png}, {ttft_plot_path(main_png)}; " if plot else ""
    print(f"\n{plots}ScaledObjects: {folder / 'scaledobjects'}/", file=out)
    print(
        f"summary: {folder / 'summary.json'} (wall {doc['wall_s']:.1f} s). next: "
        "`prescaler tune TRACE --scaledobject yours.yaml` on your own traffic, "
        f"`{RETUNE_COMMAND}` to re-tune these.",
        file=out,
    )
    return 0


def _retune(args: argparse.Namespace) -> None:
    from prescaler.demo_tuned import retune
    from simulations.traffic import DEFAULT_TOKENS_TRACE

    path = Path(args.tuned)
    retune(str(DEFAULT_TOKENS_TRACE), args.profile, args.jobs, path, sys.stdout, args.trials)
    print(f"prescaler demo: wrote {path}\n", flush=True)


def _run(args: argparse.Namespace) -> int:
    if args.duration is not None and not (math.isfinite(args.duration) and args.duration > 0):
        print(
            f"prescaler demo: --duration must be a finite number > 0, got {args.duration}",
            file=sys.stderr,
        )
        return 2
    if not args.emulator:
        for flag, value in (("--jobs", args.jobs), ("--trials", args.trials)):
            if value < 1:
                print(f"prescaler demo: {flag} must be >= 1, got {value}", file=sys.stderr)
                return 2
        try:
            if args.retune:
                _retune(args)
            return run_simulator_demo(
                args.profile, args.out, args.jobs, args.quiet, sys.stdout, args.duration,
                args.tuned, args.plot,
            )  # fmt: skip
        except (ValueError, KeyError, OSError) as exc:
            print(f"prescaler demo: {exc}", file=sys.stderr)
            return 2
    duration = DEFAULT_DURATION_S if args.duration is None else args.duration
    try:
        return asyncio.run(run_demo(args.profile, duration, args.rate, sys.stdout))
    except (ValueError, KeyError) as exc:
        print(f"prescaler demo: {exc}", file=sys.stderr)
        return 2
