"""The decider: ``prescaler serve``'s live loop, in a child process.

Reading sources, stepping 1,000 trackers and fitting their forecasters is
seconds of CPU per forecast bin, nearly all of it Python holding the GIL; in
the process that answers KEDA every call would wait behind it. Here it
competes only for a CPU, at a lower priority (:data:`DECIDER_NICE`). This is
the child's side: a ``scaler.state.ScalerState`` plus the :class:`Publisher`
that turns its answers into ``TableUpdate`` messages every :data:`SWEEP_S`;
it exits when the serving process closes the socket (or dies).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Sequence

from decision.answer import NO_ANSWER_REASONS, fresh_at_s
from scaler.decider_wire import (
    Answer,
    DeciderConfig,
    MetricsRequest,
    MetricsText,
    ObjectKey,
    Polls,
    Registrations,
    TableUpdate,
    read_message,
    write_message,
)
from scaler.registry import Entry
from scaler.sources import default_source_factory
from scaler.state import ScalerState
from scaler.telemetry import ScalerTelemetry

__all__ = ["DECIDER_NICE", "SWEEP_S", "Publisher", "main"]

log = logging.getLogger(__name__)

DECIDER_NICE = 10
"""Niceness added to the decider: on a busy node the kernel runs the
serving process first (an RPC has milliseconds; a refresh has until the
next one, seconds away), while the decider still gets about a tenth of a
contended CPU instead of next to nothing (19)."""

SWEEP_S = 0.2
"""How often the answers are compared and changes sent: decisions change
once per refresh, so this bounds how late the serving process learns one."""


def stale_since(entry: Entry) -> float | None:
    """When the object's data was last fresh, if its decision is on stale data
    (``decision.answer.fresh_at_s``), rounded to 0.1 s so that an unchanged
    instant does not resend the answer."""
    fresh_at = fresh_at_s(entry.decision, entry.decisions)
    return None if fresh_at is None else round(fresh_at, 1)


class Publisher:
    """The changes in ``state``'s answers since the last :meth:`sweep`."""

    def __init__(self, state: ScalerState) -> None:
        self.state = state
        self._sent: dict[ObjectKey, Answer] = {}
        self._queues: dict[ObjectKey, asyncio.Queue[bool]] = {}
        self._status: dict[str, float] = {}
        self._reset = True

    def sweep(self) -> TableUpdate | None:
        """One update (``None`` when nothing changed); the first is a reset."""
        state = self.state
        answers: list[tuple[ObjectKey, Answer]] = []
        bursts: list[ObjectKey] = []
        seen: set[ObjectKey] = set()
        for entry in state.objects:
            key = entry.key
            seen.add(key)
            decision = entry.decision
            problem = state.sources.problem(entry) if decision.reason in NO_ANSWER_REASONS else None
            answer = Answer(
                int(decision.replicas),
                decision.reason,
                bool(entry.active),
                problem,
                stale_since(entry),
            )
            if self._sent.get(key) != answer:
                self._sent[key] = answer
                answers.append((key, answer))
            queue = self._queues.get(key)
            if queue is None or queue not in entry.subscribers:
                queue = self._queues[key] = state.subscribe_active(*key)
            if not queue.empty():
                while not queue.empty():
                    queue.get_nowait()
                bursts.append(key)
        removed = [key for key in self._sent if key not in seen]
        for key in removed:
            del self._sent[key]
            self._queues.pop(key, None)
        status = state.status()
        changed = status != self._status
        self._status = status
        reset, self._reset = self._reset, False
        if not (reset or answers or removed or bursts or changed):
            return None
        return TableUpdate(reset, answers, removed, bursts, status if changed else {})

    def forget(self, key: ObjectKey) -> None:
        """Send ``key``'s answer again at the next sweep: the serving process
        registered it anew, and may have dropped it on a removal that crossed
        the registration."""
        self._sent.pop(key, None)


async def _commands(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    state: ScalerState,
    publisher: Publisher,
    telemetry: ScalerTelemetry,
) -> None:
    """Registrations and metrics requests, until the serving process hangs up.

    One object that cannot be registered is logged by name and skipped: were
    the error to end this process, the restarted decider would be told of the
    same object and fail again, for every object.
    """
    while True:
        try:
            message = await read_message(reader)
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        if isinstance(message, Registrations):
            for (namespace, name), settings in message.objects:
                try:
                    state.register(namespace, name, settings)
                except Exception:
                    log.exception("%s/%s: cannot register it; skipped", namespace, name)
                publisher.forget((namespace, name))
        elif isinstance(message, Polls):
            for key in message.keys:
                entry = state.objects.get(key)
                if entry is None:
                    continue  # forgotten: the serving process hears of it
                try:
                    state.register(*key, entry.settings)
                except Exception:
                    log.exception("%s/%s: cannot renew it; skipped", *key)
        elif isinstance(message, MetricsRequest):
            text = await asyncio.to_thread(telemetry.render)
            write_message(writer, MetricsText(message.serial, text))
        else:
            log.error("unexpected message from the serving process: %r", type(message))


async def run(sock: socket.socket) -> None:
    """Serve one serving process over ``sock`` until it hangs up."""
    reader, writer = await asyncio.open_unix_connection(sock=sock)
    config = await read_message(reader)
    if not isinstance(config, DeciderConfig):
        raise TypeError(f"expected a DeciderConfig first, got {type(config)}")
    telemetry = ScalerTelemetry(part="loop")
    state = ScalerState(
        telemetry=telemetry,
        source_factory=default_source_factory(rate_window_s=config.rate_window_s),
        **config.state_kwargs(),
    )
    await state.start()
    publisher = Publisher(state)
    commands = asyncio.create_task(_commands(reader, writer, state, publisher, telemetry))
    loop = asyncio.get_running_loop()
    sent_at = loop.time()
    try:
        while not commands.done():
            update = publisher.sweep()
            if update is None and loop.time() - sent_at >= config.refresh_interval_s:
                update = TableUpdate(reset=False)  # alive: the serving process times silence
            if update is not None:
                write_message(writer, update)
                await writer.drain()
                sent_at = loop.time()
            await asyncio.wait({commands}, timeout=SWEEP_S)
    except ConnectionError:
        pass
    finally:
        commands.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await commands
        await state.stop()
        writer.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="prescaler's decider (internal)")
    parser.add_argument("--fd", type=int, required=True)
    parser.add_argument("--nice", type=int, default=DECIDER_NICE)
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s decider %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # Ctrl-C in a terminal, or a SIGTERM to the process group (a container's
    # stop), reaches this child too: the serving process decides when it ends
    # (it drains, then closes the socket), so neither restarts it mid-drain.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.nice:
        with contextlib.suppress(OSError):
            os.nice(args.nice)
    asyncio.run(run(socket.socket(fileno=args.fd)))
    # The compute thread may be inside a refresh or a backfill chunk (seconds
    # of work); the interpreter's exit would wait for it. Nothing is left to
    # save (the scaler is stateless), so leave at once.
    logging.shutdown()
    os._exit(0)


if __name__ == "__main__":
    from scaler.decider import main as _main

    sys.exit(_main())
