"""``prescaler emulate`` and ``prescaler serve`` in a world running ``K`` times faster.

Neither command has a speed flag, so ``python -m stack.speed --speed K
emulate|serve ARGS...`` runs the very same code (nothing in ``engine`` or
``scaler`` is edited) with substitutions made in this process only:

- ``emulate``: the replica driver's model clock is ``K`` x the wall clock,
  so a replica serves a trace-second's work in ``1/K`` wall seconds, and it
  wakes at the engine's own events (a prefill's end, a completion:
  ``next_event_time``, what the simulator steps on) or every
  ``STREAM_QUANTUM_S`` wall seconds to stream the tokens due, rather than at
  every decode step: first tokens and completions stay exact, the CPU cost
  per token drops. Its metrics are left as they are: in wall seconds every
  rate is ``K`` x the trace's (latency histograms are in model seconds).
- ``serve``: a replica's capacity from its profile is ``K`` x the profile's,
  as it is in wall seconds, so demand over capacity, and so every decision,
  is the trace world's. (Scaling the replicas' counters down by ``K``
  instead would not do: the scaler also reads arrivals from the growth of
  the queue gauges per second, which no exposition can rescale.) The
  scaler's intervals and its trigger's time-valued keys are divided by ``K``
  by the caller (:mod:`stack.run`).

With ``--speed 1`` both are the plain commands (emulate with event wake-ups).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["STREAM_QUANTUM_S", "install", "install_scaler", "main"]

STREAM_QUANTUM_S = 0.25
"""Wall seconds between token deliveries to a stream between engine events."""


def install_scaler(speed: float) -> None:
    """Patch ``decision.tracker`` in this process: profile capacity x ``speed``."""
    import decision.tracker as tracker
    from decision.capacity import capacity_for
    from decision.policy import ReplicaCapacity

    def scaled_capacity(settings: Any) -> ReplicaCapacity:
        cap = capacity_for(settings)
        if settings.profile is None:
            return cap
        return ReplicaCapacity(
            requests_per_s=None if cap.requests_per_s is None else cap.requests_per_s * speed,
            tokens_per_s=None if cap.tokens_per_s is None else cap.tokens_per_s * speed,
        )

    tracker.capacity_for = scaled_capacity  # type: ignore[assignment]


def install(speed: float) -> None:
    """Patch ``engine.emulator.server`` in this process for a ``speed`` x clock."""
    import engine.emulator.server as server
    from engine.emulator.driver import ReplicaDriver

    class ScaledDriver(ReplicaDriver):
        """Model time = ``speed`` x wall time since start; event-driven wake-ups."""

        def __init__(self, replica: Any) -> None:
            super().__init__(replica)
            self._t0 = self._loop.time() - replica.now / speed

        def model_now(self) -> float:
            return max((self._loop.time() - self._t0) * speed, self.replica.now)

        async def _run(self) -> None:
            loop = self._loop
            try:
                while True:
                    self.sync()
                    if self.failure is not None:
                        return
                    nxt = self.replica.next_event_time()
                    self._wake.clear()
                    if nxt is None:
                        await self._wake.wait()
                        continue
                    when = min(self._t0 + nxt / speed, loop.time() + STREAM_QUANTUM_S)
                    if when > loop.time():
                        handle = loop.call_at(when, self._wake.set)
                        try:
                            await self._wake.wait()
                        finally:
                            handle.cancel()
            except Exception as exc:  # the engine is dead: /health says so
                self._fail(exc)

    server.ReplicaDriver = ScaledDriver  # type: ignore[misc]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m stack.speed --speed K emulate|serve ...``."""
    parser = argparse.ArgumentParser(prog="python -m stack.speed")
    parser.add_argument("--speed", type=float, required=True)
    args, rest = parser.parse_known_args(argv)
    if not (args.speed > 0 and args.speed < 1e6):
        print("--speed must be > 0", file=sys.stderr)
        return 2
    if not rest or rest[0] not in ("emulate", "serve"):
        print("usage: python -m stack.speed --speed K emulate|serve [ARGS...]", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(prog="prescaler")
    sub = parser.add_subparsers(dest="command", required=True)
    if rest[0] == "emulate":
        install(args.speed)
        from engine.emulator.cli import register
    else:
        install_scaler(args.speed)
        from scaler.cli import register
    register(sub)
    parsed = parser.parse_args(rest)
    return int(parsed.func(parsed) or 0)


if __name__ == "__main__":
    sys.exit(main())
