"""What the serving process and the decider process say to each other.

One socket pair carries length-prefixed pickles of the messages below (both
ends are this package, started together, so pickle is safe and no schema is
needed). Serving process to decider: :class:`DeciderConfig` once, then
:class:`Registrations` (new ScaledObjects, at once), :class:`Polls` (known
ones KEDA asked about, every few seconds, so idle objects still expire) and
:class:`MetricsRequest`. Decider to serving process: :class:`TableUpdate` (a
reset snapshot, then changes) and :class:`MetricsText` (its part of
``/metrics``).
"""

from __future__ import annotations

import asyncio
import pickle
import struct
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from decision.answer import Reason
from decision.settings import ScalerSettings

__all__ = [
    "Answer",
    "DeciderConfig",
    "MetricsRequest",
    "MetricsText",
    "ObjectKey",
    "Polls",
    "Registrations",
    "TableUpdate",
    "read_message",
    "write_message",
]

ObjectKey = tuple[str, str]
_HEADER = struct.Struct(">I")


class Answer(NamedTuple):
    """Everything the gRPC handlers read about one ScaledObject.

    ``replicas`` and ``reason`` of its latest decision, whether it is
    active, and, while it has no answer yet (``warming_up``/``no_data``),
    what failed at its source (``None`` otherwise): the rest of a decision
    (its proposals, its time) never reaches KEDA, so it is not sent, and an
    unchanged answer is not sent again. ``stale_since_s`` is the wall time
    the object's data was last fresh while it is stale (``None`` while it is
    fresh, so a fresh answer does not change every refresh): an answer held
    across a decider restart expires ``fallbackAfterSeconds`` after it.
    """

    replicas: int
    reason: Reason
    active: bool
    problem: str | None
    stale_since_s: float | None = None


@dataclass(frozen=True)
class DeciderConfig:
    """The live loop's parameters (``prescaler serve``'s flags)."""

    refresh_interval_s: float = 5.0
    refit_interval_s: float = 600.0
    forecast_step_s: float | None = None
    fit_window_s: float | None = None
    """History a fit sees (None: ``ScalerState``'s default, 3 days)."""
    rate_window_s: float = 120.0
    expire_after_s: float = 3600.0
    speed: float = 1.0
    """Model seconds per wall second (``ScalerState``'s ``speed``; the stack's)."""

    def state_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``scaler.state.ScalerState`` (bar the sources)."""
        kwargs: dict[str, Any] = {
            "refresh_interval_s": self.refresh_interval_s,
            "refit_interval_s": self.refit_interval_s,
            "expire_after_s": self.expire_after_s,
            "speed": self.speed,
        }
        if self.forecast_step_s is not None:
            kwargs["forecast_step_s"] = self.forecast_step_s
        if self.fit_window_s is not None:
            kwargs["fit_window_s"] = self.fit_window_s
        return kwargs


@dataclass(frozen=True)
class Registrations:
    """ScaledObjects to track: new ones, or known ones with new settings
    (registering known settings again only counts as a poll)."""

    objects: list[tuple[ObjectKey, ScalerSettings]]


@dataclass(frozen=True)
class Polls:
    """Known ScaledObjects KEDA asked about since the last message (keys
    only: the decider has their settings)."""

    keys: list[ObjectKey]


@dataclass(frozen=True)
class MetricsRequest:
    """Ask for the decider's part of ``/metrics``."""

    serial: int


@dataclass(frozen=True)
class MetricsText:
    """The decider's series in Prometheus text exposition."""

    serial: int
    text: bytes


@dataclass(frozen=True)
class TableUpdate:
    """Answers that changed since the last update (all of them if ``reset``),
    the objects the decider forgot, the objects whose burst started (for
    ``StreamIsActive``), and the live loop's health (``ScalerState.status``)."""

    reset: bool
    answers: list[tuple[ObjectKey, Answer]] = field(default_factory=list)
    removed: list[ObjectKey] = field(default_factory=list)
    bursts: list[ObjectKey] = field(default_factory=list)
    status: dict[str, float] = field(default_factory=dict)


def write_message(writer: asyncio.StreamWriter, message: object) -> None:
    """Queue one message (one ``write``, so messages never interleave)."""
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    writer.write(_HEADER.pack(len(payload)) + payload)


async def read_message(reader: asyncio.StreamReader) -> Any:
    """The next message; ``asyncio.IncompleteReadError`` at the end of the stream."""
    (size,) = _HEADER.unpack(await reader.readexactly(_HEADER.size))
    return pickle.loads(await reader.readexactly(size))
