"""A profile checked against several runs of one load: which verdicts the run decides.

A server's figures move between two runs of the same load, so a check
against one run can pass or fail on which run it was
(``docs/decisions/check-against-repeats.md``). ``check_runs`` replays each
run through the profile (each with its own requests and send times) and
shows the median over the runs, measured and predicted. A figure the
profile meets in some runs and misses in others is *unsettled*: at that
tolerance the run decides it, not the profile. The check fails on a figure
missed in every run (``missed``), never on an unsettled one. Pure: the
caller reads the files and prints.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from engine.bench_result import BenchResultError
from engine.profile_check import MAX_CHECK_REQUESTS, CheckRow, ProfileCheck, check_document
from engine.profile_check import check_profile as check_one_run
from engine.profile_types import Profile

#: How far a later run's mean prompt or output length may be from the first's and
#: still count as the same load (``vllm bench serve``'s random lengths move a little
#: with the seed; another load moves them more).
SAME_LOAD_LENGTH_TOLERANCE = 0.10


Verdict = Literal["met", "missed", "unsettled"]


def verdict(errors: Sequence[float | None], tolerance: float) -> Verdict | None:
    """One figure over its runs' errors (None: that run did not measure it): met or
    missed in every run that measured it, or unsettled; None when no run did."""
    met = {abs(e) <= tolerance for e in errors if e is not None}
    if not met:
        return None
    if len(met) > 1:
        return "unsettled"
    return "met" if met == {True} else "missed"


@dataclass(frozen=True)
class RunsCheck:
    """One profile against each run of a load; ``sources[i]`` names ``checks[i]``."""

    checks: tuple[ProfileCheck, ...]
    sources: tuple[str, ...]

    @property
    def rows(self) -> tuple[CheckRow, ...]:
        """Each figure's median over the runs that measured it, measured and predicted
        alike, so both sides come from the same runs (one run: that run's own row)."""
        rows = []
        for i, first in enumerate(self.checks[0].rows):
            per_run = [c.rows[i] for c in self.checks]
            measured = [r for r in per_run if r.error is not None]
            rows.append(
                CheckRow(
                    first.metric,
                    statistics.median(r.measured or 0.0 for r in measured) if measured else None,
                    statistics.median(r.predicted for r in measured or per_run),
                )
            )
        return tuple(rows)

    def met_by_run(self, metric: str, tolerance: float) -> list[bool | None]:
        """Whether each run alone meets ``tolerance`` on ``metric`` (None: not measured)."""
        return [None if e is None else abs(e) <= tolerance for e in self.errors_by_run(metric)]

    def errors_by_run(self, metric: str) -> list[float | None]:
        """Each run's relative error on ``metric`` (None: not measured)."""
        return [next(r.error for r in c.rows if r.metric == metric) for c in self.checks]

    def _with(self, tolerance: float, wanted: Verdict) -> list[str]:
        return [
            row.metric
            for row in self.checks[0].rows
            if verdict(self.errors_by_run(row.metric), tolerance) == wanted
        ]

    def unsettled(self, tolerance: float) -> list[str]:
        """The figures some runs meet and others miss at ``tolerance``."""
        return self._with(tolerance, "unsettled")

    def missed(self, tolerance: float) -> list[str]:
        """The figures every run that measured them misses at ``tolerance``: the
        profile's misses, which no run's movement explains."""
        return self._with(tolerance, "missed")


def _same_load(first: ProfileCheck, other: ProfileCheck, first_source: str, source: str) -> None:
    """Raise, naming the field, unless ``other`` ran the load ``first`` did."""
    a, b = first.load, other.load
    why = (
        f"not a run of the same load as {first_source} (several results are runs of one "
        "load: the same flags on the same server)"
    )
    if a.max_concurrency != b.max_concurrency:
        raise BenchResultError(
            source, "max_concurrency", f"{b.max_concurrency} against {a.max_concurrency}: {why}"
        )
    x, y = a.request_rate, b.request_rate
    if (x is None) != (y is None) or (
        x is not None and y is not None and not math.isclose(x, y, rel_tol=1e-6)
    ):
        raise BenchResultError(source, "request_rate", f"{y} against {x}: {why}")
    for field, ours, theirs in (
        ("mean prompt tokens", a.prompt_tokens, b.prompt_tokens),
        ("mean output tokens", a.output_tokens, b.output_tokens),
    ):
        if abs(theirs / ours - 1.0) > SAME_LOAD_LENGTH_TOLERANCE:
            raise BenchResultError(
                source, "input_lens/output_lens", f"{field} {theirs} against {ours}: {why}"
            )


def check_runs(
    profile: Profile,
    runs: Sequence[tuple[Mapping[str, Any], str]],
    *,
    max_requests: int = MAX_CHECK_REQUESTS,
) -> RunsCheck:
    """Check ``profile`` against each ``(document, source)`` run of one load.

    Raises ``BenchResultError`` naming the file and field when a later run is
    not the first's load, and what ``engine.profile_check.check_profile``
    raises for any run with nothing to compare.
    """
    if not runs:
        raise ValueError("check_runs needs at least one run")
    checks = [
        check_one_run(profile, doc, source, max_requests=max_requests) for doc, source in runs
    ]
    sources = [source for _, source in runs]
    for check, source in zip(checks[1:], sources[1:], strict=True):
        _same_load(checks[0], check, sources[0], source)
    return RunsCheck(tuple(checks), tuple(sources))


def check_runs_document(runs: RunsCheck, *, tolerance: float) -> dict[str, Any]:
    """The JSON report (docs/contracts.md): ``engine.profile_check.check_document``'s
    fields over the runs' medians, ``source`` the first run's, per run and per figure
    what each run alone showed, and the verdict: passed unless a figure was missed
    in every run that measured it (with one run, exactly the one-run check's)."""
    first = runs.checks[0]
    median = ProfileCheck(first.profile, first.load, runs.rows, first.requests_in_run)
    doc = check_document(median, source=runs.sources[0], tolerance=tolerance)
    for row in doc["rows"]:
        metric = row["metric"]
        row["runs_measured"] = [
            next(r.measured for r in c.rows if r.metric == metric) for c in runs.checks
        ]
        row["runs_error"] = runs.errors_by_run(metric)
        row["runs_met"] = runs.met_by_run(metric, tolerance)
    doc["runs"] = [
        {
            "source": source,
            "requests": check.load.num_requests,
            "cut": check.cut,
            "max_abs_error": check.max_abs_error,
            "worst_metric": None if check.worst is None else check.worst.metric,
            "passed": check.max_abs_error <= tolerance,
        }
        for check, source in zip(runs.checks, runs.sources, strict=True)
    ]
    doc["unsettled"] = runs.unsettled(tolerance)
    doc["missed"] = runs.missed(tolerance)
    doc["passed"] = not doc["missed"]
    return doc
