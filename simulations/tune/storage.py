"""Where ``prescaler tune``'s trials live, and how a dead process's trials are found.

Opens the optuna RDB storage several processes share (riding out their race
to create its tables) and fails the trials a killed process left RUNNING,
so a resumed study replaces them instead of waiting for them.
"""

from __future__ import annotations

import logging
import re
import time
import warnings
from collections.abc import Callable
from typing import Any

__all__ = [
    "GRACE_S",
    "HEARTBEAT_S",
    "MIN_GRACE_S",
    "SCHEMA_RACE_SIGNS",
    "SCHEMA_RACE_TRIES",
    "DeadTrials",
    "StorageUnavailable",
    "check_url",
    "heartbeat_for",
    "open_storage",
    "shown_url",
]

log = logging.getLogger(__name__)

HEARTBEAT_S = 10
"""Each running trial's heartbeat in the storage; one silent for
:data:`GRACE_S` (its process was killed) is marked failed and re-run."""
GRACE_S = 60
MIN_GRACE_S = 6
"""The shortest grace period: a heartbeat of a second, silent for six."""
SCHEMA_RACE_TRIES = 5
"""Attempts at opening a storage whose tables another process is creating."""
SCHEMA_RACE_SIGNS = ("already exists", "alembic_version")
"""What a lost race says: a table or type created meanwhile (PostgreSQL), or
the schema's version row stamped meanwhile (SQLite: a UNIQUE constraint on
``alembic_version``)."""


class StorageUnavailable(Exception):
    """The storage could not be opened (no server there, a refused login, a
    SQLite file in a missing folder): its message is one line naming the
    storage, password hidden, and the database's reason."""


def shown_url(url: str) -> str:
    """``url`` as it may be printed or written to ``--json``: its password
    hidden (a Kubernetes Job passes ``--storage`` from a Secret holding it)."""
    from sqlalchemy.engine import make_url  # optuna's storage layer, loaded with it
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):  # malformed (a port that is no number): hide by hand
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


def check_url(url: str) -> None:
    """Refuse a ``--storage`` that is not a database URL when the request is
    built, before a trace is loaded, in :class:`StorageUnavailable`'s words."""
    from sqlalchemy.engine import make_url  # optuna's storage layer, loaded with it
    from sqlalchemy.exc import ArgumentError

    try:
        make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise StorageUnavailable(_unopened(url, exc)) from exc


def _unopened(url: str, exc: BaseException) -> str:
    """The one line :class:`StorageUnavailable` says: the storage and the
    database's reason, the password hidden in both (SQLAlchemy quotes a URL
    it cannot parse whole)."""
    shown = shown_url(url)
    return f"the storage {shown} cannot be opened: {_reason(exc).replace(url, shown)}"


def _reason(exc: BaseException) -> str:
    """The database's own words for ``exc``, on one line (SQLAlchemy's message
    runs on with the statement and a link)."""
    cause = getattr(exc, "orig", None) or exc
    lines = [line.strip() for line in str(cause).splitlines() if line.strip()]
    return "; ".join(lines[:2]) or type(cause).__name__


