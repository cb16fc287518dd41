"""Runs a `Replica` on the wall clock inside an asyncio loop.

One task owns the replica's clock: it advances the model to "now", hands
finished records and token counts to the waiting streams, then sleeps until
the step in flight ends or a request arrives (nothing polls). Model time is
derived from ``loop.time()`` by a :class:`ModelClock`, so a late wake-up never
accumulates. A faster clock (the stack's compressed time) with a
``stream_quantum_s`` wakes only at the engine's own events or every quantum,
not at every decode step: first tokens and completions stay exact at less CPU.

If the replica raises anywhere, the driver records it once and wakes every
stream with it, so each request in flight gets an answer (as when vLLM's
EngineCore dies); later submissions raise `EngineDead`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import math
from dataclasses import dataclass

from engine.replica import Replica, RequestRejected
from engine.requests import Request, RequestRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelClock:
    """How the replica's model time follows the loop's clock, and when the clock task wakes.

    ``speed``: model seconds per wall second. ``stream_quantum_s``: None wakes
    at every token's due time; a number wakes at the engine's events or after
    that many wall seconds, whichever is first (tokens are streamed in groups).
    """

    speed: float = 1.0
    stream_quantum_s: float | None = None

    def __post_init__(self) -> None:
        if not (self.speed > 0 and math.isfinite(self.speed)):
            raise ValueError(f"speed must be a finite number > 0, got {self.speed}")
        if self.stream_quantum_s is not None and not self.stream_quantum_s > 0:
            raise ValueError(f"stream_quantum_s must be > 0, got {self.stream_quantum_s}")


WALL_CLOCK = ModelClock()
"""Model time is wall time, woken at every token (``prescaler emulate``)."""


class EngineDead(RuntimeError):
    """The replica model failed: no request can be served any more."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"EngineCore encountered an issue: {type(cause).__name__}: {cause}")
        self.cause = cause


class TokenStream:
    """What one HTTP request waits on: new tokens, then its final record (or an error)."""

    __slots__ = ("changed", "error", "notified", "observed", "record", "request_id")

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.changed = asyncio.Event()
        self.notified = 0  # tokens handed to the client as of the last wake-up
        self.observed = 0  # tokens the engine has produced (ahead while on the way out)
        self.record: RequestRecord | None = None
        self.error: EngineDead | None = None

    def deliver(self, tokens: int) -> None:
        """Tokens reach the client (after the way out): wake its handler."""
        if tokens > self.notified and self.record is None:
            self.notified = tokens
            self.changed.set()

    def finish(self, record: RequestRecord) -> None:
        """The last token reached the client: the request is done."""
        if self.record is None and self.error is None:
            self.record = record
            self.changed.set()

    async def wait(self) -> tuple[int, RequestRecord | None]:
        """Wait until something changed; return (tokens generated, record if finished).

        Raises `EngineDead` once the engine failed before this request finished.
        """
        await self.changed.wait()
        self.changed.clear()
        if self.error is not None and self.record is None:
            raise self.error
        rec = self.record
        return (rec.output_tokens if rec is not None else self.notified), rec


