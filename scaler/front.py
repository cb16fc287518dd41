"""The compiled gRPC front of ``prescaler serve``: its table and its process.

Why: KEDA polls each ScaledObject with GetMetricSpec, GetMetrics and
IsActive every polling interval. At 1,000 ScaledObjects polled every second
that is 3,000 RPC/s, and grpcio costs ~0.25 ms of a Python thread per call
even when the handler does nothing, so on a small node the event loop is
saturated and the p99 latency KEDA sees is tens of milliseconds. The answers
change only when the state re-decides (once per refresh), so a compiled
front (``front/*.go``, built into ``build/prescaler-front``) answers those
three calls from a table this module publishes, and forwards everything else
to the Python server on a private unix socket: first calls, errors,
``StreamIsActive``, health and reflection. The front holds no scaling logic:
every answer it gives is bytes Python serialized.

The contract between the two (``protos/front.proto``):

- :class:`FrontTable` gives each ScaledObject an id; a successful call the
  front forwarded carries it in the trailer :data:`OBJECT_TRAILER`.
- ``Front/Watch`` streams the table: a full snapshot, then every change
  (checked every :data:`SWEEP_S`; decisions change once per refresh).
- ``Front/Report`` brings back the ids the front answered (they count as
  polls: an object KEDA keeps asking about is never expired) and the front's
  RPC latency histogram, which replaces the Python handlers' own timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import grpc

from decision.policy import Decision
from decision.settings import ScalerSettings
from protos import front_pb2
from scaler.telemetry import RPC_BUCKETS, ScalerTelemetry
from scaler.tls import ServerTls

__all__ = [
    "FRONT_ENV",
    "FRONT_SERVICE",
    "OBJECT_TRAILER",
    "FrontOptions",
    "FrontProcess",
    "FrontTable",
    "add_front_service",
    "find_front_binary",
]

log = logging.getLogger(__name__)

FRONT_ENV = "PRESCALER_FRONT"
"""Environment variable naming the ``prescaler-front`` binary."""
FRONT_SERVICE = "prescaler.front.v1.Front"
OBJECT_TRAILER = "x-prescaler-object"
SWEEP_S = 0.2
_LISTENING = "PRESCALER_FRONT_LISTENING"
_START_TIMEOUT_S = 15.0

ObjectKey = tuple[str, str]
Answers = tuple[bool, bytes, bytes]
"""(ready, serialized GetMetricsResponse, serialized IsActiveResponse)."""
AnswerFn = Callable[[Decision, ScalerSettings, bool], Answers]


class StateView(Protocol):
    """What the table reads from ``scaler.state.ScalerState``."""

    def register(self, namespace: str, name: str, settings: ScalerSettings) -> None: ...

    def decision(self, namespace: str, name: str) -> Decision: ...

    def is_active(self, namespace: str, name: str) -> bool: ...


def find_front_binary(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The ``prescaler-front`` binary: ``explicit``, ``$PRESCALER_FRONT``, the
    PATH, or ``build/prescaler-front`` of a source checkout (``make front``)."""
    for candidate in (explicit, os.environ.get(FRONT_ENV)):
        if candidate:
            path = Path(candidate)
            return path if path.is_file() and os.access(path, os.X_OK) else None
    on_path = shutil.which("prescaler-front")
    if on_path:
        return Path(on_path)
    built = Path(__file__).resolve().parents[1] / "build" / "prescaler-front"
    return built if built.is_file() and os.access(built, os.X_OK) else None


@dataclass
class _Sent:
    decision: Decision
    active: bool
    settings: ScalerSettings
    answers: Answers