def heartbeat_for(grace_s: int) -> int:
    """The heartbeat interval for a grace period: :data:`HEARTBEAT_S`, or a
    sixth of a shorter grace, so a live trial misses five beats before it
    is taken for dead."""
    if grace_s < MIN_GRACE_S:
        raise ValueError(f"the trial grace period must be >= {MIN_GRACE_S} s, got {grace_s}")
    return max(1, min(HEARTBEAT_S, grace_s // 6))


def open_storage(
    url: str, *, grace_s: int = GRACE_S, sleep: Callable[[float], None] = time.sleep
) -> Any:
    """An optuna RDB storage (SQLite, PostgreSQL, MySQL URL) with trial
    heartbeats, so a killed process's unfinished trial does not count once
    silent for ``grace_s``.

    Several ``prescaler tune`` processes started at once on an empty
    database all create optuna's tables and stamp their version; the
    database lets one win and fails the others (:data:`SCHEMA_RACE_SIGNS`).
    A loser tries again after a short wait, when the tables are there. Any
    other failure (no server, a malformed URL, a constraint that is no race)
    is :class:`StorageUnavailable`."""
    import optuna  # heavy: only a study loads it
    import sqlalchemy.exc

    heartbeat_s = heartbeat_for(grace_s)
    kwargs: dict[str, Any] = {}
    if url.startswith("sqlite"):
        kwargs["connect_args"] = {"timeout": 60}  # several processes share one file

    def rdb(last: bool) -> Any:
        try:
            with warnings.catch_warnings():  # heartbeats are flagged experimental: on purpose
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(
                    url, engine_kwargs=kwargs, heartbeat_interval=heartbeat_s, grace_period=grace_s
                )
        # the URL's database driver is not installed, or the URL is not one
        # (a port that is no number is a ValueError)
        except (ImportError, ValueError, sqlalchemy.exc.ArgumentError) as exc:
            raise StorageUnavailable(_unopened(url, exc)) from exc
        except sqlalchemy.exc.SQLAlchemyError as exc:
            race = isinstance(exc, lost) and any(sign in str(exc) for sign in SCHEMA_RACE_SIGNS)
            if last or not race:
                raise StorageUnavailable(_unopened(url, exc)) from exc
            raise

    lost = (
        sqlalchemy.exc.IntegrityError,
        sqlalchemy.exc.ProgrammingError,
        sqlalchemy.exc.OperationalError,
    )
    for attempt in range(1, SCHEMA_RACE_TRIES):
        try:
            return rdb(last=False)
        except lost:  # only a lost race reaches here: rdb words any other failure
            log.info(
                "storage %s: tables being created by another process, retrying", shown_url(url)
            )
            sleep(0.25 * attempt)
    return rdb(last=True)


class DeadTrials:
    """Fails the RUNNING trials of processes that were killed.

    Optuna fails a trial whose heartbeat has been silent for :data:`GRACE_S`,
    but skips a trial that never sent one: a process killed between creating
    a trial (``Study.ask``) and its heartbeat thread's first beat leaves a
    trial RUNNING that no rule fails, and a resumed study would wait for it
    until its deadline. A trial this watch has seen RUNNING with no heartbeat
    for :data:`GRACE_S` of its own clock is failed too (a live process beats
    within milliseconds of creating a trial). The clock is the watching
    process's, so machines' clocks never need to agree."""

    def __init__(
        self, storage: Any, *, grace_s: float = GRACE_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._storage = storage
        self._grace_s = grace_s
        self._clock = clock
        self._silent_since: dict[int, float] = {}

    def fail(self, study: Any) -> list[int]:
        """Fail the study's dead trials; returns the numbers of the trials
        this call failed for never having beaten (optuna's own rule fails
        silent ones, and says nothing)."""
        import optuna  # heavy: only a study loads it

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
        now = self._clock()
        running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
        study_id = self._storage.get_study_id_from_name(study.study_name)
        ids = {
            self._storage.get_trial_id_from_study_id_trial_number(study_id, t.number): t.number
            for t in running
        }
        silent = set(ids) - self._beating(list(ids))
        for trial_id in list(self._silent_since):
            if trial_id not in silent:
                del self._silent_since[trial_id]
        failed: list[int] = []
        for trial_id in sorted(silent):
            since = self._silent_since.setdefault(trial_id, now)
            if now - since < self._grace_s:
                continue
            try:
                if self._storage.set_trial_state_values(
                    trial_id, state=optuna.trial.TrialState.FAIL
                ):
                    failed.append(ids[trial_id])
            except optuna.exceptions.UpdateFinishedTrialError:
                pass  # it ended meanwhile, or another process failed it
            del self._silent_since[trial_id]
        if failed:
            log.warning(
                "trials %s never sent a heartbeat in %g s (their process died as they "
                "started): failed, to be run again",
                failed,
                self._grace_s,
            )
        return failed

    def _beating(self, trial_ids: list[int]) -> set[int]:
        """The trials among ``trial_ids`` with a heartbeat row: optuna's
        ``trial_heartbeats`` table, which no public call reads."""
        if not trial_ids:
            return set()
        from sqlalchemy import bindparam, text  # optuna's storage layer, loaded with it

        query = text("SELECT trial_id FROM trial_heartbeats WHERE trial_id IN :ids").bindparams(
            bindparam("ids", expanding=True)
        )
        with self._storage.engine.connect() as conn:
            return {int(row[0]) for row in conn.execute(query, {"ids": trial_ids})}
