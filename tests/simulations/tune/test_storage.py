"""`prescaler tune --storage`: several tune processes fill one optuna study.

A real PostgreSQL (Debian's ``postgresql`` package; started here with
``initdb``/``pg_ctl`` in a temporary directory on a free port, as an
unprivileged user when the tests run as root, since ``initdb`` refuses root)
and a SQLite file, each shared by two ``prescaler tune`` processes started at
once. Under CI a missing PostgreSQL fails the test; elsewhere it skips.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import optuna
import pytest

from tests.support.ci import fail_in_ci_else_skip
from tests.support.counts_trace import write_counts_trace
from tests.support.prometheus import free_port

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small per-minute counts trace: 15 minutes."""
    return write_counts_trace(tmp_path_factory.mktemp("trace"), 15, 2)


BUSY_MINUTES = 30
"""The shared-study tests' trace length (an hour made each test about twice as long,
with the same sharing to check)."""


@pytest.fixture(scope="module")
def busy_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Half an hour of busier traffic: trials long enough (about a second
    each here) that two processes started half a second apart both run some,
    however unevenly the machine schedules their start-up."""
    path = tmp_path_factory.mktemp("busy") / "counts.csv"
    rng = np.random.default_rng(3)
    rows = [f"{60 * i},{int(c)}" for i, c in enumerate(rng.integers(200, 500, BUSY_MINUTES))]
    path.write_text("minute_start_s,requests\n" + "\n".join(rows) + "\n")
    return path


def _pg_bin(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        fail_in_ci_else_skip(
            f"PostgreSQL's `{name}` is not installed (Debian package `postgresql`)"
        )
    return found


def _as_user() -> tuple[list[str], int | None, int | None]:
    """(command prefix, uid, gid): initdb and postgres refuse to run as root."""
    if os.geteuid() != 0:
        return [], None, None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pw = pwd.getpwnam(name)
            return ["runuser", "-u", name, "--"], pw.pw_uid, pw.pw_gid
    pytest.skip("running as root with no unprivileged user for PostgreSQL")


@contextlib.contextmanager
def running_postgres() -> Iterator[str]:
    """A throw-away PostgreSQL on 127.0.0.1:<free port>; yields its SQLAlchemy URL.
    Its directory is directly under the system temp dir, which the
    unprivileged server user can reach (pytest's own tmp_path is root-only)."""
    pytest.importorskip("psycopg2")
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    prefix, uid, gid = _as_user()
    tmp = tempfile.TemporaryDirectory(prefix="prescaler-pg-")
    workdir = Path(tmp.name)
    data = workdir / "pg"
    if uid is not None and gid is not None:
        os.chown(workdir, uid, gid)
    subprocess.run(
        [*prefix, initdb, "-D", str(data), "-U", "tune", "--auth=trust", "--no-sync"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    port = free_port()
    opts = f"-p {port} -k {workdir} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(
        [*prefix, pg_ctl, "-D", str(data), "-o", opts, "-l", str(workdir / "pg.log"), "-w",
         "start"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    try:
        yield f"postgresql+psycopg2://tune@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*prefix, pg_ctl, "-D", str(data), "-m", "fast", "-w", "stop"],
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip
        tmp.cleanup()


def _two_tunes(trace: Path, storage: str, tmp_path: Path, trials: int) -> list[dict[str, object]]:
    procs = []
    for k in range(2):
        argv = [
            sys.executable, "-m", "simulations.tune.cli", str(trace),
            "--duration", str(60 * BUSY_MINUTES),
            "--trials", str(trials), "--target", "0.8", "--quiet", "--storage", storage,
            "--holdout-seeds", "1",
            "--study", "shared", "--json", str(tmp_path / f"tune{k}.json"),
        ]  # fmt: skip
        procs.append(
            subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        )
        time.sleep(0.5)  # the first one creates the study
    outs = [p.communicate(timeout=600)[0].decode() for p in procs]
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out
    return [json.loads((tmp_path / f"tune{k}.json").read_text()) for k in range(2)]


def _check_shared(storage: str, docs: list[dict[str, object]], trials: int) -> None:
    # one study per side: the prescaler side's is "<--study>-prescaler"
    study = optuna.load_study(study_name="shared-prescaler", storage=storage)
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == trials
    workers = {str(t.user_attrs["worker"]).rsplit(":", 1)[0] for t in done}
    assert len(workers) == 2, workers  # both processes contributed trials
    feasible = [t for t in done if t.user_attrs["constraint"] <= 0 and t.user_attrs["finished"]]
    best = min(feasible, key=lambda t: (t.value, t.number))
    for doc in docs:
        assert doc["trials"] == trials
        meta = doc["predictive"]["metadata"]  # type: ignore[index]
        picked = {k: v for k, v in best.user_attrs["metadata"].items() if "." not in k}
        assert {k: meta[k] for k in picked} == picked
    # the trials were screened (tune's default); each worker replayed the choice
    # at the scaler's cadence itself, and both confirmed the trial they report
    sides = [doc["sides"]["prescaler"] for doc in docs]  # type: ignore[index]
    screenings = [side["screening"] for side in sides]
    assert screenings[0] is not None and screenings[0]["refit_s"] > screenings[0]["scaler_refit_s"]
    assert screenings[0] == screenings[1]
    assert screenings[0]["confirmed_trial"] == sides[0]["chosen_trial"] == sides[1]["chosen_trial"]


def test_two_tune_processes_share_one_postgresql_study(busy_trace: Path, tmp_path: Path) -> None:
    """optuna RDBStorage on PostgreSQL: two `prescaler tune` processes on one
    study both add trials, stop at --trials in all, and each reports the
    study's best (optuna docs, "Easy Parallelization")."""
    with running_postgres() as url:
        docs = _two_tunes(busy_trace, url, tmp_path, trials=6)
        _check_shared(url, docs, 6)


def test_two_tune_processes_share_one_sqlite_study(busy_trace: Path, tmp_path: Path) -> None:
    """The same on one machine with a SQLite file (the default storage kind)."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    docs = _two_tunes(busy_trace, url, tmp_path, trials=6)
    _check_shared(url, docs, 6)


KILLED_GRACE_S = 15
"""The killed-tune test's --trial-grace: the resumed run waits this long for
the dead trials (the default 60 s would be most of the test's time)."""


@pytest.mark.timeout(900)  # up to 300 s for two trials, 30 for the kill, 300 + 2 graces again
def test_a_killed_tune_loses_no_finished_trial(trace: Path, tmp_path: Path) -> None:
    """SIGKILL mid-study (12 trials, most stopped early, so the kill lands
    well before the end): the trials finished before the kill are in the
    storage (optuna RDBStorage commits each trial as it ends); the same
    command again keeps them, fails the killed trial once its heartbeat is
    silent for the grace period, and completes the study to --trials. A
    trial created just before the kill, before its first heartbeat (made
    here on purpose: a kill landing there once made the resumed run wait
    for it until the test timed out), is failed and replaced too. Both wait
    out the --trial-grace of silence (heartbeats every 2 s at 15 s)."""
    import signal

    url = f"sqlite:///{tmp_path / 'study.db'}"
    argv = [
        sys.executable, "-m", "simulations.tune.cli", str(trace), "--duration", "600",
        "--holdout", "0.5", "--trials", "12", "--target", "0.8", "--quiet", "--storage", url,
        "--holdout-seeds", "1", "--trial-grace", str(KILLED_GRACE_S),
        "--study", "k",
        "--json", str(tmp_path / "k.json"),
    ]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, start_new_session=True)
    done: list[int] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(done) < 2:
        time.sleep(0.5)
        with contextlib.suppress(KeyError, Exception):
            study = optuna.load_study(study_name="k-prescaler", storage=url)
            done = [t.number for t in study.trials if t.state.is_finished()]
    os.killpg(proc.pid, signal.SIGKILL)  # the tune and its reactive-search worker
    proc.wait(timeout=30)
    assert len(done) >= 2 and not (tmp_path / "k.json").exists()
    before = {
        t.number: t.params
        for t in optuna.load_study(study_name="k-prescaler", storage=url).trials
        if t.state == optuna.trial.TrialState.COMPLETE
    }
    assert len(before) >= 2
    planted = optuna.load_study(study_name="k-prescaler", storage=url).ask().number  # never beats
    again = subprocess.run(argv, cwd=REPO, capture_output=True, timeout=300 + 2 * KILLED_GRACE_S)
    assert again.returncode == 0, again.stdout.decode() + again.stderr.decode()
    after = optuna.load_study(study_name="k-prescaler", storage=url).trials
    complete = {t.number: t.params for t in after if t.state == optuna.trial.TrialState.COMPLETE}
    assert {k: complete[k] for k in before} == before
    assert len(complete) == 12
    assert after[planted].state == optuna.trial.TrialState.FAIL
    assert json.loads((tmp_path / "k.json").read_text())["trials"] == 12


@pytest.mark.filterwarnings("ignore:Heartbeat of storage:UserWarning")  # ask() outside optimize
def test_a_trial_that_never_beat_is_failed_after_the_grace_period(tmp_path: Path) -> None:
    """A process killed between creating a trial and its first heartbeat
    leaves it RUNNING with no heartbeat, which optuna's stale rule skips:
    the watch fails it once it has seen it silent for the grace period on its
    own clock, and never fails a trial that beats."""
    from simulations.tune.storage import GRACE_S, DeadTrials, open_storage

    store = open_storage(f"sqlite:///{tmp_path / 's.db'}")
    study = optuna.create_study(study_name="d", storage=store)
    orphan = study.ask()
    alive = study.ask()
    study_id = store.get_study_id_from_name("d")
    store.record_heartbeat(store.get_trial_id_from_study_id_trial_number(study_id, alive.number))
    now = [1000.0]
    watch = DeadTrials(store, clock=lambda: now[0])
    assert watch.fail(study) == []
    now[0] += GRACE_S - 1
    assert watch.fail(study) == []
    now[0] += 1
    assert watch.fail(study) == [orphan.number]
    states = {t.number: t.state for t in study.get_trials(deepcopy=False)}
    running, failed = optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.FAIL
    assert states == {orphan.number: failed, alive.number: running}
    late = study.ask()  # each trial's grace runs from its own first sighting
    assert watch.fail(study) == []
    now[0] += GRACE_S
    assert watch.fail(study) == [late.number]
    now[0] += 10 * GRACE_S
    assert watch.fail(study) == []  # the beating trial's heartbeat is fresh (the DB's clock)
    assert study.get_trials(deepcopy=False)[alive.number].state == running


def test_a_process_that_loses_the_schema_race_opens_the_storage_after_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tune processes starting on an empty PostgreSQL both create
    optuna's tables, and the loser's CREATE TABLE fails with "already
    exists" (seen in CI: a duplicate ``alembic_version`` type). open_storage
    waits and opens it again; any other database error is at once a
    StorageUnavailable, one line with the database's reason."""
    import sqlalchemy.exc

    from simulations.tune.storage import StorageUnavailable, open_storage

    real = optuna.storages.RDBStorage
    lost = sqlalchemy.exc.IntegrityError(
        "CREATE TABLE alembic_version", None,
        Exception('duplicate key value violates unique constraint "pg_type_typname_nsp_index"'
                  " DETAIL: Key (typname, typnamespace)=(alembic_version, 2200) already exists."),
    )  # fmt: skip
    calls: list[str] = []

    def racing(url: str, **kwargs: object) -> object:
        calls.append(url)
        if len(calls) == 1:
            raise lost
        return real(url, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(optuna.storages, "RDBStorage", racing)
    waits: list[float] = []
    url = f"sqlite:///{tmp_path / 's.db'}"
    storage = open_storage(url, sleep=waits.append)
    assert len(calls) == 2 and len(waits) == 1
    assert isinstance(storage, real) and storage.get_all_studies() == []

    other = sqlalchemy.exc.IntegrityError("INSERT", None, Exception("a NOT NULL constraint"))

    def broken(url: str, **kwargs: object) -> object:
        raise other

    monkeypatch.setattr(optuna.storages, "RDBStorage", broken)
    waits.clear()
    with pytest.raises(StorageUnavailable, match="a NOT NULL constraint") as caught:
        open_storage(url, sleep=waits.append)
    assert waits == [] and "\n" not in str(caught.value)


def test_the_heartbeat_is_a_sixth_of_a_short_grace() -> None:
    """--trial-grace below a minute beats faster, so a live trial still has
    five beats to miss before it is taken for dead; under six seconds is refused."""
    from simulations.tune.storage import HEARTBEAT_S, heartbeat_for

    assert heartbeat_for(60) == HEARTBEAT_S == heartbeat_for(600)
    assert heartbeat_for(15) == 2 and heartbeat_for(6) == 1
    with pytest.raises(ValueError, match="grace period must be >= 6 s"):
        heartbeat_for(5)
