"""The library's errors in the words of the command line.

The simulator's library names its inputs as its parameters are named
(``duration_s``, ``start_s``, ``rate_window_s``), and its errors say those
names; a person at the command line typed ``--duration`` and ``--start``.
Each command maps the names it has flags for when it prints an error, so
the library keeps one wording for its callers and the CLI says the flag.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["REPLAY_FLAGS", "WINDOW_FLAGS", "in_flags", "message_of"]

WINDOW_FLAGS: Mapping[str, str] = {
    "start_s": "--start",
    "duration_s": "--duration",
    "rate_scale": "--rate-scale",
    "slo_ttft_s": "--slo-ttft",
    "timeout_s": "--timeout",
    "max_replicas": "--max-replicas",
    "initial_replicas": "--initial-replicas",
}
"""The names of what every command that replays a trace window sets
(``simulate``, ``tune``, ``stack``), and the flags that set them."""

REPLAY_FLAGS: Mapping[str, str] = {
    **WINDOW_FLAGS,
    "tokens_from": "--tokens-from",
    "arrivals": "--arrivals",
    "scrape_interval_s": "--scrape-interval",
    "rate_window_s": "--rate-window",
    "refit_interval_s": "--refit-seconds",
    "capacity_error": "--capacity-error",
}
"""Besides the window's: what the simulator's commands (``simulate``,
``tune``) set about the replay."""


def in_flags(message: str, flags: Mapping[str, str] = REPLAY_FLAGS) -> str:
    """``message`` with each whole-word parameter name in ``flags`` replaced by
    its flag (``shorten duration_s`` -> ``shorten --duration``)."""
    if not flags:
        return message
    pattern = re.compile(r"(?<![\w./-])(" + "|".join(map(re.escape, flags)) + r")(?![\w/-])")
    return pattern.sub(lambda m: flags[m[1]], message)


def message_of(exc: BaseException) -> str:
    """``exc``'s message; a ``KeyError``'s without the quotes its ``str`` adds."""
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
