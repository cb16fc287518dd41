"""The suite's own command-line options, read where no fixture reaches.

Bench budgets and the golden-file switch are pytest options (``pytest
--help`` lists them under "prescaler suite"), not environment variables, so a
run's knobs are on its command line (the scaler benches' own
``BENCH_SCALER_*``/``BENCH_BACKFILL_*`` knobs excepted). tests/conftest.py registers them and
stores what was given here once per run; support modules and module-level
constants read :func:`suite_options`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

__all__ = ["SuiteOptions", "add_options", "add_tune_options", "configure", "suite_options"]

DEFAULT_VLLM_HOME = Path.home() / ".cache" / "prescaler-vllm"


@dataclass(frozen=True)
class SuiteOptions:
    """What the command line gave; None: each bench's own default."""

    update_golden: bool = False
    reference_dir: str | None = None
    """The reference folder (tests.support.reference); None: its default, "": none."""
    bench_jobs: int | None = None
    bench_trials: int | None = None
    bench_prune: Literal["pace", "exact"] = "exact"
    vllm_home: Path = DEFAULT_VLLM_HOME
    vllm_server_cpus: frozenset[int] | Literal["last", "none"] = "last"
    """The CPUs the profile-fit bench pins its vLLM server to (its own process
    and clients take the others): by default the last one, since with the
    clients on the server's cores its p90 TTFT moved twelvefold between runs
    (``docs/profiles.md``); "none": nothing pinned."""


_given = [SuiteOptions()]


def suite_options() -> SuiteOptions:
    """The options of this run (the defaults outside pytest)."""
    return _given[0]


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("prescaler suite")
    group.addoption("--update-golden", action="store_true",
                    help="rewrite golden files from the output before comparing")  # fmt: skip
    group.addoption("--reference-dir", default=None, metavar="PATH",
                    help="the reference folder provenance tests read ('' for none)")  # fmt: skip
    group.addoption("--bench-jobs", type=int, default=None, metavar="N",
                    help="processes a bench runs in (default: each bench's own)")  # fmt: skip
    group.addoption("--bench-trials", type=int, default=None, metavar="N",
                    help="trials per study of a tuning bench (default: its own)")  # fmt: skip
    group.addoption("--bench-prune", choices=("pace", "exact"), default="exact",
                    help="the capacity-error bench's --prune rule (default exact)")  # fmt: skip
    group.addoption("--vllm-home", type=Path, default=DEFAULT_VLLM_HOME, metavar="PATH",
                    help="where the real vLLM's venv and model are cached")  # fmt: skip
    group.addoption("--vllm-server-cpus", type=_cpu_list, default="last",
                    metavar="last|none|N[,N...]",
                    help="pin the profile-fit bench's vLLM server to these CPUs, its "
                         "clients to the others (default: last, the highest-numbered "
                         "CPU, when there are two or more; none: unpinned)")  # fmt: skip
    add_tune_options(parser)


def _cpu_list(text: str) -> frozenset[int] | Literal["last", "none"]:
    """``--vllm-server-cpus``: ``last``, ``none`` or CPU numbers, comma-separated
    (``tests.vllm.real_vllm.server_cpus`` resolves it on the machine)."""
    if text in ("last", "none"):
        return "last" if text == "last" else "none"
    try:
        cpus = frozenset(int(part) for part in text.split(","))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"not 'last', 'none' or a comma-separated list of CPU numbers: {text!r}"
        ) from exc
    if any(cpu < 0 for cpu in cpus):
        raise argparse.ArgumentTypeError(f"CPU numbers are 0 or more: {text!r}")
    return cpus


def add_tune_options(parser: pytest.Parser) -> None:
    """The tuner benches' knobs (tests/simulations/tune/conftest.py's
    ``tune_knobs`` reads them); registered at the root so ``pytest -m bench
    tests --tune-trace PATH`` parses. The day bench and the trial-cost bench
    each have their own window; ``--tune-start``/``--tune-hours`` set both."""
    group = parser.getgroup("tune benches")
    group.addoption("--tune-trace", default=None, metavar="PATH",
                    help="a per-minute trace with a daily cycle (shipped: "
                    "simulations/data/azure_llm2024_coding_per_minute.csv)")  # fmt: skip
    group.addoption("--tune-traces", default="", metavar="PATH[@START]:...",
                    help="os.pathsep-separated traces for the out-of-sample bench")  # fmt: skip
    group.addoption("--tune-trials", type=int, default=None,
                    help="trials per study (default: each bench's own)")  # fmt: skip
    group.addoption("--tune-target", type=float, default=0.95,
                    help="SLO target as a fraction of the idle ceiling (default 0.95)")  # fmt: skip
    group.addoption("--tune-rate-scale", type=float, default=0.1,
                    help="rate scale for the trace benches (default 0.1)")  # fmt: skip
    group.addoption("--tune-day-start", type=float, default=None, metavar="S",
                    help="seconds into the trace the day bench starts (default 0)")  # fmt: skip
    group.addoption("--tune-day-hours", type=float, default=None, metavar="H",
                    help="hours of the trace the day bench tunes on (default 24)")  # fmt: skip
    group.addoption("--tune-trial-start", type=float, default=None, metavar="S",
                    help="seconds into the trace the trial-cost bench starts "
                    "(default 3 days)")  # fmt: skip
    group.addoption("--tune-trial-hours", type=float, default=None, metavar="H",
                    help="hours of the trace the trial-cost bench runs (default 24)")  # fmt: skip
    group.addoption("--tune-start", type=float, default=None, metavar="S",
                    help="both benches' start unless its own option says")  # fmt: skip
    group.addoption("--tune-hours", type=float, default=None, metavar="H",
                    help="both benches' hours unless its own option says")  # fmt: skip
    group.addoption("--tune-sides", default="",
                    help="comma-separated sides for the day bench (default: tune's)")  # fmt: skip
    group.addoption("--tune-tokens-from", default=None, metavar="PATH",
                    help="per-request trace the day bench draws token lengths from")  # fmt: skip
    group.addoption("--tune-max-replicas", type=int, default=None, metavar="N",
                    help="the day bench's fleet bound (default: tune's)")  # fmt: skip
    group.addoption("--tune-seed", type=int, default=0,
                    help="the day bench's --seed: arrivals and samplers (default 0)")  # fmt: skip
    group.addoption("--tune-screen-refit", type=float, default=None, metavar="S",
                    help="the day bench's --screen-refit (default: tune's; 0: off)")  # fmt: skip
    group.addoption("--tune-days", type=int, default=2,
                    help="days of each trace in the out-of-sample bench (default 2)")  # fmt: skip
    group.addoption("--tune-profile", action="store_true",
                    help="profile the trial-cost bench's trial (cProfile)")  # fmt: skip


def configure(config: pytest.Config) -> None:
    """Store the options ``config`` was given, for :func:`suite_options`."""
    _given[0] = SuiteOptions(
        update_golden=bool(config.getoption("update_golden")),
        reference_dir=config.getoption("reference_dir"),
        bench_jobs=config.getoption("bench_jobs"),
        bench_trials=config.getoption("bench_trials"),
        bench_prune=config.getoption("bench_prune"),
        vllm_home=config.getoption("vllm_home"),
        vllm_server_cpus=config.getoption("vllm_server_cpus"),
    )
