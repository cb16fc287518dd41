"""Helpers of the stack tests: a stack run on a short window of the shipped trace."""

from __future__ import annotations

import io
from typing import Any

from simulations.traffic import DEFAULT_TOKENS_TRACE, Workload
from stack.run import StackOptions, StackRun
from tests.support.synthetic_traffic import synthetic_workload


def burst_workload(seed: int = 0) -> Workload:
    """Five minutes at 1 req/s with a 3x burst from t=170 s for two minutes: after
    the warm-start fleet's look-ahead (one 150 s start-up), so both policies must
    scale up during the run."""
    return synthetic_workload(
        duration_s=300.0,
        base_rps=1.0,
        seed=seed,
        bursts=((170.0, 120.0, 3.0),),
        prompt_tokens=(1024.0, 1.0),
        output_tokens=(256.0, 1.0),
        name="burst",
    )


def short_run(workload: Workload | None = None, **overrides: Any) -> StackRun:
    """A stack run over the shipped trace's first minutes at half its rate, opening with
    the fleet its first demand needs, stated (3 replicas; 2 for a :func:`burst_workload`)."""
    opts: dict[str, Any] = {
        "trace": str(DEFAULT_TOKENS_TRACE),
        "policy": "predictive",
        "speed": 10.0,
        "duration_s": 120.0,
        "rate_scale": 0.5,
        "view": False,
        "initial_replicas": 3 if workload is None else 2,
    }
    opts.update(overrides)
    return StackRun(StackOptions(**opts), out=io.StringIO(), workload=workload)
