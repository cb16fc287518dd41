"""The serving process's copy of the decider's answers.

The gRPC handlers read it as they read ``scaler.state.ScalerState`` (both
implement ``scaler.service.ScalerStateProtocol``), so KEDA gets the same
answers whichever process runs the live loop. A restarted decider answers
``warming_up`` (UNAVAILABLE) until its backfill is done, so an answer made
by a decider that is gone is *held*: served until the new decider has a real
answer, or until its data is ``fallbackAfterSeconds`` old
(``decision.answer.past_fallback``, the policy's own limit, timed from when
the data was last fresh: ``decision.answer.fresh_at_s``); after that, the
new decider's answer, or UNAVAILABLE naming the cause.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from decision.answer import NO_ANSWER_REASONS, Decision, Reason, past_fallback
from decision.settings import ScalerSettings
from decision.tracker import warming_decision
from scaler.decider_wire import Answer, ObjectKey, TableUpdate

__all__ = ["DECIDER_DOWN", "SUBSCRIBER_QUEUE", "DecisionTable"]

SUBSCRIBER_QUEUE = 16
"""Bursts a StreamIsActive subscriber may have unread before new ones are dropped."""

DECIDER_DOWN = "the decision process is restarting"
"""What an object without an answer says while no decider answers for it."""


@dataclass
class _Row:
    """One object's answer, and whether the decider that made it is gone."""

    answer: Answer
    decision: Decision
    stale_since: float | None = None
    """Monotonic time its data was last fresh, if it was stale when sent."""
    held_from: float | None = None
    """Monotonic time its data was last fresh, once its decider is lost
    (``None``: the live decider's answer)."""
    successor: Answer | None = None
    """What the live decider says meanwhile (no answer yet)."""


def _decision(answer: Answer, time_s: float) -> Decision:
    return Decision(time_s, answer.replicas, answer.reason, {}, data_stale=False)


