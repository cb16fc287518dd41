"""Node pre-warming: pure balloon sizing (properties) and the PATCHes against a fake API."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kubernetes import client as k8s

from decision.policy import DemandForecast, ReplicaCapacity
from decision.prewarm import plan_balloons
from decision.settings import ScalerSettings, parse_settings
from scaler.sources.balloon import BalloonController, BalloonError
from tests.scaler.fake_kube_api import FakeKubeApi

ON = dataclasses.replace(
    ScalerSettings(prometheus_address="http://p:9090"), prewarm=True, max_replicas=20
)
CAP = ReplicaCapacity(requests_per_s=1.0, tokens_per_s=None)


def fc(upper: float) -> DemandForecast:
    return DemandForecast(180.0, 0.9, upper, upper / 2)


def plan(
    upper: float | None,
    ready: int = 2,
    desired: int = 2,
    current: int = 0,
    s: ScalerSettings = ON,
    cap: ReplicaCapacity = CAP,
):  # type: ignore[no-untyped-def]
    return plan_balloons(
        settings=s,
        forecast=None if upper is None else fc(upper),
        capacity=cap,
        ready_replicas=ready,
        desired_replicas=desired,
        current_balloons=current,
    )


def test_off_by_default() -> None:
    s = parse_settings({"prometheusAddress": "http://p:9090"})
    assert s.prewarm is False
    assert plan(50.0, s=s).replicas == 0
    assert plan(50.0, s=dataclasses.replace(ON, forecast="off")).reason == "off"


def test_balloons_cover_the_forecast_excess() -> None:
    p = plan(7.5, ready=2, desired=3)
    assert (p.replicas, p.reason, p.needed_replicas) == (5, "forecast", 8)  # ceil(7.5) - max(2, 3)
    assert plan(2.5, ready=3, desired=3).replicas == 0  # current capacity covers it
    assert plan(2.5, ready=3, desired=3).reason == "covered"


def test_balloons_cover_the_recent_days_peak_too() -> None:
    """Nodes for the event's fleet a node lead time ahead: the days' peak
    (6 req/s) sizes the balloons when the forecaster's band (1) is lower."""
    p = plan_balloons(
        settings=ON,
        forecast=DemandForecast(180.0, 0.9, 1.0, 0.5, None, 6.0, None),
        capacity=CAP,
        ready_replicas=2,
        desired_replicas=2,
        current_balloons=0,
    )
    assert (p.replicas, p.needed_replicas) == (4, 6)


def test_no_node_below_one_expected_request() -> None:
    """A fleet at zero: a band's tail (0.004 req/s, median 0) or one stray
    request on a past day (its one-minute peak 0.02 req/s, 0.8 requests
    over the horizon) would round up to a node; below the wake bar there
    is nothing to pre-warm for, as there is no replica to wake."""
    tail = DemandForecast(180.0, 0.9, 0.004, 0.0)
    stray = DemandForecast(180.0, 0.9, 0.0, 0.0, None, 0.02, None, 0.8)
    session = DemandForecast(180.0, 0.9, 0.0, 0.0, None, 2.0, None, 300.0)
    at_zero = {"ready_replicas": 0, "desired_replicas": 0, "current_balloons": 0}
    got = {
        name: plan_balloons(settings=ON, forecast=f, capacity=CAP, **at_zero)
        for name, f in (("tail", tail), ("stray", stray), ("session", session))
    }
    assert got["tail"].replicas == got["stray"].replicas == 0
    assert (got["session"].replicas, got["session"].reason) == (2, "forecast")


def test_bounded_by_max_replicas() -> None:
    p = plan(100.0, ready=15, desired=16)
    assert p.replicas == 4  # max_replicas 20 - 16


def test_shrinks_when_forecast_falls_and_holds_without_one() -> None:
    assert plan(10.0, current=0).replicas == 8
    assert plan(4.0, current=8).replicas == 2
    assert plan(None, current=8).replicas == 8  # no forecast: hold (neither drop nor buy)
    assert plan(None, current=8).reason == "no_forecast"
    assert plan(10.0, current=3, cap=ReplicaCapacity.unknown()).replicas == 3


