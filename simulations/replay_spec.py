"""How a trace is replayed: the flags ``simulate`` and ``tune`` share, as one value.

Its own module, below both commands, so ``simulate`` names it without
importing the tuner.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from decision.tracker_data import TrackerConfig
from simulations.sim_inputs import SimInputs
from simulations.traffic import TrafficOptions

__all__ = ["ReplaySpec"]


@dataclass(frozen=True)
class ReplaySpec:
    """How a trace is replayed: the flags ``simulate`` and ``tune`` share
    (:func:`simulations.cli.replay_spec_from` reads them)."""

    profile: str
    slo_ttft_s: float = 1.0
    timeout_s: float = 60.0
    rate_scale: float = 1.0
    start_s: float = 0.0
    duration_s: float | None = None
    seed: int = 0
    tokens_from: str | None = None
    arrivals: Literal["poisson", "gamma"] = "poisson"
    cv: float = 1.0
    forecaster: str | None = None
    spot: bool = False
    scrape_interval_s: float = 15.0
    rate_window_s: float = 120.0
    refit_interval_s: float = TrackerConfig.refit_interval_s
    """The scaler's ``--refit-seconds``: how often its tracker refits."""
    backfill: bool = True
    inputs: SimInputs | None = None
    """Bounds, capacity belief, lead time (:mod:`simulations.sim_inputs`); None: defaults."""

    def fields(self) -> dict[str, Any]:
        """Each replay field by name, not copied (keywords for another options value)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(ReplaySpec)}

    def traffic(self, tokens_from: str | None = None) -> TrafficOptions:
        """The trace-to-workload half of the spec; ``tokens_from`` stands in for
        the spec's own (a trace fetched from Prometheus carries its tokens)."""
        tokens = tokens_from if tokens_from is not None else self.tokens_from
        return TrafficOptions(
            rate_scale=self.rate_scale,
            start_s=self.start_s,
            duration_s=self.duration_s,
            seed=self.seed,
            arrivals=self.arrivals,
            cv=self.cv,
            tokens_from=Path(tokens) if tokens else None,
        )
