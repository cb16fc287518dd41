"""``prescaler emulate`` and ``prescaler serve`` in a world running ``K`` times faster.

Neither command has a speed flag, so ``python -m stack.speed --speed K
emulate|serve ARGS...`` parses the very same flags and runs the very same
command with the speed given as a parameter each takes from its caller:

- ``emulate``: the replica driver's :class:`engine.emulator.driver.ModelClock`
  is ``K`` x the wall clock, so a replica serves a trace-second's work in
  ``1/K`` wall seconds, and it wakes at the engine's own events or every
  ``STREAM_QUANTUM_S`` wall seconds to stream the tokens due, rather than at
  every decode step. Its metrics are left as they are: in wall seconds every
  rate is ``K`` x the trace's (latency histograms are in model seconds).
- ``serve``: the trackers' :class:`decision.tracker_data.TrackerConfig` has
  ``speed`` K, so a replica's capacity from its profile is ``K`` x the
  profile's, as it is in wall seconds, and demand over capacity, and so
  every decision, is the trace world's. (Scaling the replicas' counters down
  by ``K`` instead would not do: the scaler also reads arrivals from the
  growth of the queue gauges per second, which no exposition can rescale.)
  The scaler's intervals and its trigger's time-valued keys are divided by
  ``K`` by the caller (:mod:`stack.run`). The speed is ``serve``'s own
  ``speed`` parameter, which reaches its decider process, so the stack runs
  the serving path that ships.

With ``--speed 1`` both are the plain commands (emulate with event wake-ups).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from engine.emulator.driver import ModelClock

__all__ = ["STREAM_QUANTUM_S", "emulator_clock", "main"]

STREAM_QUANTUM_S = 0.25
"""Wall seconds between token deliveries to a stream between engine events."""


def emulator_clock(speed: float) -> ModelClock:
    """A replica's model clock at ``speed``: event wake-ups, tokens streamed per quantum."""
    return ModelClock(speed=speed, stream_quantum_s=STREAM_QUANTUM_S)


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
        from engine.emulator.cli import emulate_command
        from engine.emulator.cli import register as register_emulate

        register_emulate(sub)
        parsed = parser.parse_args(rest)
        return emulate_command(parsed, clock=emulator_clock(args.speed))
    from scaler.cli import register as register_serve
    from scaler.cli import serve_command

    register_serve(sub)
    parsed = parser.parse_args(rest)
    return serve_command(parsed, speed=args.speed)


if __name__ == "__main__":
    sys.exit(main())