@settings(max_examples=300, deadline=None)
@given(
    st.floats(0, 500),
    st.floats(0, 500),
    st.integers(0, 40),
    st.integers(0, 40),
    st.integers(1, 60),
    st.integers(0, 10),
)
def test_properties(
    u1: float, u2: float, ready: int, desired: int, max_replicas: int, current: int
) -> None:
    """Bounded by max - max(ready, desired); monotone in the forecast; never negative."""
    s = dataclasses.replace(ON, max_replicas=max_replicas)
    lo, hi = sorted((u1, u2))
    a = plan(lo, ready=ready, desired=desired, current=current, s=s)
    b = plan(hi, ready=ready, desired=desired, current=current, s=s)
    assert 0 <= a.replicas <= b.replicas
    assert b.replicas <= max(0, max_replicas - max(ready, desired))
    if b.needed_replicas is not None and b.needed_replicas <= max(ready, desired):
        assert b.replicas == 0


# ---------------------------------------------------------------------------
# BalloonController against a fake kube-apiserver
# ---------------------------------------------------------------------------


@pytest.fixture
def api() -> Iterator[FakeKubeApi]:
    fake = FakeKubeApi({("llm", "prescaler-balloon"): 0}).start()
    try:
        yield fake
    finally:
        fake.stop()


def controller(api: FakeKubeApi, **kw: float) -> BalloonController:
    return BalloonController(k8s.ApiClient(k8s.Configuration(host=api.url)), **kw)  # type: ignore[arg-type]


def test_patches_the_scale_subresource_only_on_change(api: FakeKubeApi) -> None:
    bc = controller(api)
    assert bc.apply("llm", "prescaler-balloon", 0) is False  # already 0: read, no PATCH
    assert bc.apply("llm", "prescaler-balloon", 3) is True
    assert bc.apply("llm", "prescaler-balloon", 3) is False
    assert bc.apply("llm", "prescaler-balloon", 1) is True
    patches = api.patches()
    assert [p.body for p in patches] == [{"spec": {"replicas": 3}}, {"spec": {"replicas": 1}}]
    assert {p.path for p in patches} == {
        "/apis/apps/v1/namespaces/llm/deployments/prescaler-balloon/scale"
    }
    assert {p.content_type for p in patches} == {"application/merge-patch+json"}
    assert api.deployments[("llm", "prescaler-balloon")] == 1
    assert [c.method for c in api.calls].count("GET") == 1


def test_reverifies_after_an_outside_edit(api: FakeKubeApi) -> None:
    now = [0.0]
    bc = controller(api, verify_after_s=60, clock=lambda: now[0])  # type: ignore[arg-type]
    assert bc.apply("llm", "prescaler-balloon", 2) is True
    api.deployments[("llm", "prescaler-balloon")] = 5  # someone scaled it by hand
    assert bc.apply("llm", "prescaler-balloon", 2) is False  # cached: no API call
    now[0] = 61.0
    assert bc.apply("llm", "prescaler-balloon", 2) is True  # re-read, corrected
    assert api.deployments[("llm", "prescaler-balloon")] == 2


def test_errors_are_balloon_errors(api: FakeKubeApi) -> None:
    bc = controller(api)
    with pytest.raises(BalloonError, match="404"):
        bc.apply("llm", "missing", 1)
    api.fail_patch = True
    with pytest.raises(BalloonError, match="500"):
        bc.apply("llm", "prescaler-balloon", 4)
    api.fail_patch = False
    assert bc.apply("llm", "prescaler-balloon", 4) is True  # retried after the failure
    with pytest.raises(ValueError):
        bc.apply("llm", "prescaler-balloon", -1)


def test_unreachable_api_is_a_balloon_error() -> None:
    cfg = k8s.Configuration(host="http://127.0.0.1:9")
    cfg.retries = False  # type: ignore[attr-defined]
    bc = BalloonController(k8s.ApiClient(cfg))
    with pytest.raises(BalloonError):
        bc.apply("llm", "prescaler-balloon", 1)
