"""Stalls between steps (``EngineStalls``): the replica, the profile file, the sizing."""

from __future__ import annotations

import dataclasses
import statistics

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.percentile import percentile
from engine.profile_files import parse_profile_text, profile_yaml
from engine.profile_schema import ProfileFileError
from engine.profile_types import EngineStalls, Profile
from engine.profiles import PROFILES, get_profile
from engine.replica import Replica
from engine.requests import Request
from engine.serving_replay import ServingLoad, replay_load
from tests.support.replica_runs import run_looking, run_requests

BASE = "llama-3-8b@g5.xlarge"
#: A closed loop that keeps the replica busy the whole run.
BUSY = ServingLoad(num_requests=300, prompt_tokens=256, output_tokens=128, max_concurrency=8)


def _with(stalls: EngineStalls, name: str = BASE) -> Profile:
    return dataclasses.replace(get_profile(name), stalls=stalls)


def _requests(
    until_s: float, prompt: int, output: int, least: int, most: int, *, distinct: bool = False
) -> st.SearchStrategy[list[tuple[float, int, int]]]:
    """(arrival, prompt, output) lists; ``distinct``: no two arrivals at one instant."""
    item = st.tuples(st.floats(0.0, until_s), st.integers(1, prompt), st.integers(1, output))
    if distinct:
        return st.lists(item, min_size=least, max_size=most, unique_by=lambda r: r[0])
    return st.lists(item, min_size=least, max_size=most)


def test_working_stalls_take_their_share_of_the_busy_time_and_leave_the_median_gap() -> None:
    plain = replay_load(get_profile(BASE), BUSY)
    for share in (0.1, 0.3):
        stalled = replay_load(_with(EngineStalls(share=share, mean_s=0.2)), BUSY)
        # the same work over a longer busy time: throughput falls by about the share
        assert stalled.output_throughput / plain.output_throughput == pytest.approx(
            1.0 - share, abs=0.05
        )
        assert stalled.median_itl_s == pytest.approx(plain.median_itl_s, rel=0.02)
        assert statistics.fmean(stalled.itls) > 1.05 * statistics.fmean(plain.itls)


def test_stalls_on_admission_make_a_ttft_tail_and_leave_the_median() -> None:
    plain = replay_load(get_profile(BASE), BUSY)
    stalled = replay_load(_with(EngineStalls(admit_chance=0.15, admit_mean_s=0.3)), BUSY)
    assert stalled.median_ttft_s == pytest.approx(plain.median_ttft_s, rel=0.25)
    assert percentile(stalled.ttfts, 99) > percentile(plain.ttfts, 99) + 0.2


def test_a_replica_stalls_the_same_way_under_one_seed_and_otherwise_under_another() -> None:
    profile = _with(EngineStalls(share=0.2, mean_s=0.05, admit_chance=0.1, admit_mean_s=0.1))
    batch = [Request(f"r{i}", 0.05 * i, 300, 100) for i in range(60)]
    first = [r.finish_s for r in run_requests(profile, batch)[1]]
    again = [r.finish_s for r in run_requests(profile, batch)[1]]
    assert first == again
    other = Replica(profile, stall_seed=7)
    finishes = []
    for req in batch:
        finishes += [r.finish_s for r in other.advance_to(req.arrival_s)]
        other.submit(req)
    while (t := other.next_event_time()) is not None:
        finishes += [r.finish_s for r in other.advance_to(t)]
    assert finishes != first


@settings(max_examples=25, deadline=None)
@given(
    reqs=_requests(5.0, 1500, 300, 1, 20),
    share=st.floats(0.01, 0.6),
    mean_s=st.floats(0.001, 0.5),
    chance=st.floats(0.0, 1.0),
)
def test_every_request_finishes_its_tokens_and_one_alone_only_waits(
    reqs: list[tuple[float, int, int]], share: float, mean_s: float, chance: float
) -> None:
    """Stalls change when tokens come, never how many; a request alone on the
    replica finishes no earlier than it would without them."""
    stalls = EngineStalls(share=share, mean_s=mean_s, admit_chance=chance, admit_mean_s=mean_s)
    batch = [Request(f"r{i}", a, p, o) for i, (a, p, o) in enumerate(reqs)]
    _, records = run_requests(_with(stalls), batch)
    assert sorted(r.request_id for r in records) == sorted(r.request_id for r in batch)
    by_id = {r.request_id: r for r in batch}
    assert all(r.output_tokens == by_id[r.request_id].output_tokens for r in records)
    alone = batch[:1]
    _, [plain] = run_requests(get_profile(BASE), alone)
    _, [late] = run_requests(_with(stalls), alone)
    assert late.finish_s >= plain.finish_s - 1e-9


