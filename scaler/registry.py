"""The ScaledObjects the live loop tracks, keyed by (namespace, name).

One owner for the objects' lifetime: registering (and re-registering with new
settings), forgetting, the IsActive subscribers, and which objects still wait
for their backfill. The rest of the live loop reads entries from here and
asks :meth:`ObjectRegistry.is_current` before writing a result back, since an
object may be re-registered while its refresh is computed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from decision.policy import Decision, DemandForecast, Observation
from decision.prediction import ForecasterFactory, Prediction
from decision.reading import Reading
from decision.settings import ScalerSettings
from decision.tracker import Tracker, warming_decision
from decision.tracker import observation_from as _tracker_observation
from decision.tracker_data import TrackerConfig
from scaler.sources import Selection, SourceSpec, selection_for

__all__ = ["SUBSCRIBER_QUEUE", "Entry", "ObjectKey", "ObjectRegistry", "observation_from"]

log = logging.getLogger(__name__)

ObjectKey = tuple[str, str]

SUBSCRIBER_QUEUE = 16
"""Bursts a StreamIsActive subscriber may have unread before new ones are dropped."""


def observation_from(reading: Reading, now_s: float) -> Observation:
    """The policy's view of one reading (unknowns become NaN)."""
    return _tracker_observation(reading, now_s)


@dataclass
class Entry:
    """One ScaledObject: its tracker (the pure path to a decision) and the
    live loop's bookkeeping around it (source, subscribers, balloons)."""

    key: ObjectKey
    spec: SourceSpec
    selection: Selection
    tracker: Tracker
    ready: bool = False
    subscribers: set[asyncio.Queue[bool]] = field(default_factory=set)
    generation: int = 0
    balloons: int = 0
    balloons_applied: bool = False
    last_seen_s: float = field(default_factory=time.monotonic)

    @property
    def settings(self) -> ScalerSettings:
        return self.tracker.settings

    @property
    def decision(self) -> Decision:
        return self.tracker.decision

    @property
    def active(self) -> bool:
        return self.tracker.active

    @property
    def forecast(self) -> DemandForecast | None:
        return self.tracker.forecast

    @property
    def prediction(self) -> Prediction | None:
        return self.tracker.prediction

    @property
    def decisions(self) -> tuple[Decision, ...]:
        return self.tracker.decisions


class ObjectRegistry:
    """Every tracked ScaledObject, its subscribers, and the backfill queue.

    ``config`` and ``forecasters`` build each object's tracker; ``clock``
    stamps the warming-up answer of a new object; ``on_forget(namespace,
    name)`` runs when an object is dropped (the scaler drops its metrics).
    ``monotonic`` measures how long an object went unpolled.
    """

    def __init__(
        self,
        config: TrackerConfig,
        *,
        forecasters: ForecasterFactory | None = None,
        clock: Callable[[], float] = time.time,
        on_forget: Callable[[str, str], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._forecasters = forecasters
        self._clock = clock
        self._on_forget = on_forget
        self._monotonic = monotonic
        self._entries: dict[ObjectKey, Entry] = {}
        self._pending: set[ObjectKey] = set()

    # ------------------------------------------------------------- lifetime
    def register(self, namespace: str, name: str, settings: ScalerSettings) -> bool:
        """Track a ScaledObject; True when it (re)starts and waits for a backfill.

        The same settings only mark it as polled; new settings that read the
        same series update its tracker in place; settings that read other
        series start a new tracker (keeping its answer and subscribers until
        the backfill replaces them).
        """
        key = (namespace, name)
        entry = self._entries.get(key)
        if entry is not None and (entry.settings is settings or entry.settings == settings):
            entry.last_seen_s = self._monotonic()
            return False
        spec, selection = selection_for(settings, namespace)
        if entry is not None and entry.spec == spec and entry.selection == selection:
            entry.tracker.update_settings(settings)
            return False
        tracker = Tracker(
            key,
            settings,
            self.config,
            self._forecasters,
            initial=warming_decision(settings, self._clock()) if entry is None else entry.decision,
            active=entry.active if entry is not None else None,
        )
        self._entries[key] = Entry(
            key=key,
            spec=spec,
            selection=selection,
            tracker=tracker,
            subscribers=entry.subscribers if entry is not None else set(),
            generation=(entry.generation + 1) if entry is not None else 0,
            last_seen_s=self._monotonic(),
        )
        self._pending.add(key)
        return True

    def forget(self, namespace: str, name: str) -> None:
        """Stop tracking a ScaledObject (deleted); ``on_forget`` runs either way."""
        key = (namespace, name)
        self._entries.pop(key, None)
        self._pending.discard(key)
        if self._on_forget is not None:
            self._on_forget(namespace, name)

    def expire(self, idle_s: float) -> list[ObjectKey]:
        """Forget the objects not polled for ``idle_s`` (KEDA stopped asking)."""
        cutoff = self._monotonic() - idle_s
        gone = [k for k, e in self._entries.items() if e.last_seen_s < cutoff]
        for key in gone:
            log.info("forgetting %s/%s: not polled for %.0f s", *key, idle_s)
            self.forget(*key)
        return gone

    # --------------------------------------------------------------- lookup
    def __getitem__(self, key: ObjectKey) -> Entry:
        """The entry of ``key``; ``KeyError`` if it is not tracked."""
        return self._entries[key]

    def get(self, key: ObjectKey) -> Entry | None:
        return self._entries.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries.values()))

    def keys(self) -> list[ObjectKey]:
        return list(self._entries)

    def ready(self) -> list[Entry]:
        """The backfilled objects: the ones a refresh re-decides."""
        return [e for e in self._entries.values() if e.ready]

    def is_current(self, entry: Entry, generation: int) -> bool:
        """Whether ``entry`` is still the tracked one, as it was at ``generation``
        (a re-registered object's new entry backfills itself)."""
        return entry.generation == generation and self._entries.get(entry.key) is entry

    # ------------------------------------------------------------- backfill
    @property
    def has_pending(self) -> bool:
        """Whether some tracked object still waits for its backfill."""
        return any(k in self._entries for k in self._pending)

    def take_pending(self, limit: int) -> list[Entry]:
        """Up to ``limit`` objects waiting for their backfill, no longer waiting."""
        self._pending.intersection_update(self._entries)
        keys = list(self._pending)[:limit]
        self._pending.difference_update(keys)
        return [self._entries[k] for k in keys]

    # ---------------------------------------------------------- subscribers
    def subscribe(self, namespace: str, name: str) -> asyncio.Queue[bool]:
        """A queue that receives ``True`` each time a burst starts (``KeyError``
        if the object is not tracked)."""
        queue: asyncio.Queue[bool] = asyncio.Queue(maxsize=SUBSCRIBER_QUEUE)
        self._entries[(namespace, name)].subscribers.add(queue)
        return queue

    def unsubscribe(self, namespace: str, name: str, queue: asyncio.Queue[bool]) -> None:
        entry = self._entries.get((namespace, name))
        if entry is not None:
            entry.subscribers.discard(queue)

    def notify(self, keys: Sequence[ObjectKey]) -> None:
        """Tell the subscribers of ``keys`` that a burst started (a full queue
        drops it: its reader is behind and will see the object active anyway)."""
        for key in keys:
            entry = self._entries.get(key)
            if entry is None:
                continue
            for queue in list(entry.subscribers):
                if not queue.full():
                    queue.put_nowait(True)
