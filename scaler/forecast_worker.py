"""Forecasters that live in a child process, so their numeric work never
holds the serving process's GIL.

Why: the gRPC handlers answer from memory in microseconds, but fitting and
predicting for 1,000 ScaledObjects costs seconds of CPU per forecast bin
(numpy on a few hundred points is mostly interpreter overhead). Run in a
thread of the serving process, that work holds the GIL and every RPC that
arrives meanwhile waits behind it: KEDA sees a slow scaler exactly when many
objects refresh. In a child process the work competes only for a CPU, and
at a lower scheduling priority (``nice``) than the threads that serve KEDA.

The protocol is deliberately synchronous and tiny: the state's single
compute thread sends one request and waits for its answer (the wait releases
the GIL). ``RemoteForecaster`` keeps the ``Forecaster`` protocol, so the
state's code and its decisions do not change: the same numbers are computed
by the same code in another process (a test checks decisions are identical).

Failure: if the child dies or stops answering within ``timeout_s``, it is
killed and a fresh one started on the next call; every forecaster it held is
gone, so their next ``predict`` raises ``ForecastWorkerError`` and the state
refits them at the next bin (the policy meanwhile works on live signals).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import weakref
from collections import deque
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

__all__ = ["ForecastWorker", "ForecastWorkerError", "RemoteForecaster"]

log = logging.getLogger(__name__)


ONE_BLAS_THREAD = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
"""The worker's numpy uses one thread: its arrays are a few hundred points,
where BLAS threads only add spinning, and on a small node they would take
the cores the gRPC front needs."""


class ForecastWorkerError(RuntimeError):
    """The worker could not answer (it died, hung, or lost the forecaster)."""


BatchItem = tuple[int, str, "np.ndarray | None", float, np.ndarray, int, Sequence[float]]
"""(forecaster id, method, bins to refit on or None, step_s, bins up to the
origin, horizon steps, quantiles)."""


def _wire(item: BatchItem) -> tuple[Any, ...]:
    fid, method, fit_y, step_s, y, steps, quantiles = item
    return (
        int(fid),
        str(method),
        None if fit_y is None else np.asarray(fit_y, dtype=float),
        float(step_s),
        np.asarray(y, dtype=float),
        int(steps),
        tuple(quantiles),
    )


def _sendable(exc: Exception) -> Any:
    """The exception itself if it pickles, else its text."""
    try:
        pickle.dumps(exc)
    except Exception:
        return f"{type(exc).__name__}: {exc}"
    return exc


class ForecastWorker:
    """A child process that owns forecasters, addressed by integer ids.

    ``nice`` is added to the child's niceness so that, on a busy node, the
    kernel runs the serving processes first; the forecasts are background
    work whose deadline is the next bin, seconds away. 19 (the lowest): at
    10 the worker still took enough of a 2-core node from the gRPC front
    that KEDA's p99 rose to ~5 ms at 1,000 ScaledObjects.
    """

    def __init__(self, *, nice: int = 19, timeout_s: float = 120.0) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.nice = int(nice)
        self.timeout_s = float(timeout_s)
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._ids = itertools.count(1)
        # Finalizers append from any thread, without the lock: a deque's
        # append/popleft are atomic, so no drop is lost between calls.
        self._drops: deque[int] = deque()
        self.starts = 0
        self._closed = False

    # ------------------------------------------------------------ the API
    def forecaster(self, method: str) -> RemoteForecaster:
        return RemoteForecaster(self, method, next(self._ids))

    def fit(self, fid: int, method: str, y: np.ndarray, step_s: float) -> None:
        self._call("fit", fid, (method, np.asarray(y, dtype=float), float(step_s)))

    def predict(
        self, fid: int, y: np.ndarray | None, steps: int, quantiles: Sequence[float]
    ) -> Any:
        return self._call("predict", fid, (y, int(steps), tuple(quantiles)))

    def batch(self, items: Sequence[BatchItem]) -> list[Any]:
        """Refit-if-asked, update and predict many forecasters in ONE round
        trip: each item's forecast, or the exception it raised (the others
        still answer). ``ForecastWorkerError`` if the worker itself is lost."""
        answers = self._call("batch", 0, ([_wire(item) for item in items],))
        return [
            value
            if status == "ok"
            else value
            if isinstance(value, BaseException)
            else ForecastWorkerError(str(value))
            for status, value in answers
        ]

    def count(self) -> int:
        """How many forecasters the child holds (tests, status)."""
        return int(self._call("count", 0, ()))

    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def drop_later(self, fid: int) -> None:
        """Forget a forecaster at the next call (called by finalizers: no I/O here)."""
        self._drops.append(fid)

    def close(self) -> None:
        """Stop the child. A call in flight gets EOF and fails at once
        instead of holding shutdown for up to ``timeout_s``."""
        self._closed = True
        process = self._process
        if process is not None and process.poll() is None:
            process.terminate()
        with self._lock:
            self._stop()

    # ------------------------------------------------------------ plumbing
    def _call(self, op: str, fid: int, args: tuple[Any, ...]) -> Any:
        with self._lock:
            if self._closed:
                raise ForecastWorkerError("the forecast worker is closed")
            conn = self._ensure()
            drops = [self._drops.popleft() for _ in range(len(self._drops))]
            try:
                conn.send((op, fid, args, drops))
                if not conn.poll(self.timeout_s):
                    raise TimeoutError(f"no answer within {self.timeout_s:g} s")
                status, value = conn.recv()
            except (OSError, EOFError, TimeoutError) as exc:
                log.warning("forecast worker lost (%s); restarting it on the next call", exc)
                self._stop()
                raise ForecastWorkerError(f"forecast worker lost: {exc}") from exc
        if status == "ok":
            return value
        if isinstance(value, BaseException):
            raise value
        raise ForecastWorkerError(str(value))

    def _ensure(self) -> Connection:
        if self._conn is not None and self._process is not None and self._process.poll() is None:
            return self._conn
        self._stop()
        parent, child = socket.socketpair()
        try:
            self._process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "scaler.forecast_worker",
                    "--fd",
                    str(child.fileno()),
                    "--nice",
                    str(self.nice),
                ],
                pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
                env={**os.environ, **ONE_BLAS_THREAD},
            )
        finally:
            child.close()
        self._conn = Connection(parent.detach())
        self._drops.clear()  # a new child holds nothing to drop
        self.starts += 1
        return self._conn

    def _stop(self) -> None:
        conn, self._conn = self._conn, None
        process, self._process = self._process, None
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.close()  # the child reads EOF and exits
        if process is not None:
            try:
                process.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class RemoteForecaster:
    """The ``Forecaster`` protocol, served by a ``ForecastWorker``.

    ``update`` only keeps the series; ``predict`` sends it with the request,
    so one bin costs one round trip.
    """

    def __init__(self, worker: ForecastWorker, method: str, fid: int) -> None:
        self.worker = worker
        self.method = method
        self.fid = fid
        self._pending: np.ndarray | None = None
        weakref.finalize(self, worker.drop_later, fid)

    def fit(self, y: np.ndarray, step_s: float) -> None:
        self._pending = None
        self.worker.fit(self.fid, self.method, y, step_s)

    def update(self, y: np.ndarray) -> None:
        self._pending = np.asarray(y, dtype=float)

    def predict(self, horizon_steps: int, quantiles: Sequence[float] = (0.5, 0.9)) -> Any:
        pending, self._pending = self._pending, None
        return self.worker.predict(self.fid, pending, horizon_steps, quantiles)


# ------------------------------------------------------------------ the child


def _serve(conn: Connection) -> None:
    from forecasting import make_forecaster

    forecasters: dict[int, Any] = {}
    while True:
        try:
            op, fid, args, drops = conn.recv()
        except (EOFError, OSError):
            return  # the parent closed the socket or died
        for dropped in drops:
            forecasters.pop(dropped, None)
        try:
            if op == "fit":
                method, y, step_s = args
                fitted = make_forecaster(method)
                fitted.fit(y, step_s)
                forecasters[fid] = fitted
                result: Any = None
            elif op == "predict":
                y, steps, quantiles = args
                forecaster = forecasters.get(fid)
                if forecaster is None:
                    raise ForecastWorkerError(f"forecaster {fid} is not fitted in this worker")
                if y is not None:
                    forecaster.update(y)
                result = forecaster.predict(steps, quantiles=quantiles)
            elif op == "batch":
                (items,) = args
                result = [_batch_one(forecasters, make_forecaster, *item) for item in items]
            elif op == "count":
                result = len(forecasters)
            else:
                raise ForecastWorkerError(f"unknown operation {op!r}")
        except Exception as exc:
            try:
                conn.send(("error", exc))
            except Exception:  # an exception that does not pickle
                conn.send(("error", f"{type(exc).__name__}: {exc}"))
        else:
            conn.send(("ok", result))


def _batch_one(
    forecasters: dict[int, Any],
    make_forecaster: Any,
    fid: int,
    method: str,
    fit_y: np.ndarray | None,
    step_s: float,
    y: np.ndarray,
    steps: int,
    quantiles: tuple[float, ...],
) -> tuple[str, Any]:
    try:
        if fit_y is not None:
            fitted = make_forecaster(method)
            fitted.fit(fit_y, step_s)
            forecasters[fid] = fitted
        forecaster = forecasters.get(fid)
        if forecaster is None:
            raise ForecastWorkerError(f"forecaster {fid} is not fitted in this worker")
        forecaster.update(y)
        return "ok", forecaster.predict(steps, quantiles=quantiles)
    except Exception as exc:
        return "error", _sendable(exc)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="prescaler's forecast worker (internal)")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--nice", type=int, default=0)
    args = parser.parse_args(argv)
    # Ctrl-C in a terminal reaches the whole process group: the parent
    # decides when this child ends (it closes the socket).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if args.nice:
        with contextlib.suppress(OSError):
            os.nice(args.nice)
    _serve(Connection(args.fd))
    return 0


if __name__ == "__main__":
    # Run the module under its import name, so the exceptions it pickles
    # (ForecastWorkerError) unpickle in the parent as the same class.
    from scaler.forecast_worker import main as _main

    sys.exit(_main())
