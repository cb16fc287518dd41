"""An idle engine's wake-up (``EngineStalls.wake_s``): the replica and the profile file."""

from __future__ import annotations

import dataclasses
import math

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.profile_files import parse_profile_text, profile_yaml
from engine.profile_schema import ProfileFileError
from engine.profile_types import EngineStalls, Profile
from engine.profiles import get_profile
from engine.requests import Request, RequestRecord
from engine.serving_replay import ServingLoad, replay_load
from tests.support.replica_runs import run_looking, run_requests

BASE = "llama-3-8b@g5.xlarge"
WAKE = EngineStalls(wake_s=0.02, wake_tau_s=0.1)


def _with(stalls: EngineStalls) -> Profile:
    return dataclasses.replace(get_profile(BASE), stalls=stalls)


def _ttft(record: RequestRecord) -> float:
    assert record.first_token_s is not None
    return record.first_token_s - record.arrival_s


@pytest.mark.parametrize("idle_s", [0.005, 0.1, 0.5, 3.0])
def test_a_request_after_an_idle_pause_waits_the_wake_up_and_no_more(idle_s: float) -> None:
    """The second request's first token is late by exactly the wake-up its idle
    time before it gives; the first, sent at the replica's start, waits nothing."""
    first = Request("a", 0.0, 300, 20)
    _, [plain_first] = run_requests(get_profile(BASE), [first])
    end = plain_first.finish_s
    pair = [first, Request("b", end + idle_s, 300, 20)]
    _, plain = run_requests(get_profile(BASE), pair)
    _, woken = run_requests(_with(WAKE), pair)
    by_id = {r.request_id: r for r in plain}
    late = {r.request_id: _ttft(r) - _ttft(by_id[r.request_id]) for r in woken}
    assert late["a"] == 0.0
    expected = WAKE.wake_s * (1.0 - math.exp(-idle_s / WAKE.wake_tau_s))
    assert late["b"] == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert WAKE.wake_after_s(idle_s) == pytest.approx(expected)


def test_a_request_arriving_during_the_wake_up_joins_its_step() -> None:
    """The wake holds the step, not the request: one sent a moment later is
    scheduled with the first, both first tokens at the same instant."""
    woken = _with(WAKE)
    _, records = run_requests(woken, [Request("a", 1.0, 100, 5), Request("b", 1.004, 100, 5)])
    firsts = {r.request_id: r.first_token_s for r in records}
    assert firsts["a"] == firsts["b"]
    assert firsts["a"] is not None and firsts["a"] > 1.0 + 0.99 * WAKE.wake_s


def test_a_busy_replica_never_wakes() -> None:
    """Every request after the first arrives while others run: the same records
    with and without the wake-up (the first arrives at the replica's start)."""
    load = ServingLoad(num_requests=60, prompt_tokens=200, output_tokens=64, max_concurrency=4)
    plain = replay_load(get_profile(BASE), load)
    woken = replay_load(_with(WAKE), load)
    assert woken.ttfts == plain.ttfts
    assert woken.output_throughput == plain.output_throughput


@settings(max_examples=30, deadline=None)
@given(
    reqs=st.lists(
        st.tuples(st.floats(0.0, 4.0), st.integers(1, 600), st.integers(1, 60)),
        min_size=1,
        max_size=12,
        unique_by=lambda r: r[0],
    ),
    wake_s=st.floats(0.001, 0.3),
    tau_s=st.floats(0.001, 2.0),
)
def test_the_wake_up_changes_when_tokens_come_never_how_many_whoever_looks(
    reqs: list[tuple[float, int, int]], wake_s: float, tau_s: float
) -> None:
    """Every request gets its tokens, none earlier than without a wake-up only
    where it was alone, and a driver that asks for the next event before each
    arrival sees the same records as one that does not."""
    profile = _with(EngineStalls(wake_s=wake_s, wake_tau_s=tau_s))
    batch = sorted(
        (Request(f"r{i}", a, p, o) for i, (a, p, o) in enumerate(reqs)), key=lambda r: r.arrival_s
    )
    _, quiet = run_requests(profile, batch)
    assert sorted(r.request_id for r in quiet) == sorted(r.request_id for r in batch)
    outputs = {r.request_id: r.output_tokens for r in batch}
    assert all(r.output_tokens == outputs[r.request_id] for r in quiet)
    records = run_looking(profile, batch)
    by_id = {r.request_id: (r.first_token_s, r.finish_s) for r in quiet}
    assert {r.request_id: (r.first_token_s, r.finish_s) for r in records} == by_id
    _, [plain_alone] = run_requests(get_profile(BASE), batch[:1])
    _, [woken_alone] = run_requests(profile, batch[:1])
    assert woken_alone.finish_s == pytest.approx(
        plain_alone.finish_s + profile.stalls.wake_after_s(batch[0].arrival_s), rel=1e-9
    )


def test_profile_files_carry_the_wake_up_and_refuse_one_without_its_time_constant() -> None:
    woken = _with(EngineStalls(share=0.1, mean_s=0.01, wake_s=0.004, wake_tau_s=0.05))
    assert parse_profile_text(profile_yaml(woken), "new.yaml") == woken
    doc = yaml.safe_load(profile_yaml(get_profile(BASE)))
    for bad in ({"wake_s": 0.01}, {"wake_s": -0.01, "wake_tau_s": 0.1}):
        doc["stalls"] = bad
        with pytest.raises(ProfileFileError) as err:
            parse_profile_text(yaml.safe_dump(doc), "bad.yaml")
        assert "stalls" in str(err.value) and "wake" in str(err.value)


def test_past_its_cap_the_wake_up_stops_growing() -> None:
    """``wake_max_idle_s``: 5 s idle waits what 0.5 s does, 0.2 s less."""
    capped = _with(EngineStalls(wake_s=0.05, wake_tau_s=2.0, wake_max_idle_s=0.5))
    lates = []
    for idle_s in (0.2, 0.5, 5.0):
        _, [record] = run_requests(capped, [Request("a", idle_s, 200, 4)])
        _, [plain] = run_requests(get_profile(BASE), [Request("a", idle_s, 200, 4)])
        lates.append(_ttft(record) - _ttft(plain))
    assert lates[2] == pytest.approx(lates[1], rel=1e-9) and lates[0] < lates[1]
    assert lates[1] == pytest.approx(capped.stalls.wake_after_s(0.5), rel=1e-9)
