"""scalingModifiers formulas: expr-lang's arithmetic, comparisons and ternary,
with its precedence, checked for types when parsed."""

from __future__ import annotations

import math
import pickle
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulations.autoscaling.formula import parse_formula

NAMES = frozenset({"queue", "kv", "rate"})


def _value(text: str, **values: float) -> float:
    return parse_formula(text, NAMES).evaluate(values)


def test_arithmetic_follows_precedence() -> None:
    """* before +, left to right, unary minus binds tightest."""
    assert _value("queue + 2 * kv", queue=6.0, kv=0.6) == pytest.approx(7.2)
    assert _value("(queue + 2) * kv", queue=6.0, kv=0.5) == 4.0
    assert _value("queue - 2 - 1", queue=6.0) == 3.0
    assert _value("queue / 2 / 3", queue=12.0) == 2.0
    assert _value("-queue + 10", queue=4.0) == 6.0
    assert _value("max(queue / 3, kv / 0.8, 1)", queue=6.0, kv=0.4) == 2.0
    assert (
        _value("min(queue, 3) + abs(-kv) + ceil(rate) + floor(1.9)", queue=5, kv=1, rate=0.2) == 6
    )


def test_ternary_with_comparisons() -> None:
    """A KEDA docs pattern: scale on the queue, but only when the rate says traffic is real."""
    f = "rate > 0.5 && kv >= 0.1 ? queue / 3 : 0"
    assert _value(f, rate=1.0, kv=0.5, queue=9.0) == 3.0
    assert _value(f, rate=0.2, kv=0.5, queue=9.0) == 0.0
    assert _value(f, rate=1.0, kv=0.0, queue=9.0) == 0.0
    nested = "queue < 3 ? 1 : queue < 10 ? 2 : 3"
    assert [_value(nested, queue=q) for q in (0.0, 5.0, 20.0)] == [1.0, 2.0, 3.0]
    assert _value("!(queue == 0) || kv != 0 ? 1 : 0", queue=0.0, kv=0.0) == 0.0
    assert _value("not (queue == 0) or kv != 0 ? 1 : 0", queue=1.0, kv=0.0) == 1.0


def test_names_read_are_recorded() -> None:
    assert parse_formula("queue + 1", NAMES).names == {"queue"}


def test_division_by_zero_is_float64() -> None:
    assert _value("queue / 0", queue=1.0) == math.inf
    assert math.isnan(_value("queue / 0", queue=0.0))


def test_a_formula_survives_pickling() -> None:
    f = parse_formula("kv > 0.5 ? queue : rate", NAMES)
    copy = pickle.loads(pickle.dumps(f))
    assert copy.evaluate({"kv": 0.9, "queue": 4.0, "rate": 1.0}) == 4.0


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "non-empty"),
        ("queue +", "expected more"),
        ("queue 3", "unexpected '3'"),
        ("queue > 1 ? 2", "expected :"),
        ("queue > 1 ? kv > 1 : 2", "same type"),
        ("max(queue)", "max() with 1"),
        ("queue + (kv > 1)", "+ needs numbers"),
        ("queue && kv", "&& needs comparisons"),
        ("queue $ 2", "unexpected character '$'"),
    ],
)
def test_what_expr_lang_would_reject_is_refused(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_formula(text, NAMES)


@settings(max_examples=100, deadline=None)
@given(
    q=st.floats(-1e6, 1e6),
    k=st.floats(-1e6, 1e6),
    r=st.floats(-1e6, 1e6),
)
def test_arithmetic_matches_python(q: float, k: float, r: float) -> None:
    """Without division, the formula's value is Python's for the same expression."""
    text = "q + 2 * k - r * (q - k) + max(q, k, r)"
    f = parse_formula(text, frozenset({"q", "k", "r"}))
    assert f.evaluate({"q": q, "k": k, "r": r}) == q + 2 * k - r * (q - k) + max(q, k, r)
