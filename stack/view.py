"""The live terminal view of a stack run: a plain redraw twice a second on a TTY.

Demand (arrivals per trace second over the last scrape interval), the queue
(vLLM waiting as Prometheus sees it, plus requests held at the gateway),
desired / spec / Ready replicas, the scaler's forecast band (median .. upper
quantile, requests/s) and TTFT p99 over the last minute of trace time. Off
when stdout is not a terminal (or ``enabled=False``): nothing is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

import numpy as np

if TYPE_CHECKING:
    from stack.controller import ControlPlane
    from stack.loadgen import Clock, LoadGenerator

__all__ = ["LiveView", "render"]

REFRESH_WALL_S = 0.5
TTFT_WINDOW_S = 60.0


def _f(value: float, digits: int = 1) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"


def render(
    lg: LoadGenerator | None,
    control: ControlPlane | None,
    clock: Clock | None,
    *,
    policy: str,
    speed: float,
    duration_s: float,
) -> list[str]:
    """The view's lines for the run's state now."""
    if lg is None or control is None or clock is None:
        return ["starting..."]
    now = clock.now()
    cluster = control.cluster
    tl = control.counters.timeline
    demand = math.nan
    if len(tl.get("t", [])) >= 2:
        dt = tl["t"][-1] - tl["t"][-2]
        demand = (tl["arrived"][-1] - tl["arrived"][-2]) / dt if dt > 0 else math.nan
    recent = [v for t, v in lg.recent_ttft if t >= now - TTFT_WINDOW_S]
    p99 = float(np.percentile(recent, 99)) if recent else math.nan
    done = lg.done
    desired = control.desired if policy == "predictive" else float(cluster.spec_replicas)
    lines = [
        f"prescaler stack  {policy}  x{speed:g}  "
        f"t={now:7.1f} s / {duration_s:.0f} s  (Ctrl-C stops and summarizes)",
        f"  demand      {_f(demand, 2):>8} req/s   arrived {lg.arrived:6d}  ended {done:6d}"
        f"  in flight {lg.inflight:4d}",
        f"  queue       {_f(control.waiting, 0):>8} waiting in vLLM   "
        f"{lg.at_gateway:4d} at the gateway",
        f"  replicas    desired {_f(desired, 1):>5}   spec {cluster.spec_replicas:3d}   "
        f"Ready {len(control.routable()):3d}   nodes {cluster.nodes.total:3d}",
    ]
    if policy == "predictive":
        lines.append(
            f"  forecast    {_f(control.forecast_median, 2)} .. "
            f"{_f(control.forecast_upper, 2)} req/s"
            f"   (scaler demand {_f(control.demand_rps, 2)})   active {control.active}"
        )
    else:
        lines.append(
            f"  trigger     sum(vllm:num_requests_waiting) = {_f(control.trigger_value, 1)}"
        )
    lines.append(
        f"  TTFT p99    {_f(p99, 3):>8} s (last {TTFT_WINDOW_S:.0f} s)   "
        f"timed out {int(np.count_nonzero(lg.status == 2))}   retried {lg.retried}"
    )
    return lines


class LiveView:
    """Redraws ``lines()`` (the run's :func:`render`) in place on a TTY."""

    def __init__(
        self,
        lines: Callable[[], list[str]],
        *,
        enabled: bool | None = None,
        out: TextIO | None = None,
    ):
        self.lines = lines
        self.out = sys.stdout if out is None else out
        self.enabled = bool(self.out.isatty()) if enabled is None else enabled
        self._drawn = 0

    def draw(self) -> None:
        lines = self.lines()
        up = f"\x1b[{self._drawn}F" if self._drawn else ""
        self.out.write(up + "".join(f"\x1b[2K{line}\n" for line in lines))
        self.out.flush()
        self._drawn = len(lines)

    async def run(self, stop: asyncio.Event) -> None:
        if not self.enabled:
            return
        while not stop.is_set():
            with contextlib.suppress(Exception):
                self.draw()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=REFRESH_WALL_S)

    def close(self) -> None:
        if self.enabled:
            with contextlib.suppress(Exception):
                self.draw()
