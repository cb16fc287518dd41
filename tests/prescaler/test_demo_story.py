"""What `prescaler demo` says: its rows, the best tuned KEDA and the verdict."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from engine.profiles import get_profile
from prescaler.demo_story import (
    RECIPE,
    TIE_BAND,
    best_keda,
    describe_setting,
    keda_gain,
    oracle_note,
    render,
    story_rows,
    verdict,
)
from prescaler.demo_tuned import TunedSide

SIDES = tuple(
    TunedSide(name, "", 100, True, 7, {}, None, None, None)
    for name in ("prescaler", "keda-queue", "keda-queue-kv")
)
TARGET = 0.84


def _doc(figures: dict[str, tuple[float, float]]) -> dict[str, Any]:
    policies: dict[str, Any] = {
        name: {"slo_attainment": a, "cost_per_month_usd": c} for name, (a, c) in figures.items()
    }
    policies.setdefault("static", {"slo_attainment": 0.87, "cost_per_month_usd": 10_000.0})
    policies["static"].update(static_replicas=14, static_slo_target=0.869)
    return {"policies": policies}


def _rows(p: tuple[float, float], q: tuple[float, float], kv: tuple[float, float]) -> Any:
    doc = _doc({RECIPE: (0.75, 11_000.0), "keda-queue-tuned": q, "keda-queue-kv-tuned": kv,
                "prescaler-tuned": p, "oracle": (0.83, 6_000.0)})  # fmt: skip
    return story_rows(doc, SIDES, 0.887, 1.0)


def test_rows_read_from_today_to_the_ceiling() -> None:
    """Today, each tuned KEDA, tuned prescaler, static, oracle, best possible;
    one meaning line each, and the table says which meet the target."""
    rows = _rows((0.85, 8_000.0), (0.85, 9_000.0), (0.86, 9_500.0))
    assert [r.label for r in rows] == [
        "what you run today", "KEDA tuned: queue", "KEDA tuned: queue + KV", "prescaler tuned",
        "static fleet", "oracle", "best possible",
    ]  # fmt: skip
    assert rows[-1].policy is None and rows[-1].slo_attainment == 0.887
    assert "14 replicas always on" in rows[4].meaning and "hindsight" in rows[4].meaning
    text = "\n".join(render(rows, TARGET))
    assert "   75.0 %         $11,000  no" in text
    assert "   85.0 %          $8,000  yes" in text
    assert text.count("\n  ") == len(rows)  # one meaning line per row


def test_a_tuned_side_without_a_setting_keeps_its_row() -> None:
    """A reference missing from the run is left out; a tuned side that met no
    target while tuning keeps its row, without figures, and there is no ratio."""
    rows = story_rows(_doc({"oracle": (0.8, 1.0), "prescaler-tuned": (0.85, 9.0)}),
                      SIDES, 0.9, 1.0)  # fmt: skip
    assert [r.label for r in rows] == ["KEDA tuned: queue", "KEDA tuned: queue + KV",
                                       "prescaler tuned", "static fleet", "oracle",
                                       "best possible"]  # fmt: skip
    assert rows[0].slo_attainment is None and "no setting met the target" in rows[0].meaning
    found = verdict(rows, SIDES, TARGET)
    assert (found.cost_ratio, found.outcome) == (None, "unknown")
    assert found.text == (
        "no cost ratio: no plain-KEDA side had a setting that met the target while tuning."
    )


figure = st.tuples(st.floats(0.5, 0.95), st.floats(1_000.0, 20_000.0))


@given(figure, figure, figure)
def test_verdict_follows_the_target_then_the_cost(
    p: tuple[float, float], q: tuple[float, float], kv: tuple[float, float]
) -> None:
    """The best tuned KEDA is the cheapest one meeting the target (else the
    highest attainment); missing the target where KEDA meets it is a loss
    whatever the cost, the reverse a win; within the tie band it is a tie."""
    rows = _rows(p, q, kv)
    found = verdict(rows, SIDES, TARGET)
    keda = {"keda-queue-tuned": q, "keda-queue-kv-tuned": kv}
    met = {n: f for n, f in keda.items() if f[0] >= TARGET}
    want = (min(met, key=lambda n: met[n][1]) if met
            else max(keda, key=lambda n: keda[n][0]))  # fmt: skip
    assert best_keda(rows, SIDES, TARGET) is not None
    assert found.keda == want
    ratio = p[1] / keda[want][1]
    assert found.cost_ratio is not None and abs(found.cost_ratio - ratio) < 1e-9
    p_met, k_met = p[0] >= TARGET, keda[want][0] >= TARGET
    if k_met and not p_met:
        assert found.outcome == "loss"
    elif p_met and not k_met:
        assert found.outcome == "win"
    elif abs(ratio - 1) <= TIE_BAND:
        assert found.outcome == "tie"
    elif ratio > 1:
        assert found.outcome == "loss"
    assert f"{ratio:.2f}x" in found.text


def test_describe_setting_names_the_deciding_knobs() -> None:
    manifest = {
        "spec": {
            "minReplicaCount": 2,
            "pollingInterval": 10,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {
                "scaleDown": {"stabilizationWindowSeconds": 600}}}},
            "triggers": [
                {"type": "prometheus", "metadata": {
                    "query": "sum(vllm:num_requests_waiting)", "threshold": "4.5"}},
                {"type": "prometheus", "metadata": {
                    "query": "avg(vllm:kv_cache_usage_perc)", "threshold": "0.6"}},
            ],
        }
    }  # fmt: skip
    assert describe_setting(manifest) == (
        "queue 4.5, KV 0.6, min 2, poll 10 s, scale-in wait 600 s"
    )
    assert describe_setting(None) == "no setting met the target while tuning"


def _note_doc(oracle: float, other: float) -> dict[str, Any]:
    return {
        "policies": {
            "prescaler-tuned": {
                "slo_attainment": other,
                "mean_replicas": 11.75,
                "cost_ratio_to_oracle": 1.77,
            },
            "oracle": {"slo_attainment": oracle, "mean_replicas": 7.05},
        }
    }


def test_oracle_note_says_why_only_when_the_oracle_trails() -> None:
    """Below the compared policy, the note gives both attainments, the oracle's
    sizing (85 % of what replicas sustain, nothing spare for bursts, one average
    start-up ahead, the node start-up range) and what the other pays for its
    margin; at or above it, no note."""
    profile = get_profile("llama-3-8b@g5.xlarge")
    note = oracle_note(_note_doc(0.8304, 0.8379), profile, "prescaler-tuned")
    assert note is not None
    for part in ("83.0 % vs 83.8 %", "85 %", "(150 s) ahead", "30 to 90 s", "11.8 vs 7.0",
                 "burst", "1.77x", "than prescaler-tuned"):  # fmt: skip
        assert part in note, (part, note)
    assert oracle_note(_note_doc(0.84, 0.8379), profile, "prescaler-tuned") is None
    assert oracle_note({"policies": {"oracle": {"slo_attainment": 0.5}}}, profile) is None


def test_a_side_that_met_no_target_runs_its_closest_trial_and_says_so() -> None:
    """When none of a side's trials met the target while tuning, its row runs
    the closest trial and its meaning line says which it is."""
    manifest = {"spec": {"minReplicaCount": 1, "pollingInterval": 60, "triggers": [
        {"type": "prometheus", "metadata": {"query": "sum(vllm:num_requests_waiting)",
                                            "threshold": "4.9"}}]}}  # fmt: skip
    closest = TunedSide("keda-queue", "", 100, False, 31, {}, manifest, None, None)
    rows = story_rows(_doc({"keda-queue-tuned": (0.86, 5_889.0)}), (closest,), 0.95, 1.0)
    assert rows[0].meaning == (
        "plain KEDA, every knob tuned: none of 100 met the target while tuning; "
        "the closest: queue 4.9, min 1, poll 60 s"
    )


def test_keda_gain_sets_the_recipe_against_the_best_tuned_keda() -> None:
    """What tuning alone buys a plain-KEDA team, in one sentence; nothing to say
    without a tuned KEDA row."""
    rows = _rows((0.85, 8_000.0), (0.85, 9_000.0), (0.86, 9_500.0))
    found = verdict(rows, SIDES, TARGET)
    assert keda_gain(rows, found.keda) == (
        "a team on plain KEDA, before adopting prescaler's trigger: tuning its own "
        "ScaledObject (`prescaler tune --scaledobject`) takes it from 75.0 % at $11,000 a "
        "month to 85.0 % at $9,000 (KEDA tuned: queue)."
    )
    assert keda_gain(rows, None) is None
