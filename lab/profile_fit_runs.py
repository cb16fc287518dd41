"""The profile-fit bench's runs side by side, as the tables in ``docs/profiles.md``.

Why: the real server's speed moves from run to run, so one run of
``tests/vllm/test_profile_fit_bench.py`` says little about the fit; the
tables over every kept run (``lab/results/profile_fit/``) are what the docs
quote, and this prints them from the JSONs so they can be regenerated.

Run: ``.venv/bin/python -m lab.profile_fit_runs RUN.json...`` (in the order
the runs were made).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from engine.profile_check_runs import verdict

FITS = {"bench": "the clients' figures", "metrics": "`/metrics`"}
#: (the bench's figure for load B, the check's metric for load C, the column's title)
FIGURES = (
    ("median_ttft_s", "ttft_p50_ms", "TTFT p50"),
    ("p90_ttft_s", "ttft_p90_ms", "TTFT p90"),
    ("median_itl_s", "itl_p50_ms", "ITL p50"),
    ("output_throughput", "output_tokens_per_s", "tok/s"),
)


def percent_cell(error: float, limit: float) -> str:
    """An error in percent, in bold past its target (``lab.profile_fit_across`` too)."""
    text = f"{100 * error:+.0f}".replace("-", "−")
    return text if abs(error) <= limit else f"**{text}**"


def errors(doc: dict[str, Any], fit: str) -> list[tuple[str, float, float]]:
    """(column, error, its target) for load B then load C, as fraction of the server's."""
    load_b = doc["predictions"][f"fitted_from_{fit}"]["relative_error"]
    load_c = {r["metric"]: r["error"] for r in doc["rate_checks"][f"fitted_from_{fit}"]["rows"]}
    out = []
    for load, values, index in (("B", load_b, 0), ("C", load_c, 1)):
        for figure in FIGURES:
            # the targets the bench held the run to, as it recorded them
            limit = doc[
                "target_p90_ttft_relative_error"
                if figure[2] == "TTFT p90"
                else "target_relative_error"
            ]
            out.append((f"{load} {figure[2]}", float(values[figure[index]]), limit))
    return out


def error_table(docs: list[dict[str, Any]], fit: str) -> str:
    """One row per run: each load's errors in percent, a miss in bold."""
    columns = [name for name, _, _ in errors(docs[0], fit)]
    lines = [
        f"| run ({FITS[fit]}) | " + " | ".join(columns) + " | every target met |",
        "|---" * (len(columns) + 2) + "|",
    ]
    for number, doc in enumerate(docs, 1):
        row = errors(doc, fit)
        met = all(abs(e) <= limit for _, e, limit in row)
        cells = " | ".join(percent_cell(e, limit) for _, e, limit in row)
        lines.append(f"| {number} | {cells} | {'yes' if met else 'no'} |")
    return "\n".join(lines)


def server_table(docs: list[dict[str, Any]]) -> str:
    """One row per run: what the server did, and the wake-up load A's pauses showed."""
    lines = [
        "| run | load B: TTFT p50, ITL p50 (ms), tok/s "
        "| load A's pauses: TTFT p50 after 0 / 3 s (ms) | wake-up fitted (clients' fit) |",
        "|---|---|---|---|",
    ]
    for number, doc in enumerate(docs, 1):
        real = doc["real"]
        pauses = doc["fit_load"]["idle_pauses"]["median_ttft_s_by_pause"]
        stalls = doc["fits"]["bench"]["stalls"]
        lines.append(
            f"| {number} | {1e3 * real['median_ttft_s']:.1f}, {1e3 * real['median_itl_s']:.2f}, "
            f"{real['output_throughput']:.0f} | {1e3 * pauses['0']:.1f} / {1e3 * pauses['3']:.1f} "
            f"| {1e3 * stalls['wake_s']:.1f} ms, time constant {stalls['wake_tau_s']:.2f} s |"
        )
    return "\n".join(lines)


def repeat_table(docs: list[dict[str, Any]]) -> str | None:
    """One row per run that ran loads B and C twice: the second run's figures against
    the first's, the server's own error, and whether the second, taken as a
    prediction of the first, meets every target (None when no run did)."""
    repeated = [(n, doc) for n, doc in enumerate(docs, 1) if "repeat" in doc]
    if not repeated:
        return None
    columns = errors(docs[0], "bench")
    lines = [
        "| run (the server again) | "
        + " | ".join(name for name, _, _ in columns)
        + " | every target met |",
        "|---" * (len(columns) + 2) + "|",
    ]
    for number, doc in repeated:
        cells, met = [], True
        for load, index, offset in (("load_b", 0, 0), ("load_c", 1, len(FIGURES))):
            errs = doc["repeat"][load]["error"]
            for i, figure in enumerate(FIGURES):
                if figure[index] not in errs:
                    cells.append("n/a")
                    continue
                # the second run taken as a prediction of the first, as every fit's is
                met &= abs(errs[figure[index]]) <= columns[offset + i][2]
                cells.append(percent_cell(errs[figure[index]], math.inf))
        lines.append(f"| {number} | " + " | ".join(cells) + f" | {'yes' if met else 'no'} |")
    return "\n".join(lines)


