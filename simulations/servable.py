"""What a replica of a profile can hold of a workload, and at what rate.

Apart from the event loop because policies, the static-fleet search and the
live stack size fleets with the same rules the simulated router applies.
"""

from __future__ import annotations

import numpy as np

from decision.capacity import RequestShape, profile_capacity
from decision.policy import ReplicaCapacity
from engine.profiles import Profile
from engine.replica import Replica, RequestRejected
from simulations.traffic import Workload

__all__ = ["rejections", "servable", "workload_capacity"]


def servable(workload: Workload, profile: Profile) -> np.ndarray:
    """Mask of the requests a replica of ``profile`` can hold (the rest are
    rejected at once and load nothing)."""
    lim = Replica(profile).limits
    total = workload.prompt_tokens + workload.output_tokens
    return (total <= lim.max_model_len) & (total <= lim.kv_tokens)


def workload_capacity(workload: Workload, profile: Profile) -> ReplicaCapacity:
    """One replica's sustainable rate (``decision.capacity``) at the mean shape of
    the requests it can serve."""
    ok = servable(workload, profile)
    if ok.any():
        shape = RequestShape(
            max(1, round(float(np.mean(workload.prompt_tokens[ok])))),
            max(1, round(float(np.mean(workload.output_tokens[ok])))),
        )
    else:
        shape = RequestShape()
    return profile_capacity(profile, mix=shape)


def rejections(workload: Workload, profile: Profile) -> dict[int, str]:
    """vLLM's answer to each request it cannot hold, by request index (the
    same on every replica of ``profile``, so the router asks once per run)."""
    probe = Replica(profile)
    lim = probe.limits
    prompt = workload.prompt_tokens
    output = workload.output_tokens
    total = prompt + output
    suspicious = np.flatnonzero(
        (total > lim.max_model_len) | (total > lim.kv_tokens) | (total > lim.max_num_batched_tokens)
    )
    out: dict[int, str] = {}
    for i in suspicious.tolist():
        try:
            probe.check_request(int(prompt[i]), int(output[i]))
        except RequestRejected as exc:
            out[i] = str(exc)
    return out
