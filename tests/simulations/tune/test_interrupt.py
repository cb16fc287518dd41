"""Ctrl-C during ``prescaler tune``: the trials so far written, one line, exit
130, and the same command again resumes the studies.

Run as a person runs it: the command in its own process group with two
worker processes, and SIGINT sent to the whole group once a trial has
finished, as a terminal's Ctrl-C is.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import optuna
import pytest

from simulations.tune.interrupts import (
    INTERRUPTED,
    interrupt_check,
    interruptible_trials,
    run_quietly,
)
from tests.support.counts_trace import write_counts_trace


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """90 minutes of per-minute counts: a trial takes a second or two."""
    return write_counts_trace(tmp_path_factory.mktemp("trace"), 90, 5)


def _finished(storage: str) -> dict[str, list[tuple[int, Any, Any]]]:
    """Each study's COMPLETE trials: (number, parameters, finishing time)."""
    out: dict[str, list[tuple[int, Any, Any]]] = {}
    for summary in optuna.get_all_study_summaries(storage):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        out[summary.study_name] = [(t.number, t.params, t.datetime_complete) for t in done]
    return out


def _some_trial_finished(storage: str) -> bool:
    try:
        return any(_finished(storage).values())
    except Exception:  # the database is being created or written: look again
        return False


def test_ctrl_c_writes_the_trials_so_far_and_the_same_command_resumes(
    trace: Path, tmp_path: Path
) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    out, png = tmp_path / "tune.json", tmp_path / "frontier.png"
    argv = [
        sys.executable, "-m", "prescaler", "tune", str(trace), "--trials", "4", "--jobs", "2",
        "--target", "0.3", "--holdout-seeds", "1", "--quiet", "--storage", storage,
        "--json", str(out), "--plot", str(png),
    ]  # fmt: skip
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 300
        while not _some_trial_finished(storage) and proc.poll() is None:
            assert time.monotonic() < deadline, "no trial finished"
            time.sleep(0.2)
        assert proc.poll() is None, "the tune ended before it could be interrupted"
        os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: every process of the group
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "interrupted after" in err and "run the same command again to resume" in err
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True and doc["trials"] >= 1
    assert doc["trials"] == sum(s["trials"] for s in doc["sides"].values())
    assert png.stat().st_size > 0 and (tmp_path / "frontier-trials.png").stat().st_size > 0
    before = _finished(storage)

    # the same command again: every trial finished before Ctrl-C is kept as
    # it was (resumed, not started over), and each study fills to --trials
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    after = _finished(storage)
    assert len(after) == 3
    for name, trials in before.items():
        assert all(t in after[name] for t in trials), name
    assert all(len(trials) == 4 for trials in after.values())
    assert "interrupted" not in json.loads(out.read_text())


def test_a_job_stopped_by_ctrl_c_returns_the_marker() -> None:
    """In a worker, a job that Ctrl-C stops gives INTERRUPTED back, not a traceback."""

    def job() -> int:
        raise KeyboardInterrupt

    assert run_quietly(job) is INTERRUPTED
    assert run_quietly(lambda: 7) == 7


def test_a_run_checks_for_ctrl_c_where_it_can_stop() -> None:
    """Ctrl-C only marks the process; the mark is raised at the simulation's
    checks (a stop rule), never inside whatever code the signal landed in."""
    with pytest.raises(KeyboardInterrupt), interruptible_trials():
        assert interrupt_check(None, None) is None  # no Ctrl-C yet: the run goes on
        os.kill(os.getpid(), signal.SIGINT)  # handled: marked, not raised here
        interrupt_check(None, None)
    assert interrupt_check(None, None) is None  # the mark ends with the trials
