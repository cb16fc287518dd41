"""The load generator: a trace replayed over HTTP against the live replicas.

Each request is sent at its arrival time (trace seconds / K) as a streaming
``/v1/completions`` call of exactly its token lengths to the Ready replica
with the fewest outstanding requests, or waits at the gateway. Outcomes
follow the simulator's rules (timed out, rejected, retried once after a
replica dies); a request in flight when the run stops is ``STOPPED``, apart
from the outcomes. :meth:`LoadGenerator.check` raises unless each request ended
exactly once. Times are trace seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import aiohttp
import numpy as np

from simulations.simulation import COMPLETED, PENDING, REJECTED, TIMED_OUT, ConservationError
from simulations.traffic import Workload

__all__ = [
    "POD_LOST_REASON",
    "STOPPED",
    "LoadGenerator",
    "Replica",
    "Router",
]

POD_LOST_REASON = "replica terminated while serving (already retried once)"
STOPPED = 4
"""Status of a request in flight when the run stopped (beside the simulator's
PENDING, COMPLETED, TIMED_OUT and REJECTED; never in a simulated result)."""


class Replica(Protocol):
    """A Ready replica as the router sees it."""

    url: str
    outstanding: int


class Router(Protocol):
    """The controller's side: which replicas are Ready, and a wake-up when that changes."""

    def routable(self) -> Sequence[Replica]: ...

    async def wait_routable(self, timeout_s: float) -> bool: ...


class _Lost(Exception):
    """The replica went away mid-request."""


@dataclass(frozen=True)
class Clock:
    """Trace time on the wall clock: ``trace = (monotonic - wall0) * speed``."""

    wall0: float
    speed: float

    def now(self) -> float:
        return (time.monotonic() - self.wall0) * self.speed

    def wall_at(self, trace_s: float) -> float:
        return self.wall0 + trace_s / self.speed


