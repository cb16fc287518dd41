"""A replica's cold start as a simulation input: named presets and per-phase overrides.

The profiles carry the optimised case (a node in about a minute, a cached
image, an engine with its compile and weight caches: about 2.5 min for an 8B
model). Fresh GPU nodes pulling a multi-GB vLLM image and loading a large
model take several times that, and how much a scaler gains from predicting
depends on it, so a run can state its own lead time. The presets span what
public measurements give (docs/simulator.md, "Lead time"; the figures behind
them are in docs/facts.md section 6).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from engine.profile_types import Profile, StartupTimes

__all__ = ["LEAD_TIME_PRESETS", "LeadTimePreset", "resolve_startup", "with_startup"]


@dataclass(frozen=True)
class LeadTimePreset:
    """A named cold start: its phases and the case it stands for."""

    startup: StartupTimes
    case: str


LEAD_TIME_PRESETS: dict[str, LeadTimePreset] = {
    "8b-cached": LeadTimePreset(
        StartupTimes(node_ready_s=60.0, image_pull_s=30.0, model_load_s=60.0),
        "8B on g5: node Ready with its GPU advertised in about a minute, image pre-cached "
        "or lazily loaded, engine start with compile and weight caches (the profiles' default)",
    ),
    "8b-cold-engine": LeadTimePreset(
        StartupTimes(node_ready_s=90.0, image_pull_s=30.0, model_load_s=180.0),
        "8B on g5: a slower GPU node, image cached, but the engine starts without its "
        "compile cache (3 min, the low end of a 3-5 min cold vLLM start)",
    ),
    "8b-uncached-image": LeadTimePreset(
        StartupTimes(node_ready_s=90.0, image_pull_s=420.0, model_load_s=90.0),
        "8B on g5: a ~10 GB vLLM image pulled and extracted through overlayfs "
        "(7 min, the low end of 7-10 min), engine with caches",
    ),
    "70b-uncached": LeadTimePreset(
        StartupTimes(node_ready_s=120.0, image_pull_s=480.0, model_load_s=300.0),
        "70B on p4d/p5 (TP 8): an 8-GPU node, an uncached ~12 GB image, and an engine "
        "start of P2P check, weight load, compile and CUDA graphs",
    ),
    "inf2-compile": LeadTimePreset(
        StartupTimes(node_ready_s=60.0, image_pull_s=300.0, model_load_s=540.0),
        "inf2: the Neuron image pulled, then the model loaded and compiled (up to about "
        "10 min when not served from a pre-compiled cache)",
    ),
}
"""From about 2.5 min to about 15 min in total, fastest first."""


def resolve_startup(
    base: StartupTimes,
    *,
    preset: str | None = None,
    node_ready_s: float | None = None,
    image_pull_s: float | None = None,
    model_load_s: float | None = None,
) -> StartupTimes:
    """``base`` (the profile's), replaced by ``preset``'s phases, then by each
    phase given on its own: a preset with one phase changed reads as stated."""
    startup = base
    if preset is not None:
        found = LEAD_TIME_PRESETS.get(preset)
        if found is None:
            raise ValueError(
                f"unknown lead-time preset {preset!r} (known: {', '.join(LEAD_TIME_PRESETS)})"
            )
        startup = found.startup
    phases = {"node_ready_s": node_ready_s, "image_pull_s": image_pull_s}
    phases["model_load_s"] = model_load_s
    given = {k: v for k, v in phases.items() if v is not None}
    for name, value in given.items():
        if not (math.isfinite(value) and value >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return dataclasses.replace(startup, **given) if given else startup


def with_startup(profile: Profile, startup: StartupTimes | None) -> Profile:
    """``profile`` with its cold start replaced (itself when ``startup`` is None
    or already its own, so a default run keeps the very same object)."""
    if startup is None or startup == profile.startup:
        return profile
    return dataclasses.replace(profile, startup=startup)
