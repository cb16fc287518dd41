"""Judging a tuning part day by day (simulations.tune.each_day, and the study
that uses it): a setting must meet each day's target, not only the sum's."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulations.runner import attainment
from simulations.simulation import SimConfig
from simulations.traffic import Workload
from simulations.tune.each_day import (
    DAY_S,
    day_starts,
    day_targets,
    judged_days,
    part_attainments,
)
from simulations.tune.manifest import apply_setting, hpa_scale_down_s
from simulations.tune.search import (
    default_bases,
    format_value,
    score,
    slice_workload,
    slo_ceiling,
)
from simulations.tune.study import TuneContext, run_study

PROFILE = "llama-3-8b@g5.xlarge"


def _workload(minutes: int = 10, seed: int = 3) -> Workload:
    rng = np.random.default_rng(seed)
    duration = 60.0 * minutes
    n = 90 * minutes
    arrival = np.sort(rng.uniform(0.0, duration, n))
    prompt = rng.integers(100, 4000, n)
    output = rng.integers(20, 300, n)
    return Workload(arrival, prompt, output, "w", duration)


def test_day_starts_give_whole_days_and_fold_a_short_tail() -> None:
    assert day_starts(DAY_S) == (0.0,)
    assert day_starts(2 * DAY_S) == (0.0, DAY_S)
    assert day_starts(2.6 * DAY_S) == (0.0, DAY_S, 2 * DAY_S)
    # 0.4 of a day after the second: judged with the second day
    assert day_starts(2.4 * DAY_S) == (0.0, DAY_S)
    assert day_starts(0.3 * DAY_S) == (0.0,)
    with pytest.raises(ValueError, match="positive"):
        day_starts(0.0)


@settings(max_examples=200, deadline=None)
@given(span=st.floats(1.0, 30.0), day=st.floats(0.5, 5.0))
def test_every_judged_day_spans_at_least_half_a_day(span: float, day: float) -> None:
    starts = day_starts(span, day)
    assert starts[0] == 0.0
    assert all(b - a == pytest.approx(day) for a, b in itertools.pairwise(starts))
    if len(starts) > 1:
        assert span - starts[-1] >= day / 2 - 1e-9
    assert span - starts[-1] < 1.5 * day + 1e-9 or len(starts) == 1


def test_slices_keep_every_request_once_on_their_own_clock() -> None:
    w = _workload()
    a, b = slice_workload(w, 0.0, 240.0), slice_workload(w, 240.0, w.duration_s)
    assert len(a) + len(b) == len(w)
    assert a.duration_s == 240.0 and b.duration_s == w.duration_s - 240.0
    assert b.arrival_s.min() >= 0.0 and b.arrival_s.max() < b.duration_s
    np.testing.assert_array_equal(np.concatenate([a.arrival_s, b.arrival_s + 240.0]), w.arrival_s)


def test_the_days_attainments_average_to_the_whole_runs() -> None:
    """Each day's attainment is over its own requests, so weighted by them
    they give the whole run's, and a run that struggles late shows it late."""
    w = _workload()
    base, _ = default_bases(PROFILE, 8)
    run = score(base, w, PROFILE, SimConfig())
    assert run.result is not None
    starts = (0.0, 200.0, 400.0)
    days = part_attainments(run.result, w.arrival_s, starts)
    sizes = np.diff([*np.searchsorted(w.arrival_s, starts), len(w)])
    assert float(np.dot(days, sizes)) / len(w) == pytest.approx(attainment(run.result))


def test_the_whole_parts_target_is_the_days_targets_weighted_by_requests() -> None:
    """An idle fleet's attainment adds up over requests: meeting every day's
    target meets the whole part's, so the whole part's early stops are safe."""
    w = _workload()
    starts = (0.0, 300.0)
    days = day_targets(w, starts, 0.9, PROFILE, 1.0)
    sizes = np.diff([*np.searchsorted(w.arrival_s, starts), len(w)])
    whole = 0.9 * slo_ceiling(w, PROFILE, 1.0)
    assert float(np.dot([t for _, t in days], sizes)) / len(w) == pytest.approx(whole)
    with_margin = day_targets(w, starts, 0.9, PROFILE, 1.0, margin=0.5)
    assert [t for _, t in with_margin] == pytest.approx([t + 0.005 for _, t in days])
    # the bar is an attainment: never above 1, whatever the margin
    assert all(t == 1.0 for _, t in day_targets(w, starts, 1.0, PROFILE, 1.0, margin=100.0))


def test_a_setting_that_misses_one_reachable_day_bar_is_not_chosen(tmp_path: Path) -> None:
    """The same study judged whole, then day by day with the second half's
    bar just above what the written setting attains there: the written
    setting (trial 0) meets the whole part but is infeasible day by day,
    and every finished trial is feasible exactly when it meets the whole
    part's bar and each day's. Trial 0 runs the written setting with its two
    scale-in waits as the trigger's one (the HPA's derived 0)."""
    w = _workload()
    base, _ = default_bases(PROFILE, 8)
    assert base.prescaler_trigger is not None
    written_wait = float(base.prescaler_trigger.metadata["scaleDownStabilizationSeconds"])
    wait = format_value(written_wait + hpa_scale_down_s(base))
    run = score(
        apply_setting(base, {"scaleDownStabilizationSeconds": wait}), w, PROFILE, SimConfig()
    )
    assert run.result is not None
    first, second = part_attainments(run.result, w.arrival_s, (0.0, 300.0))
    whole = 0.3
    assert attainment(run.result) >= whole and second < 1.0
    days = ((0.0, whole), (300.0, second + 1e-9))

    def ctx(d: tuple[tuple[float, float], ...]) -> TuneContext:
        return TuneContext(w, PROFILE, SimConfig(), base, whole, max_replicas=8, day_targets=d)

    url = f"sqlite:///{tmp_path / 's.db'}"
    plain = run_study(ctx(()), storage=url, study_name="whole", n_trials=4)
    split = run_study(ctx(days), storage=url, study_name="days", n_trials=4)
    assert next(t for t in plain.trials if t.number == 0).feasible
    written = next(t for t in split.trials if t.number == 0)
    assert written.finished and not written.feasible
    assert written.day_attainment == pytest.approx((first, second))
    for t in split.trials:
        if not t.finished:
            continue
        meets = t.attainment >= whole and all(
            a >= bar for a, (_, bar) in zip(t.day_attainment, days, strict=True)
        )
        assert t.feasible == meets
    assert split.best is None or split.best.day_attainment[1] >= days[1][1]


def test_a_part_under_a_day_and_a_half_is_judged_whole() -> None:
    w = _workload()
    days, why = judged_days(w, 0.9, PROFILE, 1.0)
    assert days == () and why is not None and "judged whole" in why


def test_day_targets_must_start_at_zero_and_rise() -> None:
    w = _workload()
    base, _ = default_bases(PROFILE, 8)
    with pytest.raises(ValueError, match="day_targets"):
        TuneContext(w, PROFILE, SimConfig(), base, 0.3, day_targets=((10.0, 0.3),))
    with pytest.raises(ValueError, match="day_targets"):
        TuneContext(w, PROFILE, SimConfig(), base, 0.3, day_targets=((0.0, 0.3), (0.0, 0.3)))
