"""`prescaler tune`'s early stops: trials that cannot win stop, honestly recorded.

The exact rules are arithmetic on quantities that only grow (misses, cost
spent); the pace rules compare trials at the same rungs of the same
requests. A stopped trial stays in the study (optuna docs, "Trial"; a
COMPLETE trial with user attributes) with ``finished`` False, so it is never
the answer, and the study's first trial is the deployed setting
(``Study.enqueue_trial``, optuna docs).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulations.simulation import SimConfig
from simulations.traffic import Workload
from simulations.tune.search import (
    PREDICTIVE_SPACE,
    Progress,
    default_bases,
    exact_miss_budget,
    rung_times,
    score,
)
from simulations.tune.seeding import seed_params
from simulations.tune.stop_rules import BestSoFar, PaceEvidence, StopRules
from simulations.tune.study import TuneContext, read_study, run_study
from simulations.tune.tie_break import TIE_RTOL
from tests.support.tuned_metadata import apply_metadata

PROFILE = "llama-3-8b@g5.xlarge"


def _workload(minutes: int = 15, seed: int = 2, scale: float = 1.0) -> Workload:
    """Poisson-ish arrivals at 1-2.7 requests/s with the profile's usual lengths."""
    rng = np.random.default_rng(seed)
    duration = 60.0 * minutes
    n = int(scale * rng.integers(60, 160) * minutes)
    arrival = np.sort(rng.uniform(0.0, duration, n))
    prompt = rng.integers(100, 2000, n)
    output = rng.integers(20, 300, n)
    return Workload(arrival, prompt, output, "w", duration)


def _ctx(workload: Workload, target: float = 0.5, **kw: object) -> TuneContext:
    base, _ = default_bases(PROFILE, 8)
    return TuneContext(workload, PROFILE, SimConfig(), base, target, max_replicas=8, **kw)  # type: ignore[arg-type]


def test_checks_do_not_change_the_run() -> None:
    """The stop checks are events of their own (simulations.events: a heap
    keyed (time, priority, seq)): a run they do not stop is the very run
    without them, to the request."""
    w = _workload()
    base, _ = default_bases(PROFILE, 8)
    plain = score(base, w, PROFILE, SimConfig())
    seen: list[tuple[Progress, float | None]] = []

    def never(p: Progress, rung: float | None) -> str | None:
        seen.append((p, rung))
        return None

    checked = score(base, w, PROFILE, SimConfig(), stop=never, rungs=rung_times(w, (0.25, 0.5)))
    assert plain.result is not None and checked.result is not None
    assert checked.cost_usd == plain.cost_usd and checked.attainment == plain.attainment
    np.testing.assert_array_equal(checked.result.status, plain.result.status)
    np.testing.assert_array_equal(checked.result.ttft_s, plain.result.ttft_s)
    assert [f for f, _ in checked.curve] == [0.25, 0.5]
    costs = [p.cost_usd for p, _ in seen]
    misses = [p.misses for p, _ in seen]
    assert costs == sorted(costs) and misses == sorted(misses)  # both only grow
    assert costs[-1] <= plain.cost_usd + 1e-9


def test_a_stop_rule_ends_the_run_where_it_says() -> None:
    """A reason from the rule stops the run: not finished, cost unknown, the
    reason and the progress at the stop kept."""
    w = _workload()
    base, _ = default_bases(PROFILE, 8)

    def at_half(p: Progress, rung: float | None) -> str | None:
        return "enough" if rung == 0.5 else None

    s = score(base, w, PROFILE, SimConfig(), stop=at_half, rungs=rung_times(w, (0.25, 0.5)))
    assert not s.finished and math.isnan(s.cost_usd) and s.stopped == "enough"
    assert s.at is not None and s.at.arrived == math.ceil(0.5 * len(w))
    assert s.attainment == s.at.running_attainment


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 10**6), target=st.floats(0.0, 1.0))
def test_the_exact_miss_budget_is_the_last_feasible_count(n: int, target: float) -> None:
    """One miss past the budget and the target is out of reach whatever
    follows; at the budget it is still reachable."""
    budget = exact_miss_budget(_sized(n), target)
    assert (n - budget) / n >= target - 1e-9
    assert (n - budget - 1) / n < target or budget >= n


def _sized(n: int) -> Workload:
    z = np.zeros(n)
    return Workload(z, z.astype(np.int64) + 1, z.astype(np.int64) + 1, "n", 1.0)