class ReplicaDriver:
    """Drive `replica` on the running asyncio loop, its model time on `clock`."""

    def __init__(self, replica: Replica, clock: ModelClock = WALL_CLOCK) -> None:
        self.replica = replica
        self.clock = clock
        self._streams: dict[str, TokenStream] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._loop = asyncio.get_running_loop()
        self._t0 = self._loop.time() - replica.now / clock.speed
        self._ids = itertools.count()
        self.failure: BaseException | None = None
        # the way out (``RequestOverhead``): tokens reach the client this late
        self._out_fixed, self._out_per_token = replica.way_out_s
        self._delayed = self._out_fixed > 0 or self._out_per_token > 0

    # ----------------------------------------------------------- lifecycle
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="replica-clock")

    async def stop(self) -> None:
        """Stop the clock; a recorded engine failure is not raised again here."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    @property
    def healthy(self) -> bool:
        return self.failure is None and self._task is not None and not self._task.done()

    def model_now(self) -> float:
        return max((self._loop.time() - self._t0) * self.clock.speed, self.replica.now)

    # ------------------------------------------------------------ requests
    def new_request_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids):08d}"

    def submit(
        self, request_id: str, prompt_tokens: int, output_tokens: int, finished_reason: str
    ) -> TokenStream:
        """Queue a request now.

        Raises RequestRejected (a ValueError) if it cannot run, `EngineDead`
        once the engine failed (or if this submission makes it fail).
        """
        if self.failure is not None:
            raise EngineDead(self.failure)
        req = Request(
            request_id,
            self.model_now(),
            prompt_tokens,
            output_tokens,
            "stop" if finished_reason == "stop" else "length",
        )
        try:
            self.replica.submit(req)
        except RequestRejected:
            raise
        except Exception as exc:  # the model itself broke (e.g. a bad step time)
            self._fail(exc)
            raise EngineDead(exc) from exc
        stream = TokenStream(request_id)
        self._streams[request_id] = stream
        self._wake.set()
        return stream

    def abort(self, stream: TokenStream) -> None:
        """The client went away before the end: free its place in the batch."""
        if stream.record is not None or stream.error is not None:
            return
        self.sync()
        if stream.record is not None or self.failure is not None:
            return
        try:
            rec = self.replica.abort(stream.request_id)
        except Exception as exc:
            self._fail(exc)
            return
        self._streams.pop(stream.request_id, None)
        if rec is not None:
            stream.record = rec
        self._wake.set()

    def sync(self) -> None:
        """Advance the model to now and wake the streams that have news.

        A failure of the model is recorded (`failure`) and handed to every
        stream, never raised: handlers calling this (``/metrics``, aborts)
        keep answering.
        """
        if self.failure is not None:
            return
        replica = self.replica
        try:
            now = self.model_now()
            for rec in replica.advance_to(now):
                stream = self._streams.pop(rec.request_id, None)
                if stream is not None:
                    if self._delayed and rec.finished_reason != "abort":
                        self._loop.call_at(self._wall(rec.finish_s), stream.finish, rec)
                    else:
                        stream.record = rec
                        stream.changed.set()
            for rid, stream in self._streams.items():
                n = replica.tokens_generated(rid)
                if n != stream.observed:
                    stream.observed = n
                    if self._delayed:
                        due = now + self._out_fixed + self._out_per_token * n
                        self._loop.call_at(self._wall(due), stream.deliver, n)
                    else:
                        stream.notified = n
                        stream.changed.set()
        except Exception as exc:
            self._fail(exc)

    def _wall(self, model_s: float) -> float:
        """The loop time at which the model's clock reads ``model_s``."""
        return self._t0 + model_s / self.clock.speed

    def _fail(self, exc: BaseException) -> None:
        """The engine is dead: remember why and answer every waiting stream with it."""
        if self.failure is None:
            self.failure = exc
            log.error("replica model failed; failing every request", exc_info=exc)
        streams = list(self._streams.values())
        self._streams.clear()
        for stream in streams:
            stream.error = EngineDead(self.failure)  # one instance each: raised in its task
            stream.changed.set()
        self._wake.set()  # the clock task sees the failure and ends

    def _next_wake(self) -> float | None:
        """The loop time to wake at next; None: only when a request comes."""
        clock = self.clock
        quantum = clock.stream_quantum_s
        replica = self.replica
        nxt = replica.next_token_time() if quantum is None else replica.next_event_time()
        if nxt is None:
            return None
        when = self._t0 + nxt / clock.speed
        return when if quantum is None else min(when, self._loop.time() + quantum)

    async def _run(self) -> None:
        loop = self._loop
        try:
            while True:
                self.sync()
                if self.failure is not None:
                    return
                when = self._next_wake()
                self._wake.clear()
                if when is None:
                    await self._wake.wait()
                    continue
                if when > loop.time():
                    handle = loop.call_at(when, self._wake.set)
                    try:
                        await self._wake.wait()
                    finally:
                        handle.cancel()
        except Exception as exc:  # the engine is dead: /health says so, streams get errors
            self._fail(exc)
