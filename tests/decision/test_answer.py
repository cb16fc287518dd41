"""decision.answer: the reasons, the typed staleness of a decision, and the
one rule for how long an answer without fresh data stands."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from decision.answer import (
    NO_ANSWER_REASONS,
    REASONS,
    Decision,
    Reason,
    fresh_at_s,
    past_fallback,
)
from decision.policy import ReplicaCapacity, decide
from decision.settings import ScalerSettings

BASE = ScalerSettings(prometheus_address="http://p:9090")


def test_a_reason_is_its_string() -> None:
    """Reasons compare, hash, format and pickle as the strings KEDA's users see."""
    assert Reason.QUEUE == "queue" and {"queue": 1}[Reason.QUEUE] == 1
    assert f"{Reason.STALE_HOLD}" == "stale_hold" and str(Reason.NO_DATA) == "no_data"
    assert pickle.loads(pickle.dumps(Reason.FALLBACK)) is Reason.FALLBACK
    assert "warming_up" not in REASONS and set(NO_ANSWER_REASONS) <= set(Reason)
    made = Decision(0.0, 1, "forecast")  # type: ignore[arg-type]
    assert made.reason is Reason.FORECAST
    with pytest.raises(ValueError):
        Decision(0.0, 1, "crystal_ball")  # type: ignore[arg-type]


def test_staleness_is_typed_not_a_proposal() -> None:
    s = dataclasses.replace(BASE, fallback_after_seconds=60)
    history: list[Decision] = []
    for t in (0.0, 10.0, 20.0):
        d = decide(None, None, s, history, ReplicaCapacity.unknown(), now=t)
        history = [d]  # trimmed to the last: the start is carried, not re-read
    assert (d.reason, d.no_data_since_s) == ("no_data", 0.0)
    assert "no_data_since_s" not in d.proposals and fresh_at_s(d, history) is None
    fresh = Decision(100.0, 3, Reason.QUEUE)
    held = Decision(130.0, 3, Reason.STALE_HOLD, data_stale=True, data_age_s=25.0)
    assert "data_age_s" not in held.proposals
    assert fresh_at_s(held, [fresh, held]) == 105.0
    unknown_age = dataclasses.replace(held, data_age_s=None)
    assert fresh_at_s(unknown_age, [fresh, unknown_age]) == 100.0
    assert fresh_at_s(fresh, [fresh]) is None


def test_one_fallback_rule() -> None:
    s = dataclasses.replace(BASE, fallback_after_seconds=60)
    assert not past_fallback(59.9, s) and past_fallback(60.0, s)
