"""A ScaledObject with tuned trigger metadata applied straight to its parsed
spec: the tests' shortcut for what ``prescaler tune`` writes through the
manifest (``simulations.tune.manifest``) and reads back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from decision.settings import parse_settings
from simulations.autoscaling.scaledobject import ScaledObjectSpec
from simulations.tune.search import merged_metadata


def apply_metadata(base: ScaledObjectSpec, tuned: Mapping[str, str]) -> ScaledObjectSpec:
    """``base`` with its trigger metadata updated by ``tuned``; keys not
    searched are kept as the user wrote them. ``fallbackReplicas`` is raised
    to ``minReplicas`` when the new floor would put it out of range (the
    parser refuses that), and the result is parsed by the live parser."""
    trig = base.prescaler_trigger
    if trig is None:
        raise ValueError(
            f"{base.name}: the ScaledObject has no prescaler external trigger; only its "
            "metadata can be tuned"
        )
    meta = merged_metadata(trig.metadata, tuned)
    mine = replace(trig, metadata=meta, settings=parse_settings(meta))
    if base.trigger is trig:
        return replace(base, trigger=mine)
    extra = tuple(mine if t is trig else t for t in base.extra_triggers)
    return replace(base, extra_triggers=extra)