class FrontTable:
    """Object ids for the front, and the answers it may give on its own.

    Lives on the event loop (the gRPC handlers and the Watch stream), so it
    needs no lock.
    """

    def __init__(self, state: StateView, answer: AnswerFn, metric_spec: bytes) -> None:
        self._state = state
        self._answer = answer
        self.metric_spec = metric_spec
        self._ids: dict[ObjectKey, int] = {}
        self._objects: dict[int, tuple[ObjectKey, ScalerSettings]] = {}
        self._next_id = 1

    def id_for(self, namespace: str, name: str, settings: ScalerSettings) -> int:
        """The id of a ScaledObject the state has just registered."""
        key = (namespace, name)
        oid = self._ids.get(key)
        if oid is None:
            oid = self._ids[key] = self._next_id
            self._next_id += 1
        current = self._objects.get(oid)
        if current is None or current[1] is not settings:
            self._objects[oid] = (key, settings)
        return oid

    def __len__(self) -> int:
        return len(self._objects)

    def touch(self, ids: Iterable[int]) -> None:
        """Ids the front answered: each is a poll, as if Python had served it."""
        for oid in ids:
            known = self._objects.get(oid)
            if known is None:
                continue
            (namespace, name), settings = known
            try:
                self._state.register(namespace, name, settings)
            except Exception:
                log.exception("re-registering %s/%s from the front's report failed", *known[0])

    def changes(self, sent: dict[int, _Sent], *, full: bool) -> front_pb2.TableUpdate:
        """What changed since ``sent`` (updated in place), as one message.
        Objects the state forgot (expired) are dropped here and sent as removed."""
        update = front_pb2.TableUpdate(reset=full)
        if full:
            sent.clear()
            update.metric_spec = self.metric_spec
        for oid, (key, settings) in list(self._objects.items()):
            try:
                decision = self._state.decision(*key)
                active = self._state.is_active(*key)
            except KeyError:
                del self._objects[oid]
                if self._ids.get(key) == oid:
                    del self._ids[key]
                continue
            prev = sent.get(oid)
            if (
                prev is not None
                and prev.decision is decision
                and prev.active == active
                and prev.settings is settings
            ):
                continue
            answers = self._answer(decision, settings, active)
            if prev is not None and prev.answers == answers:
                prev.decision, prev.active, prev.settings = decision, active, settings
                continue
            sent[oid] = _Sent(decision, active, settings, answers)
            ready, metrics, is_active = answers
            update.answers.add(id=oid, ready=ready, get_metrics=metrics, is_active=is_active)
        gone = [oid for oid in sent if oid not in self._objects]
        for oid in gone:
            del sent[oid]
        update.removed.extend(gone)
        return update

    async def watch(self, sweep_s: float = SWEEP_S) -> AsyncIterator[bytes]:
        """The Watch stream: a snapshot, then changes as they happen."""
        sent: dict[int, _Sent] = {}
        update = self.changes(sent, full=True)
        yield update.SerializeToString()
        while True:
            await asyncio.sleep(sweep_s)
            update = self.changes(sent, full=False)
            if update.answers or update.removed:
                yield update.SerializeToString()


def add_front_service(
    table: FrontTable, telemetry: ScalerTelemetry, server: grpc.aio.Server
) -> None:
    """Serve ``Front/Watch`` and ``Front/Report`` (raw bytes in and out)."""

    async def watch(_request: bytes, _context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        async for message in table.watch():
            yield message

    async def report(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        try:
            message = front_pb2.ReportRequest.FromString(request)
        except Exception as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"ReportRequest: {exc}")
        table.touch(message.seen)
        for latency in message.latency:
            try:
                telemetry.add_rpc_counts(latency.method, list(latency.counts), latency.sum)
            except ValueError as exc:  # a front built with other buckets
                log.warning("front's latency report ignored: %s", exc)
        return b""

    handlers = {
        "Watch": grpc.unary_stream_rpc_method_handler(watch),
        "Report": grpc.unary_unary_rpc_method_handler(report),
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(FRONT_SERVICE, handlers),)
    )


@dataclass(frozen=True)
class FrontOptions:
    """How ``start_server`` runs the front."""

    binary: Path
    report_interval_s: float = 2.0