@settings(max_examples=15, deadline=None)
@given(share=st.floats(0.05, 0.5), mean_s=st.floats(0.005, 0.2))
def test_a_jump_stalls_where_single_steps_do(share: float, mean_s: float) -> None:
    """A steady jump ends in the step where the work before a stall runs out, so
    jumping and stepping one by one wait out the same stalls."""
    profile = _with(EngineStalls(share=share, mean_s=mean_s))
    batch = [Request(f"r{i}", 0.0, 200, 400) for i in range(4)]
    _, jumped = run_requests(profile, batch)
    _, stepped = run_requests(profile, batch, jump=False)
    ends = sorted(r.finish_s for r in jumped)
    assert ends == pytest.approx(sorted(r.finish_s for r in stepped), rel=1e-3)


def test_sizing_counts_the_stalled_share() -> None:
    plain = get_profile(BASE).saturated_throughput()
    stalled = _with(EngineStalls(share=0.25, mean_s=0.1)).saturated_throughput()
    assert stalled.output_tokens_per_s == pytest.approx(0.75 * plain.output_tokens_per_s)
    assert stalled.step_s == plain.step_s


def test_profile_files_carry_the_stalls_and_old_files_still_load() -> None:
    profile = get_profile(BASE)
    text = profile_yaml(profile)
    assert "stalls" not in text  # none: left out, so old files are unchanged
    stalled = _with(EngineStalls(share=0.2, mean_s=0.01, admit_chance=0.1, admit_mean_s=0.3))
    assert parse_profile_text(profile_yaml(stalled), "new.yaml") == stalled
    doc = yaml.safe_load(text)
    for bad, key in (
        ({"share": 0.95, "mean_s": 0.1}, "stalls"),
        ({"share": 0.2}, "stalls"),
        ({"admit_chance": 1.5, "admit_mean_s": 0.1}, "stalls"),
        ({"shar": 0.1}, "stalls.shar"),
    ):
        doc["stalls"] = bad
        with pytest.raises(ProfileFileError) as err:
            parse_profile_text(yaml.safe_dump(doc), "bad.yaml")
        assert key in str(err.value)


def test_the_catalogue_has_no_stalls() -> None:
    """Stalls are a measured server's; the built-ins model the steps alone."""
    assert all(not p.stalls.active for p in PROFILES.values())


@settings(max_examples=25, deadline=None)
@given(
    # distinct arrival times: two at one instant meet a step planned between them
    # if the driver looks in between, stalls or not
    reqs=_requests(3.0, 800, 200, 2, 15, distinct=True),
    share=st.floats(0.1, 0.6),
    chance=st.floats(0.0, 1.0),
)
def test_a_stall_holds_the_next_step_whoever_looks_at_the_replica(
    reqs: list[tuple[float, int, int]], share: float, chance: float
) -> None:
    """Asking when the next event or token comes never plans a step a stall still
    holds: a request that arrives during a stall joins the step after it, and the
    records are the same whether or not the driver looked before each arrival."""
    stalls = EngineStalls(share=share, mean_s=0.05, admit_chance=chance, admit_mean_s=0.05)
    profile = _with(stalls)
    batch = sorted(
        (Request(f"r{i}", a, p, o) for i, (a, p, o) in enumerate(reqs)), key=lambda r: r.arrival_s
    )
    _, quiet = run_requests(profile, batch)
    records = run_looking(profile, batch)
    by_id = {r.request_id: (r.first_token_s, r.finish_s) for r in quiet}
    assert {r.request_id: (r.first_token_s, r.finish_s) for r in records} == by_id