class DecisionTable:
    """Answers by ScaledObject, fed by :class:`TableUpdate` messages.

    ``clock`` (monotonic) times held answers; ``wall`` stamps decisions.
    ``on_register`` runs when an object is new or its settings changed (the
    decider must hear of it at once); polls of known objects are only
    collected (:meth:`take_polled`).
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        on_register: Callable[[], None] | None = None,
    ) -> None:
        self._clock = clock
        self._wall = wall
        self.on_register = on_register
        self._settings: dict[ObjectKey, ScalerSettings] = {}
        self._rows: dict[ObjectKey, _Row] = {}
        self._new: dict[ObjectKey, ScalerSettings] = {}
        self._polled: set[ObjectKey] = set()
        self._subscribers: dict[ObjectKey, set[asyncio.Queue[bool]]] = {}
        self._decider_lost_at: float | None = None
        self.last_update_at: float | None = None
        """Monotonic time the decider last sent an update (a live one sends
        its status every refresh); ``None`` before the first."""
        self.status: dict[str, float] = {}
        """The decider's latest ``ScalerState.status()``."""

    # ------------------------------------------------------------ the RPC side
    def register(self, namespace: str, name: str, settings: ScalerSettings) -> None:
        """Note a call about an object: new (or new settings) or a poll."""
        key = (namespace, name)
        known = self._settings.get(key)
        if known is settings or (known is not None and known == settings):
            self._polled.add(key)
            return
        self._settings[key] = settings
        self._new[key] = settings
        if self.on_register is not None:
            self.on_register()

    def decision(self, namespace: str, name: str) -> Decision:
        """The latest decision (replicas and reason). ``KeyError`` if unknown."""
        key = (namespace, name)
        settings = self._settings[key]
        row = self._rows.get(key)
        if row is None:
            return warming_decision(settings, self._wall())
        if self._expired(row, settings):
            return (
                _decision(row.successor, self._wall())
                if row.successor is not None
                else warming_decision(settings, self._wall())
            )
        return row.decision

    def is_active(self, namespace: str, name: str) -> bool:
        """Whether the object is active: a held answer only until it expires."""
        key = (namespace, name)
        settings = self._settings[key]
        row = self._rows.get(key)
        if row is None:
            return False
        if self._expired(row, settings):
            return row.successor is not None and row.successor.active
        return row.answer.active

    def source_problem(self, namespace: str, name: str) -> str | None:
        """Why the object has no answer, in words (``None`` if not known)."""
        key = (namespace, name)
        settings = self._settings[key]
        row = self._rows.get(key)
        if row is not None and self._expired(row, settings):
            return row.successor.problem if row.successor is not None else DECIDER_DOWN
        if row is not None:
            return row.answer.problem
        return DECIDER_DOWN if self._decider_lost_at is not None else None

    def subscribe_active(self, namespace: str, name: str) -> asyncio.Queue[bool]:
        """A queue that receives ``True`` each time a burst starts."""
        key = (namespace, name)
        self._settings[key]
        queue: asyncio.Queue[bool] = asyncio.Queue(maxsize=SUBSCRIBER_QUEUE)
        self._subscribers.setdefault(key, set()).add(queue)
        return queue

    def unsubscribe_active(self, namespace: str, name: str, queue: asyncio.Queue[bool]) -> None:
        queues = self._subscribers.get((namespace, name))
        if queues is not None:
            queues.discard(queue)
            if not queues:
                del self._subscribers[(namespace, name)]

    def _expired(self, row: _Row, settings: ScalerSettings) -> bool:
        """A held answer whose data is ``fallbackAfterSeconds`` old (the
        policy falls back at that age too)."""
        if row.held_from is None:
            return False
        return past_fallback(self._clock() - row.held_from, settings)

    # --------------------------------------------------------- the decider side
    def take_new(self) -> list[tuple[ObjectKey, ScalerSettings]]:
        """Objects registered (or re-registered) since the last call."""
        new, self._new = self._new, {}
        return list(new.items())

    def take_polled(self) -> list[ObjectKey]:
        """Known objects polled since the last call."""
        polled, self._polled = self._polled, set()
        return [key for key in polled if key in self._settings]

    def everything(self) -> list[tuple[ObjectKey, ScalerSettings]]:
        """Every known object: what a fresh decider must be told."""
        self._new.clear()
        self._polled.clear()
        return list(self._settings.items())

    def apply(self, update: TableUpdate) -> None:
        """Take in a decider's update (its first one after a start is a reset)."""
        now_wall = self._wall()
        now = self.last_update_at = self._clock()
        if update.reset:
            self._decider_lost_at = None
        for key, answer in update.answers:
            if key not in self._settings:
                continue  # forgotten here meanwhile; the decider hears of it again
            row = self._rows.get(key)
            if (
                row is not None
                and row.held_from is not None
                and answer.reason in NO_ANSWER_REASONS
                and row.answer.reason not in NO_ANSWER_REASONS
            ):
                row.successor = answer  # keep serving the held answer
                continue
            stale_since = (
                None
                if answer.stale_since_s is None
                else now - max(0.0, now_wall - answer.stale_since_s)
            )
            self._rows[key] = _Row(answer, _decision(answer, now_wall), stale_since)
        for key in update.removed:
            if key in self._new:
                continue  # registered again since: the decider is about to hear of it
            self._rows.pop(key, None)
            self._settings.pop(key, None)
            self._polled.discard(key)
        for key in update.bursts:
            for queue in list(self._subscribers.get(key, ())):
                if not queue.full():
                    queue.put_nowait(True)
        if update.status:
            self.status = dict(update.status)

    def decider_connected(self) -> None:
        """A decider starts: its silence is timed from now (:meth:`silent_s`)."""
        self.last_update_at = self._clock()

    def silent_s(self) -> float:
        """Seconds since the decider last sent an update (or connected)."""
        return 0.0 if self.last_update_at is None else self._clock() - self.last_update_at

    def decider_lost(self) -> None:
        """The decider is gone: every answer it made is held from now, each
        timed from when its data was last fresh (a fresh one: when the
        decider last spoke; a ``fallback`` answer, made for having no data,
        from now)."""
        now = self._clock()
        self._decider_lost_at = now
        last_spoke = self.last_update_at if self.last_update_at is not None else now
        for row in self._rows.values():
            if row.held_from is None:
                if row.answer.reason == Reason.FALLBACK:
                    row.held_from = now
                elif row.stale_since is not None:
                    row.held_from = row.stale_since
                else:
                    row.held_from = last_spoke
                row.successor = None

    def __len__(self) -> int:
        return len(self._settings)