class FrontProcess:
    """One ``prescaler-front`` child: started, supervised, drained.

    It is restarted on the same port if it dies (KEDA's connection breaks and
    reconnects; KEDA keeps the replica count meanwhile), and it exits by
    itself if this process dies (its stdin closes).
    """

    def __init__(
        self,
        options: FrontOptions,
        *,
        host: str,
        port: int,
        backend: Path,
        private_dir: Path,
        tls: ServerTls | None,
        grace_s: float,
    ) -> None:
        self.options = options
        self.host = host
        self.port = port
        self.backend = backend
        self.private_dir = private_dir
        self.tls = tls
        self.grace_s = grace_s
        self.restarts = 0
        self._process: asyncio.subprocess.Process | None = None
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = False

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def _tls_args(self) -> list[str]:
        tls = self.tls
        if tls is None:
            return []
        files: list[tuple[str, Path | None, bytes | None]] = [
            ("--tls-cert", tls.cert_path, tls.cert_chain),
            ("--tls-key", tls.key_path, tls.private_key),
            ("--client-ca", tls.client_ca_path, tls.client_ca),
        ]
        args: list[str] = []
        for flag, path, content in files:
            if content is None:
                continue
            if path is None:  # given as bytes: hand the front a private copy
                path = self.private_dir / flag.lstrip("-")
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as out:
                    out.write(content)
            args += [flag, str(path)]
        return args

    def _command(self) -> list[str]:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return [
            str(self.options.binary),
            "--listen",
            f"{host}:{self.port}",
            "--backend",
            str(self.backend),
            "--buckets",
            ",".join(repr(b) for b in RPC_BUCKETS),
            "--report-interval",
            f"{self.options.report_interval_s}s",
            "--grace",
            f"{self.grace_s}s",
            *self._tls_args(),
        ]

    async def _spawn(self) -> None:
        process = await asyncio.create_subprocess_exec(
            *self._command(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert process.stdout is not None
        try:
            line = await asyncio.wait_for(process.stdout.readline(), _START_TIMEOUT_S)
        except TimeoutError:
            line = b""
        text = line.decode(errors="replace").strip()
        if not text.startswith(_LISTENING):
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            code = await process.wait()
            raise OSError(
                f"prescaler-front ({self.options.binary}) did not start (exit {code}); "
                f"its log is above. Address {self.host}:{self.port}"
            )
        self.port = int(text.split()[1])
        self._process = process

    async def start(self) -> int:
        """Start the front; returns the port KEDA connects to."""
        await self._spawn()
        self._supervisor = asyncio.create_task(self._supervise(), name="prescaler-front")
        return self.port

    async def _supervise(self) -> None:
        while not self._stopping:
            process = self._process
            assert process is not None
            code = await process.wait()
            if self._stopping:
                return
            self.restarts += 1
            log.error("prescaler-front exited (%s); restarting it on port %d", code, self.port)
            await asyncio.sleep(min(5.0, 0.1 * self.restarts))
            try:
                await self._spawn()
            except OSError as exc:
                log.error("%s", exc)

    async def kill(self) -> None:
        """Stop at once, no drain (a failed start, tests)."""
        self._stopping = True
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        await self._end_supervisor()

    async def _end_supervisor(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
            self._supervisor = None
        process = self._process
        if process is not None and process.stdin is not None:
            process.stdin.close()

    async def stop(self) -> None:
        """Drain: the front stops taking calls and lets in-flight ones finish
        (``grace_s``), while this process still answers the forwarded ones."""
        self._stopping = True
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), self.grace_s + 5.0)
            except TimeoutError:
                log.warning("prescaler-front did not stop in time; killing it")
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        await self._end_supervisor()


def private_socket_dir() -> tuple[Path, Path]:
    """A 0700 directory and the backend socket path inside it."""
    directory = Path(tempfile.mkdtemp(prefix="prescaler-front-"))
    return directory, directory / "backend.sock"


def remove_private_dir(directory: Path | None) -> None:
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
