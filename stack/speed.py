"""``prescaler emulate`` and ``prescaler serve`` in a world running ``K`` times faster.

Neither command has a speed flag, so ``python -m stack.speed --speed K
emulate|serve ARGS...`` parses their very flags and runs the shipped command
with the speed as the parameter each takes from its caller: the emulator's
:class:`engine.emulator.driver.ModelClock` runs K x the wall clock, and the
trackers' capacity is K x the profile's (rescaling the replicas' counters
instead would miss the queue gauges' growth per second). With ``--speed 1``
both are the plain commands.
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
