"""decision.queue_hold through decide(): replicas asked for and still starting count before the
queue term asks for more (the cold-start stampede)."""

from __future__ import annotations

import dataclasses
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from decision.policy import Decision, Observation, ReplicaCapacity, decide
from decision.queue_hold import STARTING_PATIENCE, queue_hold
from decision.settings import ScalerSettings, parse_settings

BASE = ScalerSettings(prometheus_address="http://p:9090", max_replicas=64)
UNKNOWN = ReplicaCapacity.unknown()
LEAD = 150.0
DT = 5.0


def obs(t: float, ready: int, waiting: float, kv: float = 0.5) -> Observation:
    return Observation(
        time_s=t,
        ready_replicas=ready,
        waiting=waiting,
        running=4.0 * ready,
        kv_usage=kv,
        arrival_rate_rps=2.5,
        prompt_tokens_per_s=0.0,
        generation_tokens_per_s=0.0,
        preemptions_per_s=0.0,
        data_age_s=1.0,
    )


def run(
    readings: list[Observation], lead_s: float | None = LEAD, history: list[Decision] | None = None
) -> list[Decision]:
    """Decide each reading in turn, as the tracker does."""
    made = list(history or [])
    for o in readings:
        made.append(decide(o, None, BASE, made, UNKNOWN, lead_s=lead_s))
    return made[len(history or []) :]


def growing_backlog(ready: int, start: float, steps: int, growth: float) -> list[Observation]:
    """One saturated replica's queue growing while nothing new is ready."""
    return [obs(start + i * DT, ready, 24.0 + growth * i) for i in range(steps)]


def test_a_queue_growing_while_replicas_start_asks_once() -> None:
    """Waiting 24 asks for 8 (target 3); the queue that then grows to 84 while
    those 7 replicas start is theirs to drain, not a reason for 28."""
    made = run(growing_backlog(1, 0.0, 21, 3.0))
    assert made[0].replicas == 8 and made[0].reason == "queue"
    assert {d.replicas for d in made} == {8}
    assert made[-1].reason == "starting_hold"
    assert made[-1].proposals["queue"] == 8.0


def test_without_a_lead_time_the_queue_term_is_keda_s() -> None:
    """Callers that give no lead time get the plain queue term (KEDA's trigger)."""
    made = run(growing_backlog(1, 0.0, 21, 3.0), lead_s=None)
    assert made[-1].replicas == math.ceil((24.0 + 60.0) / 3.0)
    assert made[-1].reason == "queue"


def test_count_starting_replicas_false_is_keda_s_queue_trigger() -> None:
    """The trigger's ``countStartingReplicas: "false"`` asks at every poll."""
    plain = dataclasses.replace(BASE, count_starting_replicas=False)
    made: list[Decision] = []
    for o in growing_backlog(1, 0.0, 21, 3.0):
        made.append(decide(o, None, plain, made, UNKNOWN, lead_s=LEAD))
    assert [d.replicas for d in made][-1] == 28
    assert (
        parse_settings(
            {"prometheusAddress": "http://p:9090", "countStartingReplicas": "false"}
        ).count_starting_replicas
        is False
    )
    assert parse_settings({"prometheusAddress": "http://p:9090"}).count_starting_replicas


def test_replicas_arriving_keep_the_hold_and_a_full_fleet_ends_it() -> None:
    """Each replica that becomes ready shows the rest are coming; once all the
    answer's replicas are ready, the queue term is free again."""
    first = run(growing_backlog(1, 0.0, 40, 3.0))  # 200 s: within 2 lead times
    arriving = [obs(200.0 + i * DT, 1 + i, 150.0) for i in range(1, 8)]
    made = run(arriving, history=first)
    assert all(d.replicas == 8 for d in made[:-1]), [d.replicas for d in made]
    full = made[-1]  # ready 8 == asked 8, the backlog of 150 flat: it may ask again
    assert full.replicas == 50 and full.reason == "queue"


def test_replicas_that_never_come_free_the_queue_term_after_the_patience() -> None:
    """No rise and no arrival for STARTING_PATIENCE lead times: the start is
    stuck (no capacity, a crash loop), and the queue may ask again."""
    steps = int(STARTING_PATIENCE * LEAD / DT) + 2
    made = run(growing_backlog(1, 0.0, steps, 1.0))
    held = [d for d in made if d.time_s < STARTING_PATIENCE * LEAD]
    assert {d.replicas for d in held} == {8}
    freed = made[-2]  # the first decision past the patience asks again, once
    assert freed.replicas > 8 and freed.reason == "queue"
    assert made[-1].replicas == freed.replicas and made[-1].reason == "starting_hold"


