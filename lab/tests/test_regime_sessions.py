"""A regime's sessions, day by day (``lab.regime_sessions``)."""

from __future__ import annotations

import numpy as np
import pytest

from lab.regime_generator import regime_counts
from lab.regime_sessions import Session, day_sessions, main, markdown


def test_sparse_bursts_give_four_sessions_a_day_holding_every_request() -> None:
    counts = regime_counts("sparse-bursts", 3, seed=1)
    sessions = day_sessions(counts)
    for day, minutes in enumerate(np.split(counts, 3)):
        mine = [s for s in sessions if s.day == day]
        assert len(mine) == 4
        assert sum(s.requests for s in mine) == pytest.approx(minutes.sum())
        # each within 20 minutes of its usual hour (08:30, 11:00, 14:00, 16:30)
        for s, usual in zip(mine, (510, 660, 840, 990), strict=True):
            assert abs(s.start_min - usual) <= 20 and 15 <= s.minutes <= 40
            assert s.peak_per_min == pytest.approx(minutes[s.start_min])


def test_a_session_is_cut_at_midnight_and_a_partial_day_refused() -> None:
    counts = np.zeros(2 * 1440)
    counts[1430:1450] = 3.0
    first, second = day_sessions(counts)
    assert (first.day, first.start_min, first.minutes) == (0, 1430, 10)
    assert (second.day, second.start_min, second.minutes) == (1, 0, 10)
    with pytest.raises(ValueError, match="whole days"):
        day_sessions(np.zeros(100))


def test_the_table_and_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert "| 1 | 08:05 | 30 | 1,200 | 40.0 |" in markdown([Session(1, 485, 30, 1200.0, 40.0)])
    assert main(["sparse-bursts", "--days", "1", "--seed", "1"]) == 0
    assert capsys.readouterr().out.count("\n") == 2 + 4
    with pytest.raises(SystemExit):
        main(["weekly"])
