"""The headline tune prints (simulations.tune.advice.verdict): about the
blocks printed to paste, and true about the target."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from simulations.tune.advice import printed_sides, verdict
from simulations.tune.held_back import SideResult, TuneResult

MONTHS = 0.5


def _side(name: str, cost: float, attainment: float, floor: int, peak: int) -> SideResult:
    """A side whose chosen setting cost ``cost`` on the held-back part and
    whose fleet rose to ``peak`` replicas above its ``floor``."""
    manifest = {"spec": {"minReplicaCount": floor, "triggers": []}}
    run = {"slo_attainment": attainment, "cost_usd": cost, "max_replicas": peak}
    return SideResult(
        side=cast(Any, SimpleNamespace(name=name)),
        study=cast(Any, SimpleNamespace(trials=())),
        chosen=None,
        manifest=manifest,
        tuned=run,
        holdout=run,
        frontier=(),
        baseline=cast(Any, None),
    )


def _result(*sides: SideResult) -> TuneResult:
    return TuneResult(
        trace="t", slo_ttft_s=2.0, target=0.99, target_attainment=(0.95, 0.95),
        ceiling=1.0, months=(MONTHS, MONTHS), sides=sides,
    )  # fmt: skip


def test_with_both_keda_sides_the_ratio_is_against_the_printed_one() -> None:
    """keda-queue-kv tuned beside keda-queue: only the former's block is
    printed, so the ratio and the headline's words are against it."""
    result = _result(
        _side("prescaler", 100.0, 0.97, 1, 4),
        _side("keda-queue", 400.0, 0.97, 1, 6),
        _side("keda-queue-kv", 200.0, 0.97, 1, 5),
    )
    assert printed_sides(result) == ["prescaler", "keda-queue-kv"]
    said = verdict(result)
    assert said["chosen_cost_ratio"] == 0.5 and said["ratio_side"] == "keda-queue-kv"
    assert "keda-queue-kv" in said["text"] and "keda-queue " not in said["text"]
    assert "(prescaler costs 0.50x it)" in said["text"]


def test_with_the_queue_side_alone_the_ratio_is_against_it() -> None:
    said = verdict(
        _result(_side("prescaler", 100.0, 0.97, 1, 4), _side("keda-queue", 400.0, 0.97, 1, 6))
    )
    assert said["chosen_cost_ratio"] == 0.25 and said["ratio_side"] == "keda-queue"


def test_static_floors_that_all_miss_are_not_said_to_meet_the_target() -> None:
    """Every chosen setting a static floor, of different sizes, none meeting
    the held-back target: the cheapest is named without claiming it met it."""
    said = verdict(
        _result(_side("prescaler", 300.0, 0.90, 3, 3), _side("keda-queue", 200.0, 0.90, 2, 2))
    )
    assert "met the held-back target" not in said["text"].replace("None met the", "")
    assert "None met the held-back target; the cheapest: a floor of 2" in said["text"]
    assert f"${200.0 / MONTHS:,.0f}/month" in said["text"]


def test_static_floors_one_meeting_is_named_as_the_cheapest_that_met() -> None:
    said = verdict(
        _result(_side("prescaler", 300.0, 0.97, 3, 3), _side("keda-queue", 200.0, 0.90, 2, 2))
    )
    assert "The cheapest that met the held-back target: a floor of 3" in said["text"]
