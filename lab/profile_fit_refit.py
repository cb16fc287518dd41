"""The profile-fit bench's kept runs refitted under two descriptions of load A's clients.

Why: the bench fits load A's client medians by replaying each phase through
the engine model, and how that replay's clients are described (starting
together, or steady and out of step as the real ones were) moves the fit.
A kept run holds each phase's medians, the KV capacity and the fitted
wake-up, and everything the checks compare against (load B's figures, load
C's send times and figures), so the two descriptions can be compared on the
very same measurements without the server. Only the two refits compare like
with like: the run's own fit read its wake-up again from the idle requests
(which a run does not keep) with its own time outside the engine, so a refit
in the old description lands near the run's fit, not on it.

A run whose load A ended in waves (clients sending together) is also refitted
without them, steady: what the waves add to the fit, on the very same run.
Writes one JSON per run and description, shaped as the bench's (its clients'
fit's predictions replaced, the refit's own account under ``refit``), so
``python -m lab.profile_fit_runs`` prints the tables. Run:
``.venv/bin/python -m lab.profile_fit_refit OUT_DIR RUN.json...``.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from tqdm import tqdm

from engine.bench_result import BenchMeasurement
from engine.profile_check import check_document, check_profile
from engine.profile_files import read_profile_file
from engine.profile_fit_measurements import fit_to_measurements
from engine.profile_types import Profile
from engine.serving_replay import ServingLoad
from tests.vllm.test_profile_fit_bench import (
    BASE,
    JOIN_S,
    fit_record,
    load_b_prediction,
    phase_measurement,
    phase_replay,
)

Clients = Literal["steady", "together"]
CLIENTS: tuple[Clients, ...] = ("steady", "together")


def load_a_runs(
    doc: Mapping[str, Any], clients: Clients, *, waves: bool = True
) -> list[BenchMeasurement]:
    """Load A's phases as the fit reads them, each phase not in step replayed with
    ``clients``: steady (``steady_clients``, as the bench now replays them) or
    together (the first requests spread over the join time and the rest waiting
    until then, which left identical requests in step for ever: the bench's replay
    before). A phase whose clients sent in waves (``phases_in_step``; runs kept
    before it had none) is replayed in step whatever ``clients`` says, or left out
    with ``waves=False``: what the waves add, on the very same run."""
    if clients not in CLIENTS:
        raise ValueError(f"clients must be one of {CLIENTS}, got {clients!r}")
    fit_load = doc["fit_load"]
    output = int(fit_load["output_tokens"])
    phases = fit_load["phases"]
    in_step = fit_load.get("phases_in_step", [False] * len(phases))
    runs = []
    for seen, (count, _, prompt), wave in zip(
        fit_load["seen_by_clients"], phases, in_step, strict=True
    ):
        if wave and not waves:
            continue
        if wave or clients == "steady":
            load = phase_replay(seen, count, prompt, wave, output)
        else:
            requests = int(seen["requests"])
            load = ServingLoad(requests, prompt, output, count, first_arrivals_over_s=JOIN_S)
        runs.append(phase_measurement(seen, load))
    return runs


def has_waves(doc: Mapping[str, Any]) -> bool:
    """Whether the run's load A had a phase sent in waves."""
    return any(doc["fit_load"].get("phases_in_step", ()))


def run_base(doc: Mapping[str, Any], base: Profile) -> Profile:
    """``base`` with the run's KV capacity and its clients' fit's wake-up."""
    stalls = doc["fits"]["bench"]["stalls"]
    wake = {k: stalls[k] for k in ("wake_s", "wake_tau_s", "wake_max_idle_s")}
    profile = base.with_vllm(num_gpu_blocks=doc["fits"]["metrics"]["num_gpu_blocks"])
    return dataclasses.replace(profile, stalls=dataclasses.replace(profile.stalls, **wake))


def load_b(doc: Mapping[str, Any]) -> ServingLoad:
    """Load B as the run recorded it."""
    check = doc["check_load"]
    return ServingLoad(
        num_requests=check["num_requests"],
        prompt_tokens=check["prompt_tokens"],
        output_tokens=check["output_tokens"],
        max_concurrency=check["max_concurrency"],
    )


def load_c_document(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Load C as a result file ``prescaler engine check`` reads: the saved send times
    and TTFTs, and the gaps and throughput as the bench's check measured them (the
    run kept no gaps of its own)."""
    requests = doc["rate_check_requests"]
    measured = {r["metric"]: r["measured"] for r in doc["rate_checks"]["fitted_from_bench"]["rows"]}
    n = len(requests["start_s"])
    prompt = doc["rate_check_load"]["prompt_tokens"]
    output = doc["rate_check_load"]["output_tokens"]
    return {
        "completed": n,
        "total_input_tokens": n * prompt,
        "total_output_tokens": n * output,
        "request_rate": doc["rate_check_load"]["request_rate"],
        "input_lens": [prompt] * n,
        "output_lens": [output] * n,
        "start_times": requests["start_s"],
        "ttfts": requests["ttft_s"],
        "median_ttft_ms": statistics.median(requests["ttft_s"]) * 1e3,
        "median_itl_ms": measured["itl_p50_ms"],
        "p90_itl_ms": measured["itl_p90_ms"],
        "p99_itl_ms": measured["itl_p99_ms"],
        "output_throughput": measured["output_tokens_per_s"],
    }


def refit(
    doc: Mapping[str, Any], clients: Clients, base: Profile, *, waves: bool = True
) -> dict[str, Any]:
    """``doc`` with its clients' fit made again under ``clients`` (without load A's
    waves where ``waves`` is False) and checked again."""
    runs = load_a_runs(doc, clients, waves=waves)
    fit = fit_to_measurements(run_base(doc, base), bench=runs, name=base.name)
    out = copy.deepcopy(dict(doc))
    out["refit"] = {
        "clients": clients,
        "waves": waves and has_waves(doc),
        **fit_record(fit),
        "load_a_errors": {t.name: t.fitted_error for t in fit.targets},
    }
    out["predictions"]["fitted_from_bench"] = load_b_prediction(
        fit.profile, load_b(doc), doc["real"]
    )
    check = check_profile(fit.profile, load_c_document(doc), "load C")
    out["rate_checks"]["fitted_from_bench"] = check_document(
        check, source="load C", tolerance=doc["target_relative_error"]
    )
    return out


def main(argv: Sequence[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m lab.profile_fit_refit OUT_DIR RUN.json...", file=sys.stderr)
        return 2
    out_dir = Path(argv[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    base = read_profile_file(BASE)
    docs = {Path(p): json.loads(Path(p).read_text()) for p in argv[1:]}
    # each description; a run with waves also without them, steady
    jobs = [(path, c, True) for path in docs for c in CLIENTS]
    jobs += [(path, "steady", False) for path, doc in docs.items() if has_waves(doc)]
    for path, clients, waves in tqdm(jobs, desc="refits", unit="fit"):
        result = refit(docs[path], clients, base, waves=waves)
        name = clients if waves else f"{clients}-no-waves"
        target = out_dir / f"{path.stem}-{name}.json"
        target.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
