"""The heap entry that :meth:`simulations.events.EventQueue.schedule` returns.

Kept out of ``simulations.events`` because mypyc compiles that module and a
compiled class cannot subclass ``list``; this one stays interpreted.
"""

from __future__ import annotations

from typing import Any


class EventHandle(list[Any]):
    """What :meth:`EventQueue.schedule` returns: lets the owner cancel it.

    It is the heap entry itself, ``[time_s, priority, seq, action]``: lists
    compare element by element in C, where an ordered dataclass compared
    through Python-level tuples, and one object per event is one allocation
    less (the simulator schedules a few per request). ``seq`` is unique, so
    the action is never compared; cancelling drops it (``None``).
    """

    __slots__ = ()

    @property
    def time_s(self) -> float:
        return self[0]  # type: ignore[no-any-return]

    @property
    def cancelled(self) -> bool:
        return self[3] is None

    def cancel(self) -> None:
        self[3] = None