def test_a_ready_count_that_flaps_back_does_not_re_arm_the_hold() -> None:
    """A pod that passes its probe and fails again (2, 1, 2, 1 ready) is no
    arrival after the first time: the patience runs from the last new high."""
    steps = int(STARTING_PATIENCE * LEAD / DT) + 10
    flapping = [obs(i * DT, 1 + (i // 5) % 2, 24.0 + i) for i in range(steps)]
    made = run(flapping)
    first_high = next(d.time_s for d in made if d.ready_replicas == 2)
    free = [d for d in made if d.time_s > first_high + STARTING_PATIENCE * LEAD]
    assert free and all(d.replicas > 8 for d in free), [(d.time_s, d.replicas) for d in made]


def test_a_draining_hold_never_answers_below_the_ready_fleet() -> None:
    """Scaling in (the last answer 3, 8 still ready) with a queue that falls
    fast: the queue term is held at the 8 whose pace drained it, so the HPA
    removes none of them while a queue is there."""
    before = [Decision(0.0, 3, "queue", {}, ready_replicas=8, waiting=150.0)]
    d = decide(obs(10.0, 8, 110.0), None, BASE, before, UNKNOWN, lead_s=LEAD)
    assert (d.proposals["queue"], d.reason) == (8.0, "draining_hold")
    assert d.replicas >= 8


def test_the_other_terms_are_never_held() -> None:
    """The hold limits the queue term alone: the KV cache still asks for more."""
    first = run(growing_backlog(2, 0.0, 3, 3.0))
    hot = decide(obs(15.0, 2, 60.0, kv=1.0), None, BASE, first, UNKNOWN, lead_s=LEAD)
    assert hot.proposals["queue"] == first[-1].replicas
    assert hot.proposals["kv_cache"] == 3.0
    cap = ReplicaCapacity(requests_per_s=0.1)
    loaded = decide(obs(15.0, 2, 60.0), None, BASE, first, cap, lead_s=LEAD)
    assert loaded.replicas == 25 and loaded.reason == "load"  # 2.5 / 0.1


def test_stale_and_no_data_answers_are_not_requests() -> None:
    held = Decision(0.0, 9, "stale_hold", {}, data_stale=True, ready_replicas=1)
    assert queue_hold([held], 1, 30.0, 10.0, LEAD) is None
    fresh = Decision(0.0, 9, "queue", {}, ready_replicas=1, waiting=30.0)
    assert queue_hold([fresh], 1, 30.0, 10.0, LEAD) == (9, "starting_hold")
    assert queue_hold([fresh], 9, 30.0, 10.0, LEAD) is None  # all ready, queue flat
    assert queue_hold([fresh], 1, 30.0, 10.0, 0.0) is None  # no lead time


def test_a_queue_the_arrived_fleet_drains_within_a_lead_time_is_left_to_it() -> None:
    """The fleet asked for is all ready and the backlog falls from 150 to 110
    in 10 s: gone in under a lead time, before any replica asked for now
    could start. A queue that falls too slowly, or grows, asks again."""
    before = [Decision(0.0, 8, "starting_hold", {}, ready_replicas=7, waiting=150.0)]
    fast = decide(obs(10.0, 8, 110.0), None, BASE, before, UNKNOWN, lead_s=LEAD)
    assert (fast.replicas, fast.reason) == (8, "draining_hold")
    slow = decide(obs(10.0, 8, 148.0), None, BASE, before, UNKNOWN, lead_s=LEAD)
    assert (slow.replicas, slow.reason) == (50, "queue")  # 148 / 0.2 per s: 740 s
    growing = decide(obs(10.0, 8, 160.0), None, BASE, before, UNKNOWN, lead_s=LEAD)
    assert growing.reason == "queue" and growing.replicas == 54
    # a scrape repeats the value between samples: the last different reading counts
    repeat = [*before, fast]
    again = decide(obs(15.0, 8, 110.0), None, BASE, repeat, UNKNOWN, lead_s=LEAD)
    assert (again.replicas, again.reason) == (8, "draining_hold")


@settings(max_examples=200, deadline=None)
@given(
    waits=st.lists(st.floats(0.0, 500.0), min_size=1, max_size=40),
    ready=st.integers(0, 10),
    lead=st.floats(10.0, 600.0),
)
def test_the_hold_never_answers_below_the_last_answer_or_above_keda(
    waits: list[float], ready: int, lead: float
) -> None:
    """Whatever the queue does, the held answer stays between the last answer
    (nothing asked for is taken back) and what KEDA's queue trigger asks."""
    history: list[Decision] = []
    for i, w in enumerate(waits):
        o = obs(i * DT, ready, w)
        held = decide(o, None, BASE, history, UNKNOWN, lead_s=lead)
        plain = decide(o, None, BASE, history, UNKNOWN)
        assert held.replicas <= plain.replicas
        fresh = [d for d in history if not d.data_stale]
        if fresh and fresh[-1].replicas > ready:
            assert held.replicas >= min(plain.replicas, fresh[-1].replicas)
        history.append(held)
