"""What each part of a tune starts with: only what came before that part.

The opening fleet and the tracker's backfill of the tuning part come from
the trace before ``--start``, the held-back part's from the tuning part's
own requests (simulations/tune/inputs.py); a trace whose future is altered
gives identical inputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.profiles import get_profile
from simulations.backfill import scraped_history
from simulations.sim_inputs import SimInputs
from simulations.simulation import SimConfig
from simulations.traffic import TrafficOptions, Workload, load_workload
from simulations.tune.inputs import PartStarts, part_starts, requests_before, tail_of
from simulations.tune.search import split_workload

PROFILE = get_profile("llama-3-8b@g5.xlarge")


def _trace(path: Path, counts: list[int]) -> Path:
    rows = "".join(f"{60 * i},{c}\n" for i, c in enumerate(counts))
    path.write_text("minute_start_s,requests\n" + rows)
    return path


def _starts(trace: Path, start_s: float, holdout: float) -> tuple[Workload, PartStarts]:
    """What tune computes for ``trace`` from ``start_s``: the tuning part and both starts."""
    traffic = TrafficOptions(start_s=start_s, duration_s=1800.0, seed=4)
    workload = load_workload(trace, traffic)
    tune_part, held = split_workload(workload, holdout)
    before = requests_before(trace, traffic)
    starts = part_starts(before, tune_part, held, PROFILE, SimConfig(), SimInputs())
    return tune_part, starts


def test_an_altered_future_gives_identical_inputs(tmp_path: Path) -> None:
    """Tuning from minute 40 of a 70-minute trace, the last 30 % held back.
    Rewriting the trace from ``--start`` on (a burst) leaves the tuning
    part's opening fleet and backfill as they were; a burst added to the
    held-back requests leaves the held-back part's as they were: each is
    read from before its part only."""
    counts = [60 + (7 * i) % 50 for i in range(70)]
    tune_part, a = _starts(_trace(tmp_path / "a.csv", counts), 2400.0, 0.3)
    _, b = _starts(_trace(tmp_path / "b.csv", counts[:40] + [900] * 30), 2400.0, 0.3)
    assert a.tuning.opening == b.tuning.opening and a.tuning_config == b.tuning_config
    assert a.tuning.history is not None and b.tuning.history is not None
    for field in ("times_s", "requests_per_s", "tokens_per_s"):
        want, got = getattr(a.tuning.history, field), getattr(b.tuning.history, field)
        np.testing.assert_array_equal(got, want)
    traffic = TrafficOptions(start_s=2400.0, duration_s=1800.0, seed=4)
    held = split_workload(load_workload(tmp_path / "a.csv", traffic), 0.3)[1]
    assert held is not None and a.held is not None and a.held.history is not None
    n = 5 * len(held)
    burst = Workload(
        np.sort(np.random.default_rng(9).uniform(0.0, held.duration_s, n)),
        np.full(n, 4000), np.full(n, 900), held.name, held.duration_s,
    )  # fmt: skip
    before = requests_before(tmp_path / "a.csv", traffic)
    got = part_starts(before, tune_part, burst, PROFILE, SimConfig(), SimInputs())
    assert got.held is not None and got.held.history is not None
    assert got.held.opening == a.held.opening and got.held_config == a.held_config
    np.testing.assert_array_equal(got.held.history.tokens_per_s, a.held.history.tokens_per_s)


def test_the_held_back_part_starts_from_the_tuning_parts_end(tmp_path: Path) -> None:
    """The held-back part's backfill is what the emulated Prometheus scraped
    over the 3 h before the cut: the tuning part's requests, preceded by
    the trace's before ``--start`` when the part is shorter; its opening
    fleet follows the tuning part's last minutes (busy there: more than the
    quiet minutes before ``--start`` leave the tuning part)."""
    counts = [30] * 40 + [300] * 30
    trace = _trace(tmp_path / "t.csv", counts)
    tune_part, starts = _starts(trace, 2400.0, 0.3)
    traffic = TrafficOptions(start_s=2400.0, duration_s=1800.0, seed=4)
    prior = tail_of(requests_before(trace, traffic), tune_part, 3 * 3600.0)
    assert prior is not None and prior.duration_s == pytest.approx(2400.0 + tune_part.duration_s)
    want = scraped_history(prior, scrape_interval_s=15.0, rate_window_s=120.0, bin_s=15.0)
    assert starts.held is not None and starts.held.history is not None and want is not None
    np.testing.assert_array_equal(starts.held.history.requests_per_s, want.requests_per_s)
    assert starts.held.opening > starts.tuning.opening
    assert starts.held_config.initial_replicas == starts.held.opening
    assert starts.tuning_config.initial_replicas == starts.tuning.opening


def test_a_stated_opening_fleet_and_no_backfill(tmp_path: Path) -> None:
    """``--initial-replicas`` opens both parts; ``--no-backfill`` leaves both
    trackers empty while the opening fleet is still read from before."""
    trace = _trace(tmp_path / "t.csv", [120] * 70)
    traffic = TrafficOptions(start_s=2400.0, duration_s=1800.0, seed=4)
    tune_part, held = split_workload(load_workload(trace, traffic), 0.3)
    before = requests_before(trace, traffic)
    stated = part_starts(
        before, tune_part, held, PROFILE, SimConfig(), SimInputs(initial_replicas=3)
    )
    assert stated.tuning_config.initial_replicas == stated.held_config.initial_replicas == 3
    cold = part_starts(before, tune_part, held, PROFILE, SimConfig(), SimInputs(), backfill=False)
    assert cold.tuning.history is None and cold.held is not None and cold.held.history is None
    assert cold.tuning.opening > 1


def test_the_tail_is_the_last_span_on_its_own_clock() -> None:
    """tail_of keeps the requests of the last ``span_s`` before the part's
    end, from the part and before it, on a clock from 0."""
    before = Workload(np.array([1.0, 5.0]), np.array([1, 2]), np.array([3, 4]), "b", 6.0)
    part = Workload(np.array([0.5, 3.0]), np.array([5, 6]), np.array([7, 8]), "p", 4.0)
    tail = tail_of(before, part, 7.0)
    assert tail is not None and tail.duration_s == 7.0
    np.testing.assert_array_equal(tail.arrival_s, [2.0, 3.5, 6.0])
    np.testing.assert_array_equal(tail.prompt_tokens, [2, 5, 6])
    whole = tail_of(None, part, 10.0)
    assert whole is not None and whole.duration_s == 4.0
    np.testing.assert_array_equal(whole.arrival_s, part.arrival_s)