class LoadGenerator:
    """Replays ``workload`` (see the module docstring); records every request."""

    def __init__(
        self,
        workload: Workload,
        router: Router,
        *,
        timeout_s: float = 60.0,
        model: str | None = None,
        on_first_token: Callable[[float], None] | None = None,
    ) -> None:
        self.workload = workload
        self.router = router
        self.timeout_s = timeout_s
        self.model = model
        n = len(workload)
        self.n = n
        self._arrival: list[float] = workload.arrival_s.tolist()
        self._prompt: list[int] = workload.prompt_tokens.tolist()
        self._output: list[int] = workload.output_tokens.tolist()
        self.status = np.zeros(n, dtype=np.int8)
        self.ttft_s = np.full(n, np.nan)
        self.tpot_s = np.full(n, np.nan)
        self.e2e_s = np.full(n, np.nan)
        self.reasons: Counter[str] = Counter()
        self.retried = 0
        self.arrived = 0
        self.done = 0
        self.at_gateway = 0
        self.inflight = 0
        self.served_tokens = 0.0
        self.recent_ttft: deque[tuple[float, float]] = deque(maxlen=4096)
        self.lag_s: list[float] = []
        """Per request, trace seconds between its arrival and the moment it was sent
        (the load generator's own lateness, never counted in its TTFT)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None
        self._clock: Clock | None = None
        self._on_first_token = on_first_token

    # ------------------------------------------------------------ outcomes
    def _end(self, i: int, outcome: int, reason: str | None = None) -> None:
        if self.status[i] != PENDING:
            raise ConservationError(f"request {i} ended twice")
        self.status[i] = outcome
        self.done += 1
        if reason is not None:
            self.reasons[reason] += 1

    def check(self, arrived_only: bool = False) -> None:
        """Every request (or every one that arrived) ended exactly once, with reasons."""
        upto = self.arrived if arrived_only else self.n
        pending = np.flatnonzero(self.status[:upto] == PENDING)
        if pending.size:
            raise ConservationError(
                f"{pending.size} request(s) never ended (first: {pending[:5].tolist()})"
            )
        rejected = int(np.count_nonzero(self.status[:upto] == REJECTED))
        if sum(self.reasons.values()) != rejected:
            raise ConservationError("every rejected request needs exactly one reason")

    # ----------------------------------------------------------------- run
    async def run(self, clock: Clock, stop: asyncio.Event) -> None:
        """Send every request at its time; return when all ended (or ``stop`` is set)."""
        self._clock = clock
        connector = aiohttp.TCPConnector(limit=0, force_close=False, keepalive_timeout=30)
        async with aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=None)
        ) as session:
            self._session = session
            try:
                for i in range(self.n):
                    delay = clock.wall_at(self._arrival[i]) - time.monotonic()
                    if delay > 0:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(stop.wait(), timeout=delay)
                    if stop.is_set():
                        break
                    self.arrived = i + 1
                    task = asyncio.create_task(self._request(i))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                while self._tasks and not stop.is_set():
                    waiter = asyncio.create_task(stop.wait())
                    await asyncio.wait({waiter, *self._tasks}, return_when=asyncio.FIRST_COMPLETED)
                    waiter.cancel()
            finally:
                await self.cancel_all()
                self._session = None

    async def cancel_all(self) -> None:
        """End every request still in flight as ``STOPPED`` (Ctrl-C, end of a run)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for i in np.flatnonzero(self.status[: self.arrived] == PENDING).tolist():
            self._end(i, STOPPED)

    @property
    def stopped(self) -> int:
        """Requests that were in flight when the run stopped."""
        return int(np.count_nonzero(self.status == STOPPED))

    # ------------------------------------------------------------ requests
    async def _request(self, i: int) -> None:
        clock = self._clock
        assert clock is not None
        # TTFT counts from the arrival, or from when this process got round to
        # sending it if that was later (its own lateness is not the system's)
        arrival_wall = max(clock.wall_at(self._arrival[i]), time.monotonic())
        self.lag_s.append((arrival_wall - clock.wall_at(self._arrival[i])) * clock.speed)
        deadline_wall = clock.wall_at(self._arrival[i] + self.timeout_s)
        attempt = 0
        while True:
            replica = await self._pick(deadline_wall)
            if replica is None:
                self._end(i, TIMED_OUT)
                return
            replica.outstanding += 1
            self.inflight += 1
            try:
                outcome = await self._send(i, replica, arrival_wall, deadline_wall, clock)
            except _Lost:
                outcome = None
            finally:
                replica.outstanding -= 1
                self.inflight -= 1
            if outcome is not None:
                return
            if attempt >= 1:
                self._end(i, REJECTED, POD_LOST_REASON)
                return
            attempt += 1
            self.retried += 1

    async def _pick(self, deadline_wall: float) -> Replica | None:
        """The least-loaded Ready replica, waiting at the gateway until one is Ready."""
        waited = False
        try:
            while True:
                replicas = self.router.routable()
                if replicas:
                    return min(replicas, key=lambda r: r.outstanding)
                left = deadline_wall - time.monotonic()
                if left <= 0:
                    return None
                if not waited:
                    waited = True
                    self.at_gateway += 1
                await self.router.wait_routable(left)
        finally:
            if waited:
                self.at_gateway -= 1

    async def _send(
        self, i: int, replica: Replica, arrival_wall: float, deadline_wall: float, clock: Clock
    ) -> int | None:
        """One attempt; the outcome recorded, or None / _Lost when the replica was lost."""
        session = self._session
        assert session is not None
        prompt, output = self._prompt[i], self._output[i]
        body: dict[str, object] = {
            "prompt": [1] * prompt,
            "max_tokens": output,
            "stream": True,
        }
        if self.model:
            body["model"] = self.model
        speed = clock.speed
        first: float | None = None
        try:
            async with contextlib.AsyncExitStack() as stack:
                left = deadline_wall - time.monotonic()
                if left <= 0:
                    self._end(i, TIMED_OUT)
                    return TIMED_OUT
                try:
                    resp = await asyncio.wait_for(
                        stack.enter_async_context(
                            session.post(f"{replica.url}/v1/completions", data=json.dumps(body))
                        ),
                        timeout=left,
                    )
                except TimeoutError:
                    self._end(i, TIMED_OUT)
                    return TIMED_OUT
                if resp.status == 400:
                    try:
                        message = (await resp.json())["message"]
                    except (ValueError, KeyError, TypeError, aiohttp.ClientError):
                        message = "HTTP 400"
                    self._end(i, REJECTED, str(message))
                    return REJECTED
                if resp.status != 200:
                    raise _Lost(f"HTTP {resp.status}")
                content = resp.content
                tail = b""
                while True:
                    if first is None:
                        left = deadline_wall - time.monotonic()
                        if left <= 0:
                            self._end(i, TIMED_OUT)
                            return TIMED_OUT
                        try:
                            chunk = await asyncio.wait_for(content.readany(), timeout=left)
                        except TimeoutError:
                            self._end(i, TIMED_OUT)
                            return TIMED_OUT
                    else:
                        chunk = await content.readany()
                    if not chunk:
                        raise _Lost("stream ended without [DONE]")
                    if b'{"error"' in chunk:
                        raise _Lost("engine error event")
                    if first is None:
                        first = time.monotonic()
                        ttft = (first - arrival_wall) * speed
                        self.ttft_s[i] = ttft
                        self.recent_ttft.append((clock.now(), ttft))
                        if self._on_first_token is not None:
                            self._on_first_token(ttft)
                    tail = (tail + chunk)[-32:]
                    if b"data: [DONE]" in tail:
                        break
            end = time.monotonic()
        except (aiohttp.ClientError, ConnectionError, asyncio.IncompleteReadError) as exc:
            if first is not None:
                self.ttft_s[i] = math.nan
            raise _Lost(str(exc)) from exc
        except _Lost:
            if first is not None:
                self.ttft_s[i] = math.nan
            raise
        assert first is not None
        self.e2e_s[i] = (end - arrival_wall) * speed
        if output >= 2:
            self.tpot_s[i] = (end - first) * speed / (output - 1)
        self.served_tokens += prompt + output
        self._end(i, COMPLETED)
        return COMPLETED
