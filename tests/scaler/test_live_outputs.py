"""scaler.live_outputs: the sink of live steps exports them to the scaler's
metrics and sizes the balloon Deployment on its own thread."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pytest

from decision.tracker_data import TrackerConfig, TrackerStep
from scaler.live_outputs import LiveOutputs
from scaler.registry import Entry, ObjectRegistry
from scaler.sources import Selection
from scaler.telemetry import ScalerTelemetry
from tests.scaler.test_state import meta, queue_of

CONFIG = TrackerConfig(
    refresh_interval_s=1.0, refit_interval_s=20.0, forecast_step_s=2.0, fit_window_s=60.0
)


class Balloons:
    """A balloon controller that records its PATCHes, or fails them."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.applied: list[tuple[str, str, int]] = []
        self.called = threading.Event()

    def apply(self, namespace: str, deployment: str, replicas: int) -> None:
        self.called.set()
        if self.fail:
            raise RuntimeError("API server said no")
        self.applied.append((namespace, deployment, replicas))


def samples(telemetry: ScalerTelemetry, name: str) -> dict[str, float]:
    out = {}
    for line in telemetry.render().decode().splitlines():
        if line.startswith(name + "{"):
            labels, value = line.rsplit(" ", 1)
            out[labels[len(name) :]] = float(value)
    return out


def stepped(entry: Entry, t: float, waiting: float = 12) -> TrackerStep:
    return entry.tracker.step(t, queue_of(waiting=waiting)(Selection(), t), t)


def entry_with(**extra: str) -> Entry:
    objects = ObjectRegistry(CONFIG)
    objects.register("ns", "a", meta(**extra))
    return objects[("ns", "a")]


def wait_until(predicate: Callable[[], bool]) -> None:
    """The balloon thread's outcome, polled (it runs on its own thread)."""
    deadline = time.monotonic() + 10.0
    while not predicate():
        assert time.monotonic() < deadline, "the balloon thread did not finish"
        time.sleep(0.01)


def test_a_step_is_exported_to_the_metrics() -> None:
    telemetry = ScalerTelemetry()
    outputs = LiveOutputs(telemetry, Balloons())
    entry = entry_with()
    step = stepped(entry, 10.0)
    outputs.stepped(entry, step, 10.0)
    obj = '{namespace="ns",scaledobject="a"}'
    assert samples(telemetry, "prescaler_desired_replicas") == {obj: step.decision.replicas}
    assert samples(telemetry, "prescaler_ready_replicas") == {obj: 2.0}
    demand = samples(telemetry, "prescaler_demand")
    assert demand['{namespace="ns",scaledobject="a",signal="waiting"}'] == 12.0
    assert demand['{namespace="ns",scaledobject="a",signal="tokens_per_s"}'] == 150.0
    outputs.close()


def test_the_gateway_rate_is_exported_as_its_own_demand_signal() -> None:
    """With gatewayRateQuery the gateway's rate is ``signal="gateway_requests_per_s"``
    beside vLLM's ``requests_per_s`` (at zero replicas only the gateway sees
    demand); without the key, or while it is unknown, there is no such series."""
    gateway = "sum(rate(gateway_requests_total[1m]))"
    obj = '{namespace="ns",scaledobject="a",signal='
    for rate, expected in ((7.5, 7.5), (None, None)):
        telemetry = ScalerTelemetry()
        outputs = LiveOutputs(telemetry)
        entry = entry_with(gatewayRateQuery=gateway)
        idle = queue_of(waiting=0, ready=0, arrival=0.0)(Selection(), 10.0)
        reading = replace(idle, gateway_rate_rps=rate)
        outputs.stepped(entry, entry.tracker.step(10.0, reading, 10.0), 10.0)
        demand = samples(telemetry, "prescaler_demand")
        assert demand[obj + '"requests_per_s"}'] == 0.0
        assert demand.get(obj + '"gateway_requests_per_s"}') == expected
        outputs.close()
    plain = ScalerTelemetry()
    entry = entry_with()
    LiveOutputs(plain).stepped(entry, stepped(entry, 10.0), 10.0)
    assert not any("gateway" in labels for labels in samples(plain, "prescaler_demand"))


def test_settled_forecasts_export_their_accuracy() -> None:
    telemetry = ScalerTelemetry()
    outputs = LiveOutputs(telemetry)
    entry = entry_with(forecast="auto", leadTimeSeconds="6")
    for t in range(1, 90):
        rate = 5.0 + 4.0 * math.sin(t / 7.0)
        entry.tracker.step(float(t), queue_of(waiting=0, arrival=rate)(Selection(), t), t)
    outputs.settled(entry)
    errors = samples(telemetry, "prescaler_forecast_abs_percentage_error")
    assert errors and all(math.isfinite(v) and v >= 0 for v in errors.values())
    assert all('namespace="ns",scaledobject="a"' in labels for labels in errors)
    outputs.close()


def test_prewarm_patches_once_per_new_size() -> None:
    balloons = Balloons()
    outputs = LiveOutputs(ScalerTelemetry(), balloons)
    entry = entry_with(prewarm="true", prewarmDeployment="warm-nodes")
    outputs.stepped(entry, stepped(entry, 10.0), 10.0)
    wait_until(lambda: entry.balloons_applied)
    assert balloons.applied == [("ns", "warm-nodes", 0)]
    balloons.called.clear()
    outputs.stepped(entry, stepped(entry, 11.0), 11.0)  # same size, already applied
    outputs.close()
    assert not balloons.called.is_set() and len(balloons.applied) == 1


def test_a_failed_patch_is_retried_at_the_next_step(caplog: pytest.LogCaptureFixture) -> None:
    balloons = Balloons(fail=True)
    outputs = LiveOutputs(ScalerTelemetry(), balloons)
    entry = entry_with(prewarm="true")
    with caplog.at_level(logging.WARNING, logger="scaler.live_outputs"):
        outputs.stepped(entry, stepped(entry, 10.0), 10.0)
        wait_until(lambda: any("API server said no" in r.message for r in caplog.records))
    assert not entry.balloons_applied
    balloons.fail = False
    outputs.stepped(entry, stepped(entry, 11.0), 11.0)
    wait_until(lambda: entry.balloons_applied)
    assert balloons.applied == [("ns", "prescaler-balloon", 0)]
    outputs.close()


def test_objects_without_prewarm_never_patch() -> None:
    balloons = Balloons()
    outputs = LiveOutputs(ScalerTelemetry(), balloons)
    entry = entry_with()
    for t in (10.0, 11.0):
        outputs.stepped(entry, stepped(entry, t), t)
    outputs.close()
    assert not balloons.called.is_set()
