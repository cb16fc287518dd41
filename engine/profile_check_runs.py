"""A profile checked against several runs of one load: which verdicts the run decides.

A server's figures move between two runs of the same load (on the CPU
vLLM of ``docs/profiles.md``, its median TTFT by up to a fifth half a
minute apart), so a check against one run can pass or fail on which run
it was. ``check_runs`` replays each run through the profile (each with its
own requests and send times) and shows the median over the runs, measured
and predicted. A figure the profile meets in some runs and misses in others
is *unsettled*: at that tolerance the run decides it, not the profile. The
check fails on a figure missed in every run (``missed``), never on an
unsettled one. Pure: the caller reads the files and prints.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.bench_result import BenchResultError
from engine.profile_check import MAX_CHECK_REQUESTS, CheckRow, ProfileCheck, check_document
from engine.profile_check import check_profile as check_one_run
from engine.profile_types import Profile

#: How far a later run's mean prompt or output length may be from the first's and
#: still count as the same load (``vllm bench serve``'s random lengths move a little
#: with the seed; another load moves them more).
SAME_LOAD_LENGTH_TOLERANCE = 0.10


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
        out: list[bool | None] = []
        for check in self.checks:
            error = next(r.error for r in check.rows if r.metric == metric)
            out.append(None if error is None else abs(error) <= tolerance)
        return out

    def _verdicts(self, tolerance: float) -> dict[str, set[bool]]:
        return {
            row.metric: {v for v in self.met_by_run(row.metric, tolerance) if v is not None}
            for row in self.checks[0].rows
        }

    def unsettled(self, tolerance: float) -> list[str]:
        """The figures some runs meet and others miss at ``tolerance``."""
        return [m for m, verdicts in self._verdicts(tolerance).items() if len(verdicts) > 1]

    def missed(self, tolerance: float) -> list[str]:
        """The figures every run that measured them misses at ``tolerance``: the
        profile's misses, which no run's movement explains."""
        return [m for m, verdicts in self._verdicts(tolerance).items() if verdicts == {False}]


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
        per_run = [next(r for r in c.rows if r.metric == metric) for c in runs.checks]
        row["runs_measured"] = [r.measured for r in per_run]
        row["runs_error"] = [r.error for r in per_run]
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