def errors_again(doc: dict[str, Any], fit: str) -> list[tuple[str, float | None, float]]:
    """``errors``' columns against the server's second run of loads B and C (None where
    the run kept no such figure). Load C's second run had other prompts and arrivals:
    runs that kept ``rate_checks_runs`` replayed it with its own; older runs kept only
    its figures, so the first run's prediction stands in for it there."""
    again_b = doc["repeat"]["load_b"]["again"]
    predicted_b = doc["predictions"][f"fitted_from_{fit}"]["predicted"]
    runs = doc.get("rate_checks_runs", {}).get(f"fitted_from_{fit}")
    first_c = {r["metric"]: r for r in doc["rate_checks"][f"fitted_from_{fit}"]["rows"]}
    again_c = doc["repeat"]["load_c"]["again"]
    columns = errors(doc, fit)
    out: list[tuple[str, float | None, float]] = []
    for (name, _, limit), figure in zip(columns[:4], FIGURES, strict=True):
        out.append((name, predicted_b[figure[0]] / again_b[figure[0]] - 1.0, limit))
    for (name, _, limit), figure in zip(columns[4:], FIGURES, strict=True):
        metric = figure[1]
        if runs is not None:
            error = next(r["runs_error"][1] for r in runs["rows"] if r["metric"] == metric)
        elif metric in again_c:
            error = first_c[metric]["predicted"] / again_c[metric] - 1.0
        else:
            error = None
        out.append((name, error, limit))
    return out


def settled_table(docs: list[dict[str, Any]]) -> str | None:
    """Per run that ran loads B and C twice, and per fit: the figures missed against
    both of the server's runs (settled) and those missed against one only (the run
    decided them, or the other run kept no such figure), None when no run repeated
    its loads."""
    repeated = [(n, doc) for n, doc in enumerate(docs, 1) if "repeat" in doc]
    if not repeated:
        return None
    lines = [
        "| run | fit | every target met: first run, second run | missed in both runs "
        "| missed in one run only |",
        "|---|---|---|---|---|",
    ]
    for number, doc in repeated:
        for fit, title in FITS.items():
            first = errors(doc, fit)
            again = errors_again(doc, fit)
            both, one = [], []
            for (name, e1, limit), (_, e2, _) in zip(first, again, strict=True):
                missed = [abs(e) > limit for e in (e1, e2) if e is not None]
                if len(missed) == 2 and all(missed):
                    both.append(name)
                elif any(missed):
                    one.append(name)  # (or missed where the other run has no figure)
            met = [
                all(abs(e) <= limit for _, e, limit in rows if e is not None)
                for rows in (first, again)
            ]
            lines.append(
                f"| {number} | {title} | {', '.join('yes' if m else 'no' for m in met)} "
                f"| {', '.join(both) or '-'} | {', '.join(one) or '-'} |"
            )
    return "\n".join(lines)


def check_runs_table(docs: list[dict[str, Any]]) -> str | None:
    """Per run that kept ``rate_checks_runs`` and per fit: ``prescaler engine check``
    on both runs of load C, every figure at the check's tolerance, read by its rule
    (``engine.profile_check_runs.verdict``: a figure fails only when missed in every
    run that measured it), each such figure with its two errors; None when no run
    kept it (the ``passed`` the bench wrote may be an earlier rule's)."""
    kept = [(n, doc) for n, doc in enumerate(docs, 1) if "rate_checks_runs" in doc]
    if not kept:
        return None
    lines = [
        "| run | fit | engine check on both runs of load C | missed in every run | unsettled |",
        "|---|---|---|---|---|",
    ]
    for number, doc in kept:
        for fit, title in FITS.items():
            check = doc["rate_checks_runs"][f"fitted_from_{fit}"]
            limit = check["tolerance"]
            missed, unsettled = [], []
            for row in check["rows"]:
                errs = row["runs_error"]
                judged = verdict(errs, limit)
                if judged == "missed":
                    cells = ("n/a" if e is None else percent_cell(e, math.inf) for e in errs)
                    missed.append(f"{row['metric']} ({' / '.join(cells)})")
                elif judged == "unsettled":
                    unsettled.append(row["metric"])
            lines.append(
                f"| {number} | {title} | {'failed' if missed else 'passed'} "
                f"| {', '.join(missed) or '-'} | {', '.join(unsettled) or '-'} |"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: python -m lab.profile_fit_runs RUN.json...\n")
        return 2
    docs = [json.loads(Path(p).read_text(encoding="utf-8")) for p in argv]
    for fit in FITS:
        print(error_table(docs, fit), end="\n\n")
    print(server_table(docs))
    repeats = repeat_table(docs)
    if repeats is not None:
        print("", repeats, sep="\n")
    settled = settled_table(docs)
    if settled is not None:
        print("", settled, sep="\n")
    checked = check_runs_table(docs)
    if checked is not None:
        print("", checked, sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
