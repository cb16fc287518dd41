"""One line of ``prescaler doctor``'s report, and what the lines add up to."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["Finding", "Level", "exit_code", "summary"]

Level = Literal["OK", "WARN", "FAIL"]


@dataclass(frozen=True)
class Finding:
    """One check's verdict on one trigger: the level, the cause and the fix."""

    level: Level
    check: str
    subject: str
    cause: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.level:<4} {self.check} [{self.subject}]: {self.cause}"
        return text + (f" -- fix: {self.fix}" if self.fix else "")


def exit_code(findings: Iterable[Finding]) -> int:
    """1 when any check failed, else 0 (warnings pass)."""
    return 1 if any(f.level == "FAIL" for f in findings) else 0


def summary(findings: Sequence[Finding]) -> str:
    counts = {lvl: sum(f.level == lvl for f in findings) for lvl in ("FAIL", "WARN", "OK")}
    return "doctor: " + ", ".join(f"{n} {lvl}" for lvl, n in counts.items())
