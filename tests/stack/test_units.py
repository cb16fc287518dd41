"""The stack's pieces that need no Prometheus: time scaling, flags, the load generator.

Time compression must be the same everywhere (docs/stack.md): every
time-valued trigger key and ``prescaler serve`` interval divided by K,
nothing else in the manifest's metadata touched (the trigger keys are those
of decision.settings, parsed by the live scaler). The load generator follows
the simulator's request rules (simulations.simulation): each request ends
exactly once, vLLM's 400 is a rejection with its message.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from decision.settings import parse_settings
from prescaler.cli import build_parser
from simulations.autoscaling.scaledobject import load_scaledobject
from simulations.simulation import COMPLETED, REJECTED
from simulations.traffic import DEFAULT_TOKENS_TRACE, Workload
from stack.loadgen import STOPPED, Clock, LoadGenerator
from stack.run import (
    DEFAULT_SCALEDOBJECT,
    TIME_KEYS,
    StackOptions,
    StackRun,
    scaled_metadata,
    scaler_flags,
)
from stack.warmup import ANSWER_WALL_S, WarmupDeadline
from tests.stack.support import burst_workload
from tests.support.emulator import async_emulator


def test_scaled_metadata_divides_time_keys_only() -> None:
    """At speed K every time-valued key is the manifest's value / K (auto: the
    profile's cold start / K); the other keys are the manifest's, and the live
    scaler's parser accepts the result."""
    so = load_scaledobject(DEFAULT_SCALEDOBJECT)
    meta = scaled_metadata(so, 10.0, "http://127.0.0.1:1", "127.0.0.1:2")
    settings = parse_settings(meta)
    assert settings.lead_time_seconds == pytest.approx(15.0)  # auto -> 150 s cold start / 10
    assert settings.scale_down_stabilization_seconds == pytest.approx(30.0)
    assert settings.stale_after_seconds == pytest.approx(6.0)
    assert settings.fallback_after_seconds == pytest.approx(18.0)
    assert settings.node_lead_time_seconds == pytest.approx(18.0)
    assert meta["prometheusAddress"] == "http://127.0.0.1:1"
    for key, value in so.trigger.metadata.items():
        if key not in (*TIME_KEYS, "prometheusAddress", "scalerAddress"):
            assert meta[key] == str(value)
    same = scaled_metadata(so, 1.0, "http://127.0.0.1:1", "x")
    assert same["leadTimeSeconds"] == so.trigger.metadata["leadTimeSeconds"]


def test_scaler_flags_divide_intervals() -> None:
    """prescaler serve's refresh, refit, forecast step, fit window and rate window are / K."""
    flags = scaler_flags(5.0)
    values = dict(zip(flags[::2], flags[1::2], strict=True))
    assert float(values["--refresh-seconds"]) == 1.0
    assert float(values["--refit-seconds"]) == 120.0
    assert float(values["--forecast-step-seconds"]) == 3.0
    assert float(values["--fit-window-seconds"]) == 3 * 86400.0 / 5.0
    assert float(values["--rate-window-seconds"]) == 24.0
    odd = dict(zip(*(iter(scaler_flags(5.8)),) * 2, strict=True))
    args = build_parser().parse_args(["serve", *(x for kv in odd.items() for x in kv)])
    from scaler.cli import _check

    assert _check(args) is None  # serve accepts them at any speed


@pytest.mark.parametrize(
    "argv",
    [["--speed", "nan"], ["--speed", "-1"], ["--duration", "0"], ["--policy", "oracle"]],
)
def test_cli_rejects_bad_flags(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """NaN, negatives and unknown policies are usage errors (exit 2)."""
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["stack", *argv])
    assert exc.value.code == 2


class _OneReplica:
    def __init__(self, url: str) -> None:
        self.url = url
        self.outstanding = 0

    def routable(self) -> list[_OneReplica]:
        return [self]

    async def wait_routable(self, timeout_s: float) -> bool:
        return True


