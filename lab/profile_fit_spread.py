"""Which loads tell the profile-fit bench's fits apart.

Why: fits of the same kind of load A, each meeting load A's medians about
equally well, predicted load B's median TTFT anywhere from 31 % low to 56 %
high. If the fits differ in a direction load A does not see, a load that
does see it tells them apart, and belongs in load A. Each kept run's fitted
profile is rebuilt from what the run recorded (the base, the fitted
hardware figures, the time outside the engine, the stalls and the KV
capacity) and replayed on load B and on waves of long prompts sent together
(``WAVES``, the phase the bench's load A now ends with); where the run had
that phase, what the clients saw in it is printed beside. A refit's file
(``lab.profile_fit_refit``) prints its refit.
Run: ``.venv/bin/python -m lab.profile_fit_spread RUN.json...``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.profile_files import read_profile_file
from engine.profile_types import EngineStalls, Profile
from engine.serving_replay import ServingLoad, replay_load
from lab.profile_fit_refit import BASE, load_b
from tests.vllm.test_profile_fit_bench import FIT_OUTPUT, WAVE_PHASE

#: Four clients in waves of 448-token prompts, 48-token outputs: the bench's
#: ``WAVE_PHASE``, 30 waves of it (120 requests; a run's 25 s held about 80 - 120).
WAVES = ServingLoad(
    num_requests=120,
    prompt_tokens=WAVE_PHASE[2],
    output_tokens=FIT_OUTPUT,
    max_concurrency=WAVE_PHASE[0],
)


def fitted_profile(fit: Mapping[str, Any], base: Profile) -> Profile:
    """A run's fitted profile from its record (``fits.bench`` or ``fits.metrics``):
    the base with the fitted hardware figures, KV capacity, fixed time on the way in
    and stalls (the fit determines no other part of the time outside the engine)."""
    hardware = dataclasses.replace(base.hardware, **fit["hardware"])
    vllm = dataclasses.replace(
        base.vllm, num_gpu_blocks=fit["num_gpu_blocks"], block_size=fit["block_size"]
    )
    overhead = dataclasses.replace(
        base.request_overhead, in_fixed_s=fit["request_overhead_in_fixed_s"]
    )
    return dataclasses.replace(
        base,
        hardware=hardware,
        vllm=vllm,
        request_overhead=overhead,
        stalls=EngineStalls(**fit["stalls"]),
    )


def _waves_seen(doc: Mapping[str, Any]) -> Mapping[str, float] | None:
    """What the clients saw in load A's waves (None: the run had none)."""
    fit_load = doc["fit_load"]
    seen_by_clients = fit_load["seen_by_clients"]
    in_step = fit_load.get("phases_in_step", [False] * len(seen_by_clients))
    waves = [seen for seen, wave in zip(seen_by_clients, in_step, strict=True) if wave]
    return waves[0] if waves else None


def spread_row(doc: Mapping[str, Any], fit_name: str, base: Profile) -> dict[str, float | None]:
    """One run's fit: its step-time factors, load B's TTFT predicted and measured,
    and the waves' TTFT predicted (and measured, where load A had them), in ms. A
    refit (``lab.profile_fit_refit``'s output) is read as its refit: load B as it
    recorded it, the waves replayed where it recorded its hardware (older refits
    did not: no prediction)."""
    refit = doc.get("refit")
    fit = refit if refit is not None else doc["fits"][fit_name]
    rebuilt = "hardware" in fit
    profile = fitted_profile(fit, base) if rebuilt else None
    if refit is not None:
        b_ttft = doc["predictions"]["fitted_from_bench"]["predicted"]["median_ttft_s"]
    else:
        assert profile is not None
        b_ttft = replay_load(profile, load_b(doc)).median_ttft_s
    seen = _waves_seen(doc)
    return {
        "compute": fit["factors"].get("compute"),
        "bandwidth": fit["factors"].get("bandwidth"),
        "b_ttft_ms": 1e3 * b_ttft,
        "b_real_ms": 1e3 * doc["real"]["median_ttft_s"],
        "waves_ttft_ms": None
        if profile is None
        else 1e3 * replay_load(profile, WAVES).median_ttft_s,
        "waves_real_ms": None if seen is None else 1e3 * seen["median_ttft_s"],
    }


def _cell(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(paths: Sequence[Path], fit_name: str = "bench") -> str:
    """A markdown table, one row per run."""
    base = read_profile_file(BASE)
    lines = [
        "| run | compute | bandwidth | B TTFT p50 ms (real) | waves TTFT p50 ms (real) |",
        "|---|---|---|---|---|",
    ]
    for path in paths:
        row = spread_row(json.loads(path.read_text()), fit_name, base)
        lines.append(
            f"| {path.stem} | {_cell(row['compute'], 2)} | {_cell(row['bandwidth'], 2)} | "
            f"{_cell(row['b_ttft_ms'])} ({_cell(row['b_real_ms'])}) | "
            f"{_cell(row['waves_ttft_ms'])} ({_cell(row['waves_real_ms'])}) |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    if not argv:
        print("usage: python -m lab.profile_fit_spread RUN.json...", file=sys.stderr)
        return 2
    print(table([Path(p) for p in argv]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
