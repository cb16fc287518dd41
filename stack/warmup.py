"""The scaler's warm-up before a stack run's trace clock starts: how long, and why it failed.

Prometheus first scrapes one rate window, then every scaler replica must
answer a poll. The first wait grows as the speed falls, so the poll's
deadline counts from its end (one deadline over both failed every speed
below 1.25). Pure: the clock is given; the caller waits and polls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["ANSWER_WALL_S", "WarmupDeadline"]

ANSWER_WALL_S = 120.0
"""Wall seconds the scaler gets to answer once the settling wait is over."""


@dataclass
class WarmupDeadline:
    """The two budgets of a warm-up on ``clock`` (wall seconds), and what the polls saw.

    ``settle_s``: the wait for one rate window of scrapes; ``answer_s``: how long
    after it the scaler may take to answer ``answers_needed`` polls in a row.
    """

    settle_s: float
    answer_s: float
    answers_needed: int
    clock: Callable[[], float]
    started: float = field(init=False)
    polls: int = field(default=0, init=False)
    answers_in_a_row: int = field(default=0, init=False)
    last_error: str | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.settle_s < 0 or self.answer_s <= 0 or self.answers_needed < 1:
            raise ValueError(
                f"warm-up budgets must be settle >= 0 s, answer > 0 s, answers >= 1; got "
                f"settle {self.settle_s:g} s, answer {self.answer_s:g} s, "
                f"answers {self.answers_needed}"
            )
        self.started = self.clock()

    @property
    def deadline(self) -> float:
        """The clock reading after which the warm-up has failed."""
        return self.started + self.settle_s + self.answer_s

    def settle_left(self) -> float:
        """Seconds of the settling wait still to go (0 once it is over)."""
        return max(0.0, self.started + self.settle_s - self.clock())

    def expired(self) -> bool:
        return self.clock() >= self.deadline

    def answered(self) -> bool:
        """Record an answer; True once enough came in a row (the warm-up is done)."""
        self.polls += 1
        self.answers_in_a_row += 1
        return self.answers_in_a_row >= self.answers_needed

    def failed(self, error: str) -> None:
        """Record a failed poll (the run of answers starts again)."""
        self.polls += 1
        self.answers_in_a_row = 0
        self.last_error = error

    def failure(self) -> str:
        """Why the warm-up gave up, in words: the budgets and what the polls saw."""
        waited = (
            f"after waiting {self.settle_s:g} s for one rate window of scrapes and "
            f"{self.answer_s:g} s for answers"
        )
        if self.polls == 0:
            return f"the scaler was never polled {waited}: the deadline passed first"
        seen = f"{self.polls} poll(s), {self.answers_in_a_row} answer(s) in a row"
        if self.last_error is None:
            return (
                f"the scaler answered too few polls in a row {waited} "
                f"({seen}; {self.answers_needed} needed)"
            )
        return f"the scaler gave no answer {waited} ({seen}; last error: {self.last_error})"
