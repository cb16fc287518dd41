"""The serving process's side of the decider: start it, feed it, restart it.

:class:`DeciderProcess` is the state ``prescaler serve`` hands the gRPC
service: handlers read a :class:`~scaler.decision_table.DecisionTable`, never
waiting on the decider, while a supervisor task runs the child (``python -m
scaler.decider``), tells it the objects KEDA asks about, applies its updates
and restarts it when it dies, or when it stays silent for :func:`stuck_after`
(a live decider sends at least once a refresh, so silence means its event
loop is stuck; a slow refresh is not silence). Each ``/metrics`` scrape asks
the decider for its series (rendered there, off this process's GIL); if it
does not answer in time the last text is served, and while none runs, none
is (``prescaler_decider_up`` says 0).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from decision.policy import Decision
from decision.settings import ScalerSettings
from scaler.decider_wire import (
    DeciderConfig,
    MetricsRequest,
    MetricsText,
    Polls,
    Registrations,
    TableUpdate,
    read_message,
    write_message,
)
from scaler.decision_table import DecisionTable
from scaler.telemetry import ScalerTelemetry

__all__ = ["ONE_BLAS_THREAD", "POLL_REPORT_S", "DeciderProcess", "stuck_after"]

log = logging.getLogger(__name__)

POLL_REPORT_S = 5.0
"""How often polls of known objects are passed on (so the decider expires
only the objects KEDA stopped asking about, after an hour by default)."""
METRICS_TIMEOUT_S = 5.0
_STOP_TIMEOUT_S = 10.0
STUCK_AFTER_MIN_S = 30.0
"""The shortest silence taken for a stuck decider (a refresh of 1,000
objects on a loaded node takes seconds; a few slow ones are not a hang)."""


def stuck_after(config: DeciderConfig) -> float:
    """Silence after which a decider is killed: three refreshes, at least
    :data:`STUCK_AFTER_MIN_S`."""
    return max(3.0 * config.refresh_interval_s, STUCK_AFTER_MIN_S)


ONE_BLAS_THREAD = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}
"""The decider's numpy uses one thread: its arrays are a few hundred points,
where BLAS threads only add spinning, and they would take the cores the
serving process needs."""


class DeciderProcess:
    """``scaler.service.ScalerStateProtocol`` backed by a decider child.

    ``config`` parameterizes the child's live loop; ``telemetry`` (the
    serving process's, ``part="rpc"``) gets the child's series added to its
    endpoint. ``restarts`` counts the child's unplanned exits.
    ``stuck_after_s`` overrides :func:`stuck_after` (the tests shorten it).
    """

    def __init__(
        self,
        config: DeciderConfig,
        telemetry: ScalerTelemetry,
        *,
        log_level: str = "info",
        table: DecisionTable | None = None,
        stuck_after_s: float | None = None,
    ) -> None:
        self.config = config
        self.stuck_after_s = stuck_after(config) if stuck_after_s is None else stuck_after_s
        self.log_level = log_level
        self._wake = asyncio.Event()
        self.table = table if table is not None else DecisionTable()  # an empty one is falsy
        self.table.on_register = self._wake.set
        self.restarts = 0
        self._process: asyncio.subprocess.Process | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._stopping = False
        self._metrics_serial = 0
        self._metrics_waiting: asyncio.Future[bytes] | None = None
        self._metrics_text = b""
        self._own_series = CollectorRegistry(auto_describe=False)
        self._own_series.register(_DeciderCollector(self))
        telemetry.add_exposition(self.exposition)

    # ------------------------------------------------------------ the RPC side
    def register(self, namespace: str, name: str, settings: ScalerSettings) -> None:
        self.table.register(namespace, name, settings)

    def decision(self, namespace: str, name: str) -> Decision:
        return self.table.decision(namespace, name)

    def is_active(self, namespace: str, name: str) -> bool:
        return self.table.is_active(namespace, name)

    def source_problem(self, namespace: str, name: str) -> str | None:
        return self.table.source_problem(namespace, name)

    def subscribe_active(self, namespace: str, name: str) -> asyncio.Queue[bool]:
        return self.table.subscribe_active(namespace, name)

    def unsubscribe_active(self, namespace: str, name: str, queue: asyncio.Queue[bool]) -> None:
        self.table.unsubscribe_active(namespace, name, queue)

    def status(self) -> dict[str, float]:
        """The decider's latest ``ScalerState.status()`` (loop health)."""
        return dict(self.table.status)

    @property
    def connected(self) -> bool:
        """Whether a decider is connected (and its answers are live)."""
        return self._writer is not None

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.returncode is None else None

    # ------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        """Start the decider and its supervisor; returns once it is connected."""
        if self._supervisor is not None:
            return
        self._supervisor = asyncio.create_task(self._supervise(), name="prescaler-decider")
        connected = asyncio.create_task(self._connected.wait())
        await asyncio.wait({connected, self._supervisor}, return_when=asyncio.FIRST_COMPLETED)
        if not connected.done():
            connected.cancel()
            await self._supervisor  # raises what ended it

    async def stop(self) -> None:
        """Close the socket (the decider stops its loop and exits), then wait."""
        self._stopping = True
        writer, process = self._writer, self._process
        if writer is not None:
            writer.close()
        if process is not None and process.returncode is None:
            try:
                await asyncio.wait_for(process.wait(), _STOP_TIMEOUT_S)
            except TimeoutError:
                log.warning("the decider did not stop in time; killing it")
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
            self._supervisor = None

    # --------------------------------------------------------------- metrics
    async def exposition(self) -> bytes:
        """The decider's series (its latest text if it does not answer in
        time, none while it is down), then its health as seen from here."""
        return await self._decider_text() + generate_latest(self._own_series)

    async def _decider_text(self) -> bytes:
        writer = self._writer
        if writer is None or writer.is_closing():
            return self._metrics_text
        waiting = self._metrics_waiting
        if waiting is None or waiting.done():
            self._metrics_serial += 1
            waiting = self._metrics_waiting = asyncio.get_running_loop().create_future()
            write_message(writer, MetricsRequest(self._metrics_serial))
        try:
            self._metrics_text = await asyncio.wait_for(asyncio.shield(waiting), METRICS_TIMEOUT_S)
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            if not waiting.cancelled():
                raise  # this scrape itself was cancelled
            # else the decider was lost meanwhile: serve what is known
        return self._metrics_text

    # ------------------------------------------------------------ supervision
    async def _supervise(self) -> None:
        while not self._stopping:
            code: int | str | None = None
            try:
                code = await self._run_once()
            except OSError as exc:
                if self.restarts == 0 and not self._connected.is_set():
                    raise
                code = f"cannot start it: {exc}"
            except Exception as exc:
                # Whatever went wrong here, KEDA must not be served the lost
                # decider's answers forever: hold them (timed) and restart.
                log.exception("the decider's supervision failed")
                code = f"supervision failed: {exc!r}"
            finally:
                self.table.decider_lost()
                self._writer = None
                self._metrics_text = b""  # a gone process's series are not served
                if self._metrics_waiting is not None and not self._metrics_waiting.done():
                    self._metrics_waiting.cancel()
            if self._stopping:
                return
            self.restarts += 1
            log.error(
                "the decider exited (%s); answering from its last table while it restarts", code
            )
            await asyncio.sleep(min(5.0, 0.1 * self.restarts))

    async def _run_once(self) -> int | None:
        """One decider's life: spawn, configure, feed and read it until it ends."""
        parent, child = socket.socketpair()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "scaler.decider",
                "--fd",
                str(child.fileno()),
                "--log-level",
                self.log_level,
                pass_fds=(child.fileno(),),
                stdin=asyncio.subprocess.DEVNULL,
                env={**os.environ, **ONE_BLAS_THREAD},
            )
        except BaseException:
            parent.close()
            raise
        finally:
            child.close()
        self._process = process
        reader, writer = await asyncio.open_unix_connection(sock=parent)
        write_message(writer, self.config)
        write_message(writer, Registrations(self.table.everything()))
        self._writer = writer
        self._connected.set()
        feeding = asyncio.create_task(self._feed(writer, process))
        try:
            await self._read(reader)
        finally:
            feeding.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionError):
                await feeding
            writer.close()
            if process.returncode is None and not self._stopping:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
            code = await process.wait()
        return code

    async def _feed(
        self, writer: asyncio.StreamWriter, process: asyncio.subprocess.Process
    ) -> None:
        """New objects at once; polls every :data:`POLL_REPORT_S`; the
        decider killed once it has been silent for ``stuck_after_s``."""
        loop = asyncio.get_running_loop()
        self.table.decider_connected()
        check_s = min(POLL_REPORT_S, self.stuck_after_s / 3.0)
        next_polls = loop.time() + POLL_REPORT_S
        while True:
            wait_s = min(next_polls - loop.time(), check_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), max(0.0, wait_s))
            self._wake.clear()
            silent_s = self.table.silent_s()
            if silent_s > self.stuck_after_s:
                log.error(
                    "the decider sent nothing for %.0f s (a live one reports every refresh,"
                    " %.1f s); killing it to restart it",
                    silent_s,
                    self.config.refresh_interval_s,
                )
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                return
            objects = self.table.take_new()
            if objects:
                write_message(writer, Registrations(objects))
            if loop.time() >= next_polls:
                write_message(writer, Polls(self.table.take_polled()))
                next_polls = loop.time() + POLL_REPORT_S
            await writer.drain()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while True:
            try:
                message = await read_message(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            if isinstance(message, TableUpdate):
                self.table.apply(message)
            elif isinstance(message, MetricsText):
                waiting = self._metrics_waiting
                if (
                    waiting is not None
                    and not waiting.done()
                    and message.serial == self._metrics_serial
                ):
                    waiting.set_result(message.text)
            else:
                log.error("unexpected message from the decider: %r", type(message))


class _DeciderCollector(Collector):
    """The serving process's view of its decider, on the shared ``/metrics``."""

    def __init__(self, decider: DeciderProcess) -> None:
        self._decider = decider

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "prescaler_decider_up",
            "1 while the decider process is connected (its series are served).",
        )
        up.add_metric([], 1.0 if self._decider.connected else 0.0)
        yield up
        restarts = CounterMetricFamily(
            "prescaler_decider_restarts", "Unplanned exits of the decider process."
        )
        restarts.add_metric([], float(self._decider.restarts))
        yield restarts
