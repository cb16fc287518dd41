"""Ctrl-C across a tune's processes: one quiet stop, never a traceback or a hang.

Ctrl-C reaches the command and every worker; raised anywhere, it prints a
traceback per worker and can leave optuna's storage mid-transaction. So
while trials run SIGINT only marks the process stopped, and the stop is
raised where nothing is half done (as a trial begins, and at the
simulation's periodic checks): the trial is failed, and the same command
run again runs it again.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from types import FrameType
from typing import Any, Final

__all__ = [
    "EXIT_INTERRUPTED",
    "INTERRUPTED",
    "in_processes",
    "interrupt_check",
    "interruptible_trials",
    "quiet_optuna",
    "quiet_worker",
    "raise_if_interrupted",
    "run_quietly",
    "wait_for_workers",
]


EXIT_INTERRUPTED = 130
"""The shell's status for a command stopped by SIGINT (128 + 2): any
``prescaler`` command's, and a tune's after it wrote its trials so far."""


class _Interrupted:
    """What a worker's job returns when Ctrl-C stopped it."""

    def __repr__(self) -> str:
        return "INTERRUPTED"

    def __reduce__(self) -> str:
        return "INTERRUPTED"  # the one instance, also after pickling back


INTERRUPTED: Final = _Interrupted()

_stopped = False
"""Ctrl-C came: the simulation running stops at its next check, and no
further trial begins."""

POLL_S = 0.25
"""How often the command, waiting for its workers, looks at the mark."""


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _stopped
    _stopped = True


def raise_if_interrupted() -> None:
    """Raise the KeyboardInterrupt Ctrl-C asked for, here where it is safe."""
    if _stopped:
        raise KeyboardInterrupt


def interrupt_check(progress: object, rung: float | None) -> str | None:
    """A ``simulations.tune.search.score`` stop rule that stops a run on
    Ctrl-C (it raises; it never gives a reason to record)."""
    raise_if_interrupted()
    return None


def quiet_worker() -> None:
    """A process pool's ``initializer``: SIGINT marks the worker stopped."""
    signal.signal(signal.SIGINT, _on_sigint)


@contextlib.contextmanager
def interruptible_trials() -> Iterator[None]:
    """Trials (or their workers) run under this, in the main process: Ctrl-C
    is held as in a worker, and raised after, as a KeyboardInterrupt, once
    the trials have stopped."""
    global _stopped
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only: nothing to hold here
        return
    _stopped = False
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        stopped, _stopped = _stopped, False
    if stopped:
        raise KeyboardInterrupt


def run_quietly(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a worker, or :data:`INTERRUPTED` when Ctrl-C stopped
    it (or came before it began, or before it ended)."""
    if _stopped:
        return INTERRUPTED
    try:
        result = fn(*args)
    except KeyboardInterrupt:
        return INTERRUPTED
    return INTERRUPTED if _stopped else result


def wait_for_workers(futures: Sequence[Future[Any]]) -> list[Any]:
    """Each worker's return, in order; Ctrl-C (here, or in a worker alone)
    is passed on to every worker, and raised once they have all returned."""
    forwarded = False
    pending: set[Future[Any]] = set(futures)
    while pending:
        _, pending = wait(pending, timeout=POLL_S, return_when=FIRST_EXCEPTION)
        stop = _stopped or any(f.done() and _interrupted(f) for f in futures)
        if stop and not forwarded:
            _stop_workers()
            forwarded = True
    done = [f.result() for f in futures]  # a worker's error is raised here
    if forwarded or any(d is INTERRUPTED for d in done):
        raise KeyboardInterrupt
    return done


def _interrupted(fut: Future[Any]) -> bool:
    return fut.exception() is None and fut.result() is INTERRUPTED


def _stop_workers() -> None:
    """Pass Ctrl-C on to this process's live children (the pool's workers)."""
    for child in multiprocessing.active_children():
        if child.pid is not None:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(child.pid, signal.SIGINT)


class _NoInterruptedTrials(logging.Filter):
    """Drops optuna's two warnings about a trial Ctrl-C cut short (the first
    carries its traceback): the command says it was interrupted, once. The
    same for a trial another process finished first (SQLite's race on the
    queued trial, :func:`simulations.tune.study.is_tell_race`): its result
    is stored, and nothing is wrong."""

    def __init__(self) -> None:
        super().__init__()
        self._cut: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        if record.exc_info and _quiet(record.exc_info[0]):
            self._cut.add(text.split(" failed", 1)[0])  # "Trial N"
            return False
        head = text.split(" failed with value", 1)
        if len(head) == 2 and head[0] in self._cut:
            self._cut.discard(head[0])
            return False
        return True


def _quiet(kind: type[BaseException] | None) -> bool:
    from optuna.exceptions import UpdateFinishedTrialError  # heavy: only a study loads it

    return kind is not None and issubclass(kind, (KeyboardInterrupt, UpdateFinishedTrialError))


_OPTUNA_RUN_LOGGER = "optuna.study._optimize"
"""The logger optuna reports a failed trial on (``optuna.study._optimize``)."""


def quiet_optuna() -> None:
    """Keep optuna from logging the trials Ctrl-C cut short (once per process)."""
    log = logging.getLogger(_OPTUNA_RUN_LOGGER)
    if not any(isinstance(f, _NoInterruptedTrials) for f in log.filters):
        log.addFilter(_NoInterruptedTrials())


def in_processes(fn: Callable[[Any], Any], jobs: Sequence[Any], processes: int) -> list[Any]:
    """``fn(job)`` for every job, in order, in up to ``processes`` worker
    processes (here when one): Ctrl-C stops them all quietly and is raised here."""
    with interruptible_trials():  # Ctrl-C stops the runs at their next check
        if processes > 1 and len(jobs) > 1:
            workers = min(processes, len(jobs))
            with ProcessPoolExecutor(max_workers=workers, initializer=quiet_worker) as pool:
                futures = [pool.submit(run_quietly, fn, j) for j in jobs]
                try:
                    return wait_for_workers(futures)
                except KeyboardInterrupt:
                    pool.shutdown(wait=False, cancel_futures=True)  # the runs not begun
                    raise
        return [fn(j) for j in jobs]
