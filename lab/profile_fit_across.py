"""Whether a profile fitted in one run of the profile-fit bench predicts the loads of another.

Why: a team fits its profile once and tunes on it for weeks, while the real
server's speed moves from one start to the next. A fit is worth what it
predicts for a server started later, so each kept run's clients' fit is
rebuilt from its record (``lab.profile_fit_spread.fitted_profile``) and
checked against every run's loads B and C, its own included: the diagonal
is the bench's own check, the rest is the fit carried to another start of
the server, in the same session or another (runs of one session are given
together, sessions apart by ``--``).
Run: ``.venv/bin/python -m lab.profile_fit_across RUN.json... [-- RUN.json...]``.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from engine.profile_check import check_document, check_profile
from engine.profile_files import read_profile_file
from engine.profile_types import Profile
from lab.profile_fit_refit import BASE, load_b, load_c_document
from lab.profile_fit_runs import errors, percent_cell
from lab.profile_fit_spread import fitted_profile
from tests.vllm.test_profile_fit_bench import load_b_prediction

Relation = Literal["its own run", "the same session", "another session"]
RELATIONS: tuple[Relation, ...] = ("its own run", "the same session", "another session")


@dataclass(frozen=True)
class KeptRun:
    """A bench run's JSON and the session it was made in."""

    name: str
    session: int
    doc: Mapping[str, Any]


@dataclass(frozen=True)
class Crossing:
    """One fit checked on one run's loads: each figure's error against its target."""

    fit_run: str
    load_run: str
    relation: Relation
    errors: tuple[tuple[str, float, float], ...]

    @property
    def own(self) -> bool:
        return self.relation == "its own run"

    @property
    def met(self) -> bool:
        return all(abs(error) <= limit for _, error, limit in self.errors)


def checked_on(profile: Profile, doc: Mapping[str, Any]) -> tuple[tuple[str, float, float], ...]:
    """``profile``'s errors on ``doc``'s loads B and C, against the targets ``doc``
    was held to (read through ``lab.profile_fit_runs.errors``, so the columns are
    the runs table's)."""
    tolerance = doc["target_relative_error"]
    check = check_profile(profile, load_c_document(doc), "load C")
    shaped = {
        "predictions": {"fitted_from_bench": load_b_prediction(profile, load_b(doc), doc["real"])},
        "rate_checks": {
            "fitted_from_bench": check_document(check, source="load C", tolerance=tolerance)
        },
        "target_relative_error": tolerance,
        "target_p90_ttft_relative_error": doc["target_p90_ttft_relative_error"],
    }
    return tuple(errors(shaped, "bench"))


def _relation(fit: KeptRun, load: KeptRun) -> Relation:
    if fit.name == load.name:
        return "its own run"
    return "the same session" if fit.session == load.session else "another session"


def crossings(runs: Sequence[KeptRun], base: Profile) -> list[Crossing]:
    """Every run's clients' fit on every run's loads, in the order given."""
    names = [run.name for run in runs]
    if len(set(names)) != len(names):
        raise ValueError(f"each run once, by its file's name: {names}")
    profiles = [fitted_profile(run.doc["fits"]["bench"], base) for run in runs]
    return [
        Crossing(fit.name, load.name, _relation(fit, load), checked_on(profile, load.doc))
        for fit, profile in zip(runs, profiles, strict=True)
        for load in runs
    ]


def crossing_table(rows: Sequence[Crossing]) -> str:
    """One row per fit and run checked: each figure's error in percent, a miss in bold."""
    columns = [name for name, _, _ in rows[0].errors]
    lines = [
        "| fit from | loads of | " + " | ".join(columns) + " | every target met |",
        "|---" * (len(columns) + 3) + "|",
    ]
    for row in rows:
        cells = " | ".join(percent_cell(e, limit) for _, e, limit in row.errors)
        lines.append(
            f"| {row.fit_run} | {row.load_run}{' (own)' if row.own else ''} | {cells} "
            f"| {'yes' if row.met else 'no'} |"
        )
    return "\n".join(lines)


def summary_table(rows: Sequence[Crossing]) -> str:
    """A fit on its own run, on another of its session and on another session's:
    how many pairs met every target, and each figure's median absolute error in
    percent."""
    columns = [name for name, _, _ in rows[0].errors]
    lines = [
        "| checked on | pairs | every target met | "
        + " | ".join(f"{c} median abs" for c in columns)
        + " |",
        "|---" * (len(columns) + 3) + "|",
    ]
    for relation in RELATIONS:
        group = [row for row in rows if row.relation == relation]
        if not group:
            continue
        medians = [
            statistics.median(abs(row.errors[i][1]) for row in group) for i in range(len(columns))
        ]
        lines.append(
            f"| {relation} | {len(group)} | {sum(row.met for row in group)} | "
            + " | ".join(f"{100 * m:.0f}" for m in medians)
            + " |"
        )
    return "\n".join(lines)


def _met_counts(rows: Sequence[Crossing], by: Literal["fit_run", "load_run"], head: str) -> str:
    """Per fit (``by="fit_run"``) or per run whose loads were checked (``"load_run"``):
    how many pairs met every target, on its own run and on the same session's and
    another session's."""
    lines = [
        f"| {head} | its own run | the same session's | another session's |",
        "|---|---|---|---|",
    ]
    for name in dict.fromkeys(getattr(row, by) for row in rows):
        cells = []
        for relation in RELATIONS:
            group = [row for row in rows if getattr(row, by) == name and row.relation == relation]
            cells.append(f"{sum(row.met for row in group)} of {len(group)}" if group else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def fit_table(rows: Sequence[Crossing]) -> str:
    """Per fit: on its own run, and on how many of the other runs' loads, it met every target."""
    return _met_counts(rows, "fit_run", "fit from")


def loads_table(rows: Sequence[Crossing]) -> str:
    """Per run's loads: whether its own fit met every target there, and how many
    of the other fits did."""
    return _met_counts(rows, "load_run", "loads of")


def kept_runs(argv: Sequence[str]) -> list[KeptRun]:
    """The runs named on the command line, sessions apart by ``--``."""
    runs, session = [], 0
    for arg in argv:
        if arg == "--":
            session += 1
            continue
        path = Path(arg)
        runs.append(KeptRun(path.stem, session, json.loads(path.read_text(encoding="utf-8"))))
    return runs


def main(argv: Sequence[str]) -> int:
    runs = kept_runs(argv)
    if len(runs) < 2:
        print(
            "usage: python -m lab.profile_fit_across RUN.json RUN.json... [-- RUN.json...]",
            file=sys.stderr,
        )
        return 2
    rows = crossings(runs, read_profile_file(BASE))
    for table in (crossing_table(rows), summary_table(rows), fit_table(rows), loads_table(rows)):
        print(table, end="\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
