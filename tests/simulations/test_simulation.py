"""The simulation core: routing, time-outs, rejections, pod loss, Prometheus view."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from engine.profiles import get_profile
from simulations.policies import PolicySpec, make_controller
from simulations.scrape import PrometheusDown, PrometheusView, ScrapeSample
from simulations.simulation import (
    COMPLETED,
    REJECTED,
    TIMED_OUT,
    SimConfig,
    SimResult,
    Simulation,
    SloBudgetExceeded,
)
from simulations.traffic import Workload
from tests.support.synthetic_traffic import synthetic_workload

PROFILE = get_profile("llama-3-8b@g5.xlarge")


def _workload(
    arrivals: list[float], prompt: int = 200, output: int = 20, duration: float = 60.0
) -> Workload:
    n = len(arrivals)
    return Workload(np.array(arrivals), np.full(n, prompt), np.full(n, output), "w", duration)


def _run(workload: Workload, replicas: int = 1, kind: str = "static", **config: Any) -> SimResult:
    spec = PolicySpec(kind, kind, replicas=replicas if kind == "static" else None)  # type: ignore[arg-type]
    sim = Simulation(
        workload, PROFILE, make_controller(spec, workload, PROFILE), SimConfig(**config)
    )  # type: ignore[arg-type]
    return sim.run()


def test_every_request_completes_on_a_warm_fleet() -> None:
    """A light load on a warm fleet completes every request, with TTFT and E2E recorded."""
    r = _run(_workload([1.0, 2.0, 3.0, 10.0]), replicas=2)
    assert (r.status == COMPLETED).all()
    assert np.isfinite(r.ttft_s).all() and (r.ttft_s > 0).all()
    assert (r.e2e_s >= r.ttft_s).all()
    assert r.max_replicas == 2 and r.mean_replicas == pytest.approx(2.0)


def test_router_spreads_by_outstanding_requests() -> None:
    """Least outstanding requests: two simultaneous requests on two idle replicas each
    get a replica of their own, so both see the unloaded TTFT."""
    one = _run(_workload([5.0]), replicas=2)
    two = _run(_workload([5.0, 5.0]), replicas=2)
    assert two.ttft_s == pytest.approx([one.ttft_s[0]] * 2, rel=1e-6)


def test_too_long_a_prompt_is_rejected_with_vllms_reason() -> None:
    """vLLM refuses a prompt + output beyond max_model_len with its own message."""
    w = Workload(np.array([1.0, 2.0]), np.array([100, 9000]), np.array([10, 10]), "w", 30.0)
    r = _run(w)
    assert list(r.status) == [COMPLETED, REJECTED]
    (reason,) = r.rejected_reasons
    assert "maximum context length is 8192 tokens" in reason


def test_client_time_out_without_first_token() -> None:
    """A request still queued at the gateway (no Ready replica) when the client's
    time-out passes is timed out; the count of outcomes stays conserved."""
    w = _workload([1.0, 2.0], duration=30.0)
    r = _run(w, replicas=0, timeout_s=5.0)
    assert list(r.status) == [TIMED_OUT, TIMED_OUT]
    assert np.isnan(r.ttft_s).all()


def test_overload_times_out_queued_requests_on_the_replica() -> None:
    """Requests waiting inside vLLM past the time-out are aborted there; ones that
    already streamed a token run to completion (the client keeps reading)."""
    w = _workload([0.5 + 0.01 * i for i in range(400)], prompt=2000, output=400, duration=20.0)
    r = _run(w, replicas=1, timeout_s=10.0)
    assert (r.status == TIMED_OUT).sum() > 0
    done = r.status == COMPLETED
    assert (r.ttft_s[done] <= 10.0 + 1e-9).all()


def test_scrape_view_sees_load_one_scrape_late() -> None:
    """The Prometheus view only changes at scrapes, every scrape interval."""
    view = PrometheusView(15.0, 120.0)
    assert view.reading() is None
    view.record(ScrapeSample(0.0, 2, (0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0)))
    view.record(ScrapeSample(15.0, 2, (4.0, 6.0, 0.8), (3.0, 4.0, 0.5), (30.0, 3e4, 3e3, 0.0)))
    assert view.gauge("vllm:num_requests_waiting", "sum") == 4.0
    assert view.gauge("vllm:num_requests_waiting", "avg") == 2.0
    assert view.gauge("vllm:gpu_cache_usage_perc", "max") == 0.5
    assert view.rate("vllm:request_success_total") == pytest.approx(2.0)
    # arrivals = completions + growth of waiting + running over the window
    assert view.arrival_rate() == pytest.approx(2.0 + 10.0 / 120.0)
    reading = view.reading()
    assert reading is not None and reading.ready_replicas == 2 and reading.kv_usage == 0.4


def test_rates_use_only_the_window() -> None:
    """rate(x[W]) is the increase between the first and last sample within W."""
    view = PrometheusView(15.0, 30.0)
    for k, total in enumerate([0.0, 0.0, 100.0, 130.0]):
        view.record(ScrapeSample(15.0 * k, 1, (0, 0, 0), (0, 0, 0), (total, 0, 0, 0)))
    assert view.rate("vllm:request_success_total") == pytest.approx(130.0 / 30.0)
    assert view.query("sum", "vllm:num_requests_running") == 0.0


def test_a_down_prometheus_scrapes_nothing_and_answers_nothing() -> None:
    """Down: a scrape is dropped, every query raises, the tracker's reading is
    None. Back: queries answer from what it scraped before and after, the
    rate over the samples the window holds."""
    view = PrometheusView(15.0, 60.0)
    for k, total in enumerate([0.0, 30.0]):
        view.record(ScrapeSample(15.0 * k, 1, (2, 0, 0), (2, 0, 0), (total, 0, 0, 0)))
    view.set_up(False)
    view.record(ScrapeSample(30.0, 1, (9, 0, 0), (9, 0, 0), (60.0, 0, 0, 0)))
    assert view.reading() is None and not view.up
    with pytest.raises(PrometheusDown):
        view.gauge("vllm:num_requests_waiting", "sum")
    with pytest.raises(PrometheusDown):
        view.rate("vllm:request_success_total")
    view.set_up(True)
    assert view.gauge("vllm:num_requests_waiting", "sum") == 2.0  # the 30 s scrape was missed
    view.record(ScrapeSample(45.0, 1, (4, 0, 0), (4, 0, 0), (90.0, 0, 0, 0)))
    assert view.rate("vllm:request_success_total") == pytest.approx(90.0 / 45.0)
    assert view.reading() is not None


def test_prometheus_view_validates() -> None:
    """A rate window shorter than two scrapes could never hold two samples."""
    with pytest.raises(ValueError, match="rate_window_s"):
        PrometheusView(15.0, 20.0)
    with pytest.raises(ValueError, match="scrape_interval_s"):
        PrometheusView(float("nan"), 120.0)


@pytest.mark.parametrize(
    "field,value",
    [
        ("timeout_s", 0.0),
        ("slo_ttft_s", float("nan")),
        ("seed", -1),
        ("prometheus_outage", (60.0, 30.0)),
        ("prometheus_outage", (-1.0, 30.0)),
        ("prometheus_outage", (0.0, float("inf"))),
    ],
)
def test_config_validates(field: str, value: float) -> None:
    """SimConfig refuses non-finite, non-positive settings with the field named."""
    with pytest.raises(ValueError, match=field):
        SimConfig(**{field: value})  # type: ignore[arg-type]


def test_two_simulations_share_nothing() -> None:
    """Same seed, same inputs: identical results, run after run (no global state)."""
    w = synthetic_workload(duration_s=120.0, base_rps=2.0, seed=3, prompt_tokens=(300, 0.5))
    a = _run(w, replicas=2)
    b = _run(w, replicas=2)
    np.testing.assert_array_equal(a.status, b.status)
    np.testing.assert_array_equal(a.ttft_s, b.ttft_s)
    assert a.cost_usd == b.cost_usd


def test_oracle_scales_ahead_of_a_burst() -> None:
    """The oracle raises the Deployment a lead time before a burst, so Ready replicas
    are up when it arrives."""
    w = synthetic_workload(
        duration_s=900.0,
        base_rps=0.5,
        seed=1,
        bursts=((500.0, 200.0, 30.0),),
        prompt_tokens=(500, 0.3),
        output_tokens=(100, 0.3),
    )
    r = _run(w, kind="oracle")
    tl = r.timeline
    ready_at_burst = tl["ready"][np.searchsorted(tl["t"], 505.0)]
    ready_before = tl["ready"][np.searchsorted(tl["t"], 100.0)]
    assert ready_at_burst > ready_before
    assert (r.status == COMPLETED).mean() > 0.99


def test_spot_interruption_retries_in_flight_requests() -> None:
    """A node interrupted mid-run: its pod stops taking requests at the notice, and
    whatever is still in flight when it is gone is retried once elsewhere."""
    w = _workload(
        [float(t) for t in np.arange(1.0, 400.0, 0.25)], prompt=300, output=300, duration=420.0
    )
    r = _run(w, replicas=2, interruptions=((100.0, 0), (100.0, 1)))
    assert r.spot_interruptions >= 1
    assert int(
        (r.status == COMPLETED).sum() + (r.status == TIMED_OUT).sum() + (r.status == REJECTED).sum()
    ) == len(w)
    assert r.retried >= 0


def test_miss_budget_stops_a_hopeless_run() -> None:
    """A search may cap the misses: the run stops as soon as it has more."""
    w = _workload([0.1 * i for i in range(1, 600)], prompt=1500, output=200, duration=61.0)
    sim = Simulation(
        w,
        PROFILE,
        make_controller(PolicySpec("s", "static", replicas=1), w, PROFILE),
        SimConfig(),
        miss_budget=5,
    )
    with pytest.raises(SloBudgetExceeded):
        sim.run()


def test_injected_interruptions_are_validated() -> None:
    """An injected interruption needs a finite time and a node id >= 0."""
    with pytest.raises(ValueError, match="interruptions"):
        SimConfig(interruptions=((float("inf"), 0),))
    with pytest.raises(ValueError, match="interruptions"):
        SimConfig(interruptions=((10.0, -1),))


class _ScaleInAt:
    """Opens with ``opening`` replicas and scales to ``to`` at ``at_s``."""

    name = "scale-in"

    def __init__(self, opening: int, to: int, at_s: float) -> None:
        self.opening, self.to, self.at_s = opening, to, at_s

    def initial_replicas(self, sim: Simulation) -> int:
        return self.opening

    def start(self, sim: Simulation) -> None:
        sim.queue.schedule(self.at_s, 1, lambda t: sim.scale_deployment(t, self.to))

    def timeline_extra(self) -> dict[str, float]:
        return {}


def test_an_idle_pod_scaled_in_frees_its_node_without_waiting_out_its_grace() -> None:
    """A scaled-in pod with nothing in flight exits at once: its node is empty
    from then on and Karpenter's on-demand consolidateAfter (600 s) counts from
    there, not from the end of the 120 s grace period; a busy pod first
    finishes what it holds (no request is lost)."""
    idle = _workload([700.0], duration=900.0)
    sim = Simulation(idle, PROFILE, _ScaleInAt(2, 1, 10.0), SimConfig())
    r = sim.run()
    tl = r.timeline
    at = int(np.searchsorted(tl["t"], 650.0))  # 10 + 600 + a loop and a TTL < 650
    assert tl["nodes_on_demand"][0] == 2 and tl["nodes_on_demand"][at] == 1
    busy = _workload([float(t) for t in np.arange(0.0, 20.0, 0.25)], output=400, duration=300.0)
    r = Simulation(busy, PROFILE, _ScaleInAt(2, 1, 10.0), SimConfig()).run()
    assert (r.status == COMPLETED).all() and r.retried == 0
