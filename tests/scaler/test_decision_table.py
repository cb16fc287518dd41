"""The serving process's copy of the decider's answers: what the gRPC
handlers read, and how answers are held while a decider restarts."""

from __future__ import annotations

import asyncio

import pytest

from decision.settings import parse_settings
from scaler.decider_wire import Answer, TableUpdate
from scaler.decision_table import DECIDER_DOWN, DecisionTable

SETTINGS = parse_settings({"metricsUrls": "http://vllm:8000/metrics", "fallbackAfterSeconds": "60"})
KEY = ("llm", "llama")
SEVEN = Answer(7, "queue", True, None)
WARMING = Answer(1, "warming_up", False, None)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def table() -> tuple[DecisionTable, Clock]:
    clock = Clock()
    t = DecisionTable(clock=clock, wall=clock)
    t.register(*KEY, SETTINGS)
    return t, clock


def test_a_new_object_warms_up_until_the_decider_answers() -> None:
    t, _ = table()
    assert t.decision(*KEY).reason == "warming_up"
    assert t.source_problem(*KEY) is None
    t.apply(TableUpdate(True, [(KEY, SEVEN)]))
    assert (t.decision(*KEY).replicas, t.decision(*KEY).reason) == (7, "queue")
    assert t.is_active(*KEY)


def test_unknown_objects_are_key_errors() -> None:
    t, _ = table()
    for read in (t.decision, t.is_active, t.source_problem, t.subscribe_active):
        with pytest.raises(KeyError):
            read("llm", "other")


def test_new_objects_are_sent_at_once_and_polls_in_batches() -> None:
    woken: list[int] = []
    t = DecisionTable(on_register=lambda: woken.append(1))
    t.register(*KEY, SETTINGS)
    assert t.take_new() == [(KEY, SETTINGS)] and woken == [1]
    t.register(*KEY, SETTINGS)  # the same settings: a poll
    assert t.take_new() == [] and woken == [1]
    assert t.take_polled() == [KEY]
    assert t.take_polled() == []
    assert t.everything() == [(KEY, SETTINGS)]


def test_a_lost_deciders_answers_are_held_while_the_next_warms_up() -> None:
    t, clock = table()
    t.apply(TableUpdate(True, [(KEY, SEVEN)]))
    t.decider_lost()
    assert t.decision(*KEY).replicas == 7
    t.apply(TableUpdate(True, [(KEY, WARMING)]))  # the new decider backfills
    clock.now += 59
    assert (t.decision(*KEY).replicas, t.decision(*KEY).reason) == (7, "queue")
    t.apply(TableUpdate(False, [(KEY, Answer(5, "queue", False, None))]))
    assert t.decision(*KEY).replicas == 5
    t.decider_lost()  # the next loss holds the new answer, for a full period
    clock.now += 59
    assert t.decision(*KEY).replicas == 5


def test_a_held_answer_lasts_fallback_after_seconds_then_the_cause_is_named() -> None:
    t, clock = table()
    t.apply(TableUpdate(True, [(KEY, SEVEN)]))
    t.decider_lost()
    clock.now += 61
    assert t.decision(*KEY).reason == "warming_up"
    assert t.source_problem(*KEY) == DECIDER_DOWN
    failing = Answer(1, "no_data", False, "direct scrape: no reading")
    t.apply(TableUpdate(True, [(KEY, failing)]))
    assert t.decision(*KEY).reason == "no_data"
    assert t.source_problem(*KEY) == "direct scrape: no reading"


def test_an_object_the_decider_forgot_is_registered_anew() -> None:
    t, _ = table()
    t.take_new()
    t.apply(TableUpdate(True, [(KEY, SEVEN)], removed=[KEY]))
    with pytest.raises(KeyError):
        t.decision(*KEY)
    t.register(*KEY, SETTINGS)
    assert t.take_new() == [(KEY, SETTINGS)]


async def test_bursts_reach_the_subscribers() -> None:
    t, _ = table()
    queue = t.subscribe_active(*KEY)
    t.apply(TableUpdate(True, [(KEY, SEVEN)], bursts=[KEY], status={"refreshes": 3.0}))
    assert await asyncio.wait_for(queue.get(), 1) is True
    assert t.status == {"refreshes": 3.0}
    t.unsubscribe_active(*KEY, queue)
    t.apply(TableUpdate(False, bursts=[KEY]))
    assert queue.empty()


def test_a_held_answer_on_stale_data_expires_when_its_data_is_fallback_old() -> None:
    t, clock = table()
    # Stale for 50 s when the decider sends it: 10 s of hold are left, not 60.
    t.apply(TableUpdate(True, [(KEY, Answer(7, "stale_hold", True, None, clock.now - 50))]))
    t.decider_lost()
    clock.now += 9
    assert (t.decision(*KEY).replicas, t.is_active(*KEY)) == (7, True)
    clock.now += 1
    assert t.decision(*KEY).reason == "warming_up"
    assert not t.is_active(*KEY)
    assert t.source_problem(*KEY) == DECIDER_DOWN


def test_a_held_fresh_answer_is_timed_from_when_the_decider_last_spoke() -> None:
    t, clock = table()
    t.apply(TableUpdate(True, [(KEY, SEVEN)]))
    assert t.silent_s() == 0.0
    clock.now += 40  # the decider hangs, then is killed
    assert t.silent_s() == 40.0
    t.decider_lost()
    clock.now += 19
    assert t.is_active(*KEY) and t.decision(*KEY).replicas == 7
    clock.now += 1
    assert not t.is_active(*KEY) and t.decision(*KEY).reason == "warming_up"
    t.decider_connected()
    assert t.silent_s() == 0.0


def test_a_held_answer_is_active_only_as_its_successor_once_expired() -> None:
    t, clock = table()
    t.apply(TableUpdate(True, [(KEY, SEVEN)]))
    t.decider_lost()
    t.apply(TableUpdate(True, [(KEY, WARMING._replace(active=True))]))
    clock.now += 60
    assert t.is_active(*KEY)  # the successor's word
    t.apply(TableUpdate(False, [(KEY, WARMING)]))
    assert not t.is_active(*KEY)


def test_a_removal_crossing_a_registration_keeps_the_object() -> None:
    t, _ = table()
    t.take_new()
    t.apply(TableUpdate(True, [(KEY, SEVEN)]))
    new_settings = parse_settings({"metricsUrls": "http://vllm:8000/metrics", "maxReplicas": "9"})
    t.register(*KEY, new_settings)  # not yet sent when the decider's removal arrives
    t.apply(TableUpdate(False, removed=[KEY]))
    assert t.decision(*KEY).replicas == 7
    assert t.take_new() == [(KEY, new_settings)]
