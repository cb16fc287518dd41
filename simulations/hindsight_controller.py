"""The ``hindsight`` policy's live half: it replays a calibrated schedule.

The schedule itself is computed and calibrated elsewhere
(:mod:`simulations.hindsight`, :mod:`simulations.hindsight_run`); this
controller only writes it into the simulated Deployment, step by step, so
:mod:`simulations.policies` builds it like any other controller.
"""

from __future__ import annotations

from simulations.events import PRIORITY_CONTROL
from simulations.simulation import Simulation

__all__ = ["HindsightController"]


class HindsightController:
    """Writes a precomputed schedule into the Deployment, step by step.

    The schedule (``PolicySpec.schedule``) already orders each replica one
    start-up ahead; the controller only replays it, so what the simulator
    measures is the schedule's own attainment and bill. It opens with the
    schedule's first step (perfect foresight holds what the window needs,
    not the opening fleet the causal policies are handed)."""

    def __init__(self, name: str, schedule: tuple[int, ...], step_s: float) -> None:
        self.name = name
        self.schedule = schedule
        self.step_s = step_s
        self._desired = 0
        self._sim: Simulation | None = None

    def _at(self, t: float) -> int:
        if not self.schedule:
            return 0
        return self.schedule[min(len(self.schedule) - 1, max(0, int(t // self.step_s)))]

    def initial_replicas(self, sim: Simulation) -> int:
        return self._at(0.0)

    def start(self, sim: Simulation) -> None:
        self._sim = sim
        self._tick(sim.queue.now)

    def _tick(self, t: float) -> None:
        sim = self._sim
        assert sim is not None
        self._desired = self._at(t)
        if sim.cluster.spec_replicas != self._desired:
            sim.scale_deployment(t, self._desired)
        if t < sim.workload.duration_s:
            sim.queue.schedule(t + self.step_s, PRIORITY_CONTROL, self._tick)

    def timeline_extra(self) -> dict[str, float]:
        return {"desired": float(self._desired)}