def test_loadgen_ends_each_request_once() -> None:
    """Requests replayed against one emulator: completions carry TTFT and E2E, a
    request beyond the model's length is rejected with vLLM's message, and every
    request ends exactly once."""
    workload = Workload(
        arrival_s=np.array([0.0, 0.05, 0.1, 0.15]),
        prompt_tokens=np.array([100, 200, 50_000, 10], dtype=np.int64),
        output_tokens=np.array([5, 3, 4, 1], dtype=np.int64),
        name="unit",
        duration_s=1.0,
    )

    async def main() -> LoadGenerator:
        async with async_emulator() as server:
            lg = LoadGenerator(workload, _OneReplica(server.url), timeout_s=30.0)
            await lg.run(Clock(time.monotonic(), 1.0), asyncio.Event())
            return lg

    lg = asyncio.run(main())
    lg.check()
    assert lg.status.tolist() == [COMPLETED, COMPLETED, REJECTED, COMPLETED]
    assert np.all(np.isfinite(lg.ttft_s[[0, 1, 3]]))
    assert np.all(lg.e2e_s[[0, 1, 3]] >= lg.ttft_s[[0, 1, 3]])
    assert len(lg.reasons) == 1 and "maximum context length" in next(iter(lg.reasons))


def test_missing_prometheus_is_one_clear_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without the prometheus binary the command says how to install it, in one line,
    and exits 1 before starting anything."""
    import stack.processes

    monkeypatch.setattr(stack.processes, "prometheus_binary", lambda: None)
    args = build_parser().parse_args(["stack", "--duration", "30", "--no-view"])
    assert args.func(args) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "apt-get install -y prometheus" in err


class _FakeClock:
    """A wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _stack_run(speed: float) -> StackRun:
    opts = StackOptions(
        trace=str(DEFAULT_TOKENS_TRACE), speed=speed, duration_s=60.0, rate_scale=0.5, view=False
    )
    return StackRun(opts)


@pytest.mark.parametrize("speed", [0.5, 1.0, 1.2, 1.25, 10.0, 120.0])
def test_warmup_polls_after_settling_at_every_speed(speed: float) -> None:
    """At any speed (1 and below too) the settling wait ends with the answer budget
    still whole: the scaler is polled, and an answering scaler ends the warm-up.
    (The deadline used to be counted from before the settling wait, which at speed 1
    is 150 s, so speeds below 1.25 failed before their first poll.)"""
    clock = _FakeClock()
    warm = _stack_run(speed).warmup_deadline(clock)
    assert warm.settle_s == pytest.approx(150.0 / speed)
    clock.now += warm.settle_left()
    assert warm.settle_left() == 0.0 and not warm.expired()
    assert warm.deadline - clock.now >= ANSWER_WALL_S
    assert warm.answers_needed == 2
    assert not warm.answered()
    clock.now += 1.0
    assert warm.answered()


@given(
    settle=st.floats(0.0, 1e5),
    answer=st.floats(1e-3, 1e5),
    polls=st.lists(st.one_of(st.none(), st.text(min_size=1, max_size=20)), max_size=30),
)
def test_warmup_deadline_counts_from_the_end_of_settling(
    settle: float, answer: float, polls: list[str | None]
) -> None:
    """Expired exactly when the clock passes settle + answer from the start, whatever
    the polls saw; an error resets the run of answers; the failure always says why."""
    clock = _FakeClock()
    warm = WarmupDeadline(settle_s=settle, answer_s=answer, answers_needed=3, clock=clock)
    clock.now += settle
    assert not warm.expired()
    run = 0
    for poll in polls:
        if poll is None:
            run += 1
            assert warm.answered() == (run >= 3)
        else:
            run = 0
            warm.failed(poll)
    assert warm.answers_in_a_row == run
    clock.now += answer
    assert warm.expired()
    message = warm.failure()
    assert f"{settle:g} s" in message and f"{answer:g} s" in message
    errors = [p for p in polls if p is not None]
    if not polls:
        assert "never polled" in message
    elif errors:
        assert f"last error: {errors[-1]}" in message


