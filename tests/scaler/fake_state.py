"""An in-memory stand-in for ``scaler.state.ScalerState`` (service unit tests only)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from decision.policy import Decision
from decision.settings import ScalerSettings


class FakeState:
    """Records registrations; answers what the test set."""

    def __init__(
        self,
        *,
        telemetry: Any = None,
        refresh_interval_s: float = 5.0,
        refit_interval_s: float = 300.0,
        **_: Any,
    ) -> None:
        self.telemetry = telemetry
        self.refresh_interval_s = refresh_interval_s
        self.refit_interval_s = refit_interval_s
        self.registered: dict[tuple[str, str], ScalerSettings] = {}
        self.register_calls = 0
        self.decisions: dict[tuple[str, str], Decision] = {}
        self.active: dict[tuple[str, str], bool] = {}
        self.problems: dict[tuple[str, str], str] = {}
        self.subscribers: dict[tuple[str, str], list[asyncio.Queue[bool]]] = defaultdict(list)
        self.started = False
        self.stopped = False

    def register(self, namespace: str, name: str, settings: ScalerSettings) -> None:
        self.register_calls += 1
        self.registered[(namespace, name)] = settings

    def decision(self, namespace: str, name: str) -> Decision:
        found = self.decisions.get((namespace, name))
        if found is not None:
            return found
        settings = self.registered[(namespace, name)]
        return Decision(0.0, settings.min_replicas, "idle", {}, data_stale=False)

    def is_active(self, namespace: str, name: str) -> bool:
        return self.active.get((namespace, name), False)

    def source_problem(self, namespace: str, name: str) -> str | None:
        return self.problems.get((namespace, name))

    def subscribe_active(self, namespace: str, name: str) -> asyncio.Queue[bool]:
        queue: asyncio.Queue[bool] = asyncio.Queue()
        self.subscribers[(namespace, name)].append(queue)
        return queue

    def unsubscribe_active(self, namespace: str, name: str, queue: asyncio.Queue[bool]) -> None:
        self.subscribers[(namespace, name)].remove(queue)

    def burst(self, namespace: str, name: str) -> None:
        self.active[(namespace, name)] = True
        for queue in self.subscribers[(namespace, name)]:
            queue.put_nowait(True)

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True
