"""Per-request time outside the scheduler (``request_overhead``): how it moves what a
client sees, what it leaves alone, and how profile files carry it."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.profile_files import parse_profile_text, profile_yaml
from engine.profile_schema import ProfileFileError
from engine.profile_types import Profile, RequestOverhead
from engine.profiles import get_profile
from engine.replica import Replica
from engine.requests import Request
from engine.serving_replay import ServingLoad, replay_load
from tests.support.replica_runs import run_requests

BASE = "llama-3-8b@g5.xlarge"


def _with(overhead: RequestOverhead, name: str = BASE) -> Profile:
    return dataclasses.replace(get_profile(name), request_overhead=overhead)


requests_st = st.lists(
    st.tuples(st.floats(0.0, 5.0), st.integers(1, 1500), st.integers(1, 300)),
    min_size=1,
    max_size=25,
)


@settings(max_examples=30, deadline=None)
@given(
    reqs=requests_st,
    out_fixed=st.floats(0.0, 0.2),
    out_per=st.floats(0.0, 0.002),
)
def test_the_way_out_shifts_each_record_and_leaves_the_engine_alone(
    reqs: list[tuple[float, int, int]], out_fixed: float, out_per: float
) -> None:
    """The engine runs the same steps; a record's first token is fixed + per later,
    its finish fixed + n x per later (the client's times)."""
    batch = [Request(f"r{i}", a, p, o) for i, (a, p, o) in enumerate(reqs)]
    plain, plain_recs = run_requests(get_profile(BASE), batch)
    way_out = RequestOverhead(out_fixed_s=out_fixed, out_per_output_token_s=out_per)
    late, late_recs = run_requests(_with(way_out), batch)
    assert late.steps_run == plain.steps_run
    by_id = {r.request_id: r for r in plain_recs}
    for rec in late_recs:
        ref = by_id[rec.request_id]
        assert rec.first_token_s is not None and ref.first_token_s is not None
        assert rec.first_token_s == pytest.approx(ref.first_token_s + out_fixed + out_per)
        assert rec.finish_s == pytest.approx(ref.finish_s + out_fixed + out_per * rec.output_tokens)


@settings(max_examples=30, deadline=None)
@given(reqs=requests_st, in_fixed=st.floats(0.001, 0.3), in_per=st.floats(0.0, 1e-4))
def test_the_way_in_is_a_later_arrival_at_the_scheduler(
    reqs: list[tuple[float, int, int]], in_fixed: float, in_per: float
) -> None:
    """A request on its way in joins the scheduler as if it had arrived fixed + per x
    prompt later: its record is that run's, with the client's arrival."""
    way_in = RequestOverhead(in_fixed_s=in_fixed, in_per_prompt_token_s=in_per)
    batch = [Request(f"r{i}", a, p, o) for i, (a, p, o) in enumerate(reqs)]
    shifted = [
        dataclasses.replace(r, arrival_s=r.arrival_s + in_fixed + in_per * r.prompt_tokens)
        for r in batch
    ]
    _, want = run_requests(get_profile(BASE), shifted)
    _, got = run_requests(_with(way_in), batch)
    want_by_id = {r.request_id: r for r in want}
    arrival = {r.request_id: r.arrival_s for r in batch}
    for rec in got:
        ref = want_by_id[rec.request_id]
        assert rec.arrival_s == arrival[rec.request_id]
        assert rec.first_token_s == pytest.approx(ref.first_token_s)
        assert rec.finish_s == pytest.approx(ref.finish_s)


def test_a_request_on_its_way_in_is_outstanding_not_waiting_and_can_be_aborted() -> None:
    replica = Replica(_with(RequestOverhead(in_fixed_s=0.5)))
    replica.submit(Request("a", 0.0, 100, 10))
    assert replica.num_outstanding == 1 and replica.num_waiting == 0
    assert replica.next_event_time() == pytest.approx(0.5)  # it joins then
    assert replica.next_token_time() == pytest.approx(0.5)
    rec = replica.abort("a")
    assert rec is not None and rec.first_token_s is None
    assert replica.next_event_time() is None and replica.num_outstanding == 0


def test_a_replay_adds_the_overhead_to_ttft_and_the_per_token_part_to_itl() -> None:
    load = ServingLoad(8, 256, 32, max_concurrency=1)
    plain = replay_load(get_profile(BASE), load)
    over = RequestOverhead(
        in_fixed_s=0.05, in_per_prompt_token_s=1e-4, out_fixed_s=0.02, out_per_output_token_s=1e-3
    )
    late = replay_load(_with(over), load)
    assert late.median_ttft_s == pytest.approx(plain.median_ttft_s + over.ttft_s(256), rel=1e-6)
    assert plain.median_itl_s is not None and late.median_itl_s is not None
    assert late.median_itl_s == pytest.approx(plain.median_itl_s + 1e-3, rel=1e-6)


def test_profile_files_carry_the_overhead_and_old_files_still_load() -> None:
    profile = get_profile(BASE)
    text = profile_yaml(profile)
    assert "request_overhead" not in text  # zero: left out, so old files are unchanged
    assert parse_profile_text(text, "old.yaml") == profile
    over = _with(RequestOverhead(in_fixed_s=0.03, out_fixed_s=0.01))
    again = parse_profile_text(profile_yaml(over), "new.yaml")
    assert again == over and again.request_overhead.in_fixed_s == 0.03
    doc = yaml.safe_load(text)
    doc["request_overhead"] = {"in_fixed_s": -1.0}
    with pytest.raises(ProfileFileError) as err:
        parse_profile_text(yaml.safe_dump(doc), "bad.yaml")
    assert "request_overhead.in_fixed_s" in str(err.value)
    doc["request_overhead"] = {"in_fixd_s": 0.1}
    with pytest.raises(ProfileFileError, match=r"request_overhead\.in_fixd_s"):
        parse_profile_text(yaml.safe_dump(doc), "bad.yaml")


def test_the_catalogue_has_no_overhead() -> None:
    """The built-ins' step-time efficiencies were fitted to end-to-end published figures,
    which already hold this time: their overhead stays zero."""
    from engine.profiles import PROFILES

    assert all(p.request_overhead == RequestOverhead() for p in PROFILES.values())
