"""The known truth behind the profile-fit fixtures: a base profile and the altered one
the synthetic measurements were made from (``tests/engine/data/profile_fit``)."""

from __future__ import annotations

import dataclasses

from engine.profile_types import RequestOverhead
from engine.profiles import Profile, get_profile
from engine.serving_replay import ServingLoad

BASE = "llama-3-8b@g5.xlarge"
#: The device the fixture's "server" ran: the base's A10G, slower than the base
#: thinks (memory 0.6 instead of 0.8 of peak, compute 0.45 instead of 0.6, 3 ms
#: per step instead of 1.5).
TRUE_HARDWARE = {"eta_mem": 0.6, "eta_compute": 0.45, "step_overhead_s": 0.003}
#: Its time per request outside the scheduler: none (the fit keeps the base's none
#: when its input cannot tell this time from prefill).
TRUE_REQUEST_OVERHEAD = RequestOverhead()
#: The load of the fixture benchmark: 200 requests of 512 + 128 tokens, 16 clients.
BENCH_LOAD = ServingLoad(200, 512, 128, max_concurrency=16)
BENCH_FIXTURE = "vllm_bench_serve_synthetic.json"


def true_profile() -> Profile:
    base = get_profile(BASE)
    hardware = dataclasses.replace(
        base.hardware,
        eta_mem=TRUE_HARDWARE["eta_mem"],
        eta_compute=TRUE_HARDWARE["eta_compute"],
        step_overhead_s=TRUE_HARDWARE["step_overhead_s"],
    )
    return dataclasses.replace(base, hardware=hardware, request_overhead=TRUE_REQUEST_OVERHEAD)


if __name__ == "__main__":
    # regenerate the fixture: python -m tests.engine.profile_fit_truth
    import json
    from pathlib import Path

    from tests.engine.synthetic_vllm import synthetic_bench_document

    out = Path(__file__).parent / "data" / "profile_fit" / BENCH_FIXTURE
    out.write_text(
        json.dumps(synthetic_bench_document(true_profile(), BENCH_LOAD), indent=2) + "\n"
    )
    print(out)
