"""Conservation: every request ends exactly once, whatever the load, policy or failures.

The simulator's own contract (and the design's): each request ends as
completed, timed out (client time-out) or rejected with a reason; none is
lost, including when spot interruptions take pods away mid-request (their
requests are retried once, then fail as rejected). ``Simulation.run``
raises ConservationError otherwise; these properties drive it over random
synthetic workloads, settings and injected interruption times.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.profiles import get_profile
from simulations.policies import PolicySpec, make_controller, predictive_spec, reactive_spec
from simulations.simulation import COMPLETED, PENDING, REJECTED, TIMED_OUT, SimConfig, Simulation
from tests.support.synthetic_traffic import synthetic_workload

PROFILE = get_profile("llama-3-8b@g5.xlarge")


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[object, ...]:
    duration = draw(st.floats(60.0, 400.0))
    rate = draw(st.floats(0.0, 6.0))
    seed = draw(st.integers(0, 10_000))
    bursts = draw(
        st.lists(
            st.tuples(st.floats(0.0, duration), st.floats(5.0, 120.0), st.floats(0.0, 6.0)),
            max_size=2,
        )
    )
    prompt = (draw(st.floats(16.0, 6000.0)), draw(st.floats(0.0, 1.5)))
    output = (draw(st.floats(1.0, 800.0)), draw(st.floats(0.0, 1.5)))
    workload = synthetic_workload(
        duration_s=duration,
        base_rps=rate,
        seed=seed,
        bursts=tuple(bursts),
        prompt_tokens=prompt,
        output_tokens=output,
    )
    kind = draw(st.sampled_from(["static", "oracle", "reactive", "predictive"]))
    if kind == "static":
        spec = PolicySpec("static", "static", replicas=draw(st.integers(0, 4)))
    elif kind == "oracle":
        spec = PolicySpec("oracle", "oracle")
    elif kind == "reactive":
        spec = reactive_spec(draw(st.integers(1, 6)))
    else:
        spec = predictive_spec(PROFILE.name, max_replicas=draw(st.integers(1, 6)))
    interruptions = tuple(
        draw(
            st.lists(st.tuples(st.floats(-200.0, duration + 200.0), st.integers(0, 6)), max_size=4)
        )
    )
    config = SimConfig(
        timeout_s=draw(st.floats(1.0, 120.0)),
        slo_ttft_s=draw(st.floats(0.05, 5.0)),
        seed=seed,
        warm_start=draw(st.booleans()),
        spot=draw(st.booleans()),
        interruptions=interruptions,
        cluster_overrides=(
            ("spot_interruptions_per_hour", draw(st.sampled_from([0.0, 5.0, 60.0]))),
        ),
    )
    return workload, spec, config


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_every_request_ends_exactly_once(scenario: tuple[object, ...]) -> None:
    """Completed + timed out + rejected = requests; each rejection has a reason; TTFT
    exists exactly for requests that got a token (kubernetes-free invariant of the
    simulator, design: "none disappears, including on spot interruption")."""
    workload, spec, config = scenario
    assert isinstance(spec, PolicySpec) and isinstance(config, SimConfig)
    sim = Simulation(workload, PROFILE, make_controller(spec, workload, PROFILE), config)  # type: ignore[arg-type]
    r = sim.run()  # raises ConservationError on a lost or doubly-ended request
    n = len(workload)  # type: ignore[arg-type]
    assert r.status.size == n
    assert not (r.status == PENDING).any()
    counts = {k: int((r.status == k).sum()) for k in (COMPLETED, TIMED_OUT, REJECTED)}
    assert sum(counts.values()) == n
    assert sum(r.rejected_reasons.values()) == counts[REJECTED]
    done = r.status == COMPLETED
    assert np.isfinite(r.ttft_s[done]).all()
    assert np.isnan(r.ttft_s[r.status == REJECTED]).all()
    # a timed-out request never had a token before its client's deadline
    assert not (r.ttft_s[r.status == TIMED_OUT] <= config.timeout_s).any()
    assert r.cost_usd >= 0 and r.gpu_hours >= 0


def test_heavy_spot_churn_conserves_requests() -> None:
    """Spot nodes interrupted every few minutes under load: requests are retried or
    fail, never lost, and every interruption is counted."""
    workload = synthetic_workload(
        duration_s=1800.0, base_rps=3.0, seed=5, prompt_tokens=(800, 0.8), output_tokens=(200, 0.8)
    )
    config = SimConfig(
        spot=True,
        cluster_overrides=(("spot_interruptions_per_hour", 12.0), ("termination_grace_s", 5.0)),
    )
    spec = reactive_spec(8)
    r = Simulation(workload, PROFILE, make_controller(spec, workload, PROFILE), config).run()
    assert r.spot_interruptions > 0
    assert r.retried > 0
    total = sum(int((r.status == k).sum()) for k in (COMPLETED, TIMED_OUT, REJECTED))
    assert total == len(workload)