def test_rung_times_are_the_arrivals_at_each_fraction() -> None:
    """Rungs are instants of equal work in every trial: the arrival of the
    request at that fraction; fractions outside the workload are left out."""
    w = _sized(0)
    assert rung_times(w, (0.5,)) == ()
    arr = np.arange(100, dtype=np.float64)
    w = Workload(arr, np.ones(100, np.int64), np.ones(100, np.int64), "w", 100.0)
    assert rung_times(w, (0.25, 0.5)) == ((0.25, 25.0), (0.5, 50.0))
    with pytest.raises(ValueError):
        rung_times(w, (1.0,))


def _rules(ctx: TuneContext, best: BestSoFar | None) -> StopRules:
    return StopRules(ctx, lambda: best)


def test_cost_above_the_best_feasible_total_stops_at_any_check() -> None:
    """Cost spent only grows, so once it exceeds the cheapest feasible
    trial's whole cost the trial cannot be the answer; equal is not above,
    nor is float noise within the tie-break's tolerance (such a trial
    ties with the best and may yet be chosen)."""
    ctx = _ctx(_sized(100), target=0.9)
    best = BestSoFar(3, 10.0, {0.25: 2.0})
    assert _rules(ctx, best)(Progress(100.0, 10, 0, 10.0), None) is None
    noise = 10.0 * (1 + TIE_RTOL / 2)
    assert _rules(ctx, best)(Progress(100.0, 10, 0, noise), None) is None
    reason = _rules(ctx, best)(Progress(100.0, 10, 0, 10.01), None)
    assert reason is not None and reason.startswith("cost:")
    assert _rules(ctx, None)(Progress(100.0, 10, 0, 1e9), None) is None


def test_pace_rules_act_only_at_rungs_and_only_when_asked() -> None:
    """On pace, at a rung: attainment so far more than `slack` below the
    target at 1/32 of the requests (narrowing as the work to the power 3/4
    after, up to 1/2), or, from 1/4 on, cost spent more than `cost_slack`
    above the best's at the same rung from 1/2 on (three times that at 1/4);
    `exact` turns both off."""
    ctx = _ctx(_sized(100), target=0.9)
    first = 1 / 32
    best = BestSoFar(3, 10.0, {first: 0.5, 0.125: 1.0, 0.25: 2.0, 0.5: 4.0})
    behind = Progress(100.0, 100, 13, 1.0)  # 87 % < 90 % - 2 %
    assert _rules(ctx, best)(behind, None) is None
    slo = _rules(ctx, best)(behind, first)
    assert slo is not None and slo.startswith("slo pace")
    near = Progress(100.0, 100, 11, 0.1)  # 89 %: within 2 points, not within 0.25
    assert _rules(ctx, best)(near, first) is None
    assert ctx.slo_slack(0.5) == pytest.approx(0.0025)
    later = _rules(ctx, best)(near, 0.5)
    assert later is not None and later.startswith("slo pace")
    assert _rules(ctx, best)(near, 0.75) is None  # after 1/2 only the exact budget judges
    rules = _rules(ctx, best)
    reason = rules(Progress(100.0, 100, 0, 4.5), 0.5)  # 12.5 % over the best's 4.0
    assert reason is not None and reason.startswith("cost pace")
    assert rules.projected_cost_usd == pytest.approx(10.0 * 4.5 / 4.0)
    assert _rules(ctx, best)(Progress(100.0, 100, 0, 4.2), 0.5) is None  # 5 % < 6 %
    assert _rules(ctx, best)(Progress(100.0, 100, 0, 2.3), 0.25) is None  # 15 % < 18 %
    assert _rules(ctx, best)(Progress(100.0, 100, 0, 2.4), 0.25) is not None
    assert _rules(ctx, best)(Progress(100.0, 100, 0, 1.9), 0.125) is None  # too early to rank
    assert _rules(ctx, best)(Progress(100.0, 100, 0, 9.0), 0.75) is None  # the best has no figure
    exact = _ctx(_sized(100), target=0.9, prune="exact")
    assert _rules(exact, best)(behind, first) is None
    assert _rules(exact, best)(Progress(100.0, 100, 0, 4.5), 0.5) is None


