"""Keeps the refresh's compute thread from starving the threads that answer KEDA.

That thread shares the GIL and the node's CPUs with the RPC handlers; a
refresh has seconds of slack, an RPC milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable

__all__ = ["COMPUTE_NICE", "CpuPacer", "lower_priority"]

COMPUTE_NICE = 5
"""Niceness added to the compute thread (Linux: per thread). The threads
that answer KEDA (the compiled front's, the event loop) run first when the
node is busy; a refresh has seconds of slack."""


def lower_priority() -> None:
    """Lower the calling thread's CPU priority by :data:`COMPUTE_NICE`: the
    compute thread yields to the gRPC handlers, which must answer KEDA in
    microseconds whatever the refits cost (a no-op where the OS has no
    per-thread priority)."""
    with contextlib.suppress(AttributeError, OSError):
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + COMPUTE_NICE)


class CpuPacer:
    """Caps the share of the interpreter a background thread takes.

    Why: the compute thread and the gRPC handlers share one GIL, which
    Python hands over every switch interval, so a busy compute thread takes
    about half of the interpreter while it runs and RPCs queue behind it
    (with 1,000 objects a refresh was ~0.16 s of Python and KEDA's latency
    spiked by 50-130 ms at every refresh). Refresh work has seconds of slack (until
    the next refresh); an RPC has milliseconds. So after every ``slice_s`` of
    its own CPU time the thread sleeps long enough to use at most ``share``
    of the interpreter. Waiting on the forecast worker is not CPU time and is
    not paced. ``share`` 1 disables it.
    """

    def __init__(
        self,
        share: float,
        slice_s: float = 0.002,
        *,
        cpu: Callable[[], float] = time.thread_time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], got {share}")
        self.share = share
        self.slice_s = slice_s
        self._cpu = cpu
        self._sleep = sleep
        self._mark = cpu()

    def tick(self) -> None:
        if self.share >= 1:
            return
        used = self._cpu() - self._mark
        if used >= self.slice_s:
            pause = used * (1 - self.share) / self.share
            self._sleep(pause)
            self._mark = self._cpu()
