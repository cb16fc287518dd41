"""Every set-up in the bound's terms (simulations.bound_report): pure, from a
report's per-policy objects and the bound's summary."""

from __future__ import annotations

from typing import Any

import pytest

from simulations.bound_report import bound_terms, waterfall_lines

MONTHS = 0.5 / 730.0  # half an hour


def _bound(cost: float, instant: float, met: bool = True) -> dict[str, Any]:
    side = {"slo_attainment": 0.91, "met": met, "lead_s": 181.0}
    return {
        "target_attainment": 0.9,
        "stated_lead": {**side, "cost_usd": cost},
        "instant_start": {**side, "cost_usd": instant},
    }


POLICIES = {
    "hindsight": {"cost_usd": 2.0, "slo_attainment": 0.91},
    "oracle": {"cost_usd": 1.5, "slo_attainment": 0.95},  # sees the future: never causal
    "keda": {"cost_usd": 3.0, "slo_attainment": 0.92},
    "prescaler": {"cost_usd": 2.5, "slo_attainment": 0.905},
    "recipe": {"cost_usd": 1.8, "slo_attainment": 0.80},  # cheaper, but misses the target
}


def test_the_gap_is_priced_from_the_instant_start_to_each_set_up() -> None:
    terms = bound_terms(POLICIES, _bound(2.0, 1.9), MONTHS)
    assert terms["lead_time_price_usd"] == pytest.approx(0.1)
    assert terms["instant_start"]["multiple"] == pytest.approx(0.95)
    best = terms["best_causal"]
    assert best["policy"] == "prescaler" and best["future_price_usd"] == pytest.approx(0.5)
    assert [s["policy"] for s in terms["shape"]] == ["keda"]
    assert terms["shape"][0]["shape_price_usd"] == pytest.approx(0.5)
    assert terms["shape"][0]["multiple"] == pytest.approx(1.5)
    assert terms["missed_target"] == ["recipe"]
    assert terms["bound"]["cost_per_month_usd"] == pytest.approx(2.0 / MONTHS, rel=1e-6)


def test_the_waterfall_reads_top_to_bottom_in_dollars_a_month() -> None:
    terms = bound_terms(POLICIES, _bound(2.0, 1.9), MONTHS)
    lines = waterfall_lines(terms, MONTHS, 181.0)
    assert lines[0].startswith("where the cost goes") and "90.0 %" in lines[0]
    text = "\n".join(lines)
    order = ["instant start-up", "+ the lead time (181 s)", "= the hindsight schedule",
             "+ not knowing the future (prescaler)", "= best causal set-up (prescaler)",
             "+ the shape of keda", "missed the target: recipe"]  # fmt: skip
    at = [text.index(part) for part in order]
    assert at == sorted(at)
    assert "$2,920" in text  # the bound: $2.00 over half an hour is $2,920 a month
    assert "1.50x" in text


def test_no_causal_set_up_and_an_unreachable_target_are_said() -> None:
    missing = {"recipe": POLICIES["recipe"]}
    terms = bound_terms(missing, _bound(2.0, 1.9, met=False), MONTHS)
    assert terms["best_causal"] is None and terms["shape"] == []
    text = "\n".join(waterfall_lines(terms, MONTHS, 181.0))
    assert "no causal set-up met the target" in text
    assert "out of reach within the fleet's maximum" in text