def test_warmup_rejects_impossible_budgets() -> None:
    """A zero answer budget is a ValueError naming every value."""
    with pytest.raises(ValueError, match="answer 0 s"):
        WarmupDeadline(settle_s=1.0, answer_s=0.0, answers_needed=1, clock=_FakeClock())


def test_request_in_flight_at_the_stop_is_stopped_not_rejected() -> None:
    """A stream cut by the run's stop ends as stopped: no rejection, no reason, and
    the check that every request ended once still holds."""
    workload = Workload(
        arrival_s=np.array([0.0]),
        prompt_tokens=np.array([100], dtype=np.int64),
        output_tokens=np.array([4000], dtype=np.int64),
        name="unit",
        duration_s=1.0,
    )

    async def main() -> LoadGenerator:
        stop = asyncio.Event()
        async with async_emulator() as server:
            lg = LoadGenerator(
                workload,
                _OneReplica(server.url),
                timeout_s=30.0,
                on_first_token=lambda _: stop.set(),
            )
            await lg.run(Clock(time.monotonic(), 1.0), stop)
            return lg

    lg = asyncio.run(main())
    lg.check()
    assert lg.status.tolist() == [STOPPED]
    assert lg.stopped == 1 and not lg.reasons


def test_a_multi_trigger_scaledobject_is_refused_by_name() -> None:
    """The stack's controller polls one trigger: a ScaledObject with two is refused
    before anything starts, naming how many it has (running only the first would
    rehearse a different ScaledObject)."""
    example = Path(__file__).parents[2] / "simulations/data/scaledobjects/queue-and-kv-cache.yaml"
    opts = StackOptions(
        trace=str(DEFAULT_TOKENS_TRACE),
        duration_s=60.0,
        rate_scale=0.5,
        view=False,
        scaledobject=str(example),
    )
    with pytest.raises(ValueError, match="one trigger; this one has 2"):
        StackRun(opts)


def _run_of(workload: Workload | None = None, **options: Any) -> StackRun:
    """A stack run built (nothing started) on the shipped trace at half its rate."""
    return StackRun(
        StackOptions(trace=str(DEFAULT_TOKENS_TRACE), rate_scale=0.5, view=False, **options),
        workload=workload,
    )


def test_the_stack_is_told_its_bound_and_opening_fleet() -> None:
    """As ``prescaler simulate``: the bound is the ScaledObject's maxReplicaCount (the
    reactive one's the stated ``max_replicas``), and the opening fleet is stated or
    sized from the traffic before the window, never from the window's own demand."""
    burst = burst_workload()
    predictive = _run_of(burst)
    assert predictive.bound == predictive.so.keda.max_replica_count
    assert predictive.opening == 1  # no traffic before it: a fresh deployment
    reactive = _run_of(burst, policy="reactive", max_replicas=7)
    assert reactive.bound == reactive.so.keda.max_replica_count == 7
    assert _run_of(burst, initial_replicas=5).opening == 5
    later = _run_of(start_s=1800.0, duration_s=30.0)
    assert later.opening > 1  # sized from the traffic before the window
    with pytest.raises(ValueError, match="max_replicas"):
        _run_of(burst, policy="reactive", max_replicas=0)


def test_the_scaler_at_a_speed_counts_profile_capacity_at_it() -> None:
    """``stack.speed ... serve`` hands the scaler its speed, which ``ScalerState``
    gives its trackers as a parameter: a tracked ScaledObject's profile capacity
    is K x the profile's."""
    from decision.capacity import capacity_for
    from scaler.state import ScalerState
    from scaler.telemetry import ScalerTelemetry

    settings = parse_settings(
        {
            "prometheusAddress": "http://prometheus:9090",
            "selector": 'app="vllm"',
            "profile": "llama-3-8b@g5.xlarge",
        }
    )
    state = ScalerState(telemetry=ScalerTelemetry(), speed=4.0)
    state.register("ns", "llama", settings)
    tracker = state.objects[("ns", "llama")].tracker
    assert tracker.capacity(0.0) == capacity_for(settings, 4.0)
    assert tracker.capacity(0.0).tokens_per_s == pytest.approx(
        4.0 * (capacity_for(settings).tokens_per_s or 0.0)
    )