def test_pace_rules_wait_for_and_widen_to_the_studys_own_evidence() -> None:
    """With the study's evidence (PaceEvidence): no pace rule acts before 3
    trials finished; after, the SLO slack at a rung is at least the largest
    gap between a finished trial's attainment so far and its final one, and
    the cost slack at least the widest ratio of finished trials' spend
    shares, minus one. Evidence narrower than the fixed slacks changes
    nothing; the exact rules act regardless."""
    ctx = _ctx(_sized(100), target=0.9)
    best = BestSoFar(3, 10.0, {1 / 32: 0.5, 0.5: 4.0})
    behind = Progress(100.0, 100, 13, 1.0)  # 87 %: 3 points below the target
    dear = Progress(100.0, 100, 0, 4.5)  # 12.5 % over the best's 4.0 at 1/2

    def rules(evidence: PaceEvidence) -> StopRules:
        return StopRules(ctx, lambda: best, read_pace=lambda: (best, evidence))

    young = PaceEvidence(2, {1 / 32: 0.0}, {0.5: 1.0})
    assert rules(young)(behind, 1 / 32) is None and rules(young)(dear, 0.5) is None
    over = rules(young)(Progress(100.0, 100, 0, 10.5), None)
    assert over is not None and over.startswith("cost:")
    narrow = PaceEvidence(3, {1 / 32: 0.001}, {0.5: 1.01})
    slo = rules(narrow)(behind, 1 / 32)
    assert slo is not None and slo.startswith("slo pace")
    cost = rules(narrow)(dear, 0.5)
    assert cost is not None and cost.startswith("cost pace")
    wide = PaceEvidence(3, {1 / 32: 0.04}, {0.5: 1.2})
    assert rules(wide)(behind, 1 / 32) is None  # 3 points behind, 4 seen in a finished run
    assert rules(wide)(dear, 0.5) is None  # 12.5 % over, 20 % seen
    assert rules(PaceEvidence(3))(behind, 1 / 32) is None  # no evidence at that rung


def test_bad_stop_settings_are_refused() -> None:
    """TuneContext validates its slack and prune mode eagerly."""
    with pytest.raises(ValueError):
        _ctx(_sized(10), slack=1.5)
    with pytest.raises(ValueError):
        _ctx(_sized(10), prune="sometimes")


def test_the_seed_is_the_deployed_setting() -> None:
    """The base ScaledObject's own settings map onto the search space (the
    shipped defaults: 3 waiting per replica, quantile 0.9, lead time auto);
    a value off the search grid is left to the sampler."""
    base, _ = default_bases(PROFILE, 8)
    seed = seed_params(base, PREDICTIVE_SPACE, 8)
    assert seed is not None
    assert seed["targetWaitingPerReplica"] == 3.0 and seed["forecastQuantile"] == 0.9
    assert seed["leadTimeSeconds"] == "auto" and "leadTimeSeconds:fixed" not in seed
    assert seed["prewarm"] == "false" and "nodeLeadTimeSeconds" not in seed
    odd = apply_metadata(base, {"targetWaitingPerReplica": "3.1", "leadTimeSeconds": "120"})
    seed = seed_params(odd, PREDICTIVE_SPACE, 8)
    assert seed is not None and "targetWaitingPerReplica" not in seed
    assert seed["leadTimeSeconds"] == "fixed" and seed["leadTimeSeconds:fixed"] == 120


def test_a_study_starts_from_the_base_and_never_answers_a_stopped_trial(tmp_path: Path) -> None:
    """run_study: trial 0 is the base's settings, then its neighbours; every trial is COMPLETE
    (stopped ones too, with their reason); the best is the cheapest finished
    feasible trial, and a stopped trial's recorded value is above it."""
    w = _workload(minutes=10)
    ctx = _ctx(w, target=0.3)
    url = f"sqlite:///{tmp_path / 's.db'}"
    result = run_study(ctx, storage=url, study_name="s", n_trials=6)
    study = optuna.load_study(study_name="s", storage=url)
    trials = study.get_trials()
    assert len(trials) == 6 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    assert trials[0].user_attrs["seeded"] == "base"
    seed = seed_params(ctx.base, ctx.space, ctx.max_replicas)
    assert seed is not None and trials[0].params == seed
    # a fifth of the budget: one neighbour, the floor one step up (it is at the space's low)
    assert trials[1].user_attrs["seeded"] == "minReplicas+"
    assert trials[1].params == {**seed, "minReplicas": seed["minReplicas"] + 1}
    assert all("seeded" not in t.user_attrs for t in trials[2:])
    assert result.best is not None and result.best.finished and result.best.feasible
    finished = [r for r in result.trials if r.finished and r.feasible]
    assert result.best.cost_usd == min(r.cost_usd for r in finished)
    for t in trials:
        if not t.user_attrs["finished"]:
            assert t.user_attrs["stopped"]
            assert t.value is not None and t.value > result.best.cost_usd
    again = read_study(study)
    assert again.best == result.best
