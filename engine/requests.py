"""Plain data that goes into and comes out of a replica.

Kept apart from the scheduler so the simulator, the emulator and reports can
share these records without pulling in any scheduling logic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

FinishedReason = Literal["stop", "length", "abort"]
FINISHED_REASONS: tuple[FinishedReason, ...] = ("stop", "length", "abort")


@dataclass(frozen=True, slots=True)
class Request:
    """One inference request as the engine sees it.

    `output_tokens` is the exact number of tokens the request will produce: a
    trace replay fixes it (vLLM's `max_tokens` with `ignore_eos`), so the model
    never has to guess when an EOS would have come. `finished_reason` is what
    the finished record reports: `length` when the client capped the output,
    `stop` when the output ended "naturally".
    """

    request_id: str
    arrival_s: float
    prompt_tokens: int
    output_tokens: int
    finished_reason: Literal["stop", "length"] = "length"

    def __post_init__(self) -> None:
        if self.prompt_tokens < 1:
            raise ValueError(
                f"request {self.request_id!r}: prompt_tokens must be >= 1, got {self.prompt_tokens}"
            )
        if self.output_tokens < 1:
            raise ValueError(
                f"request {self.request_id!r}: output_tokens must be >= 1, got {self.output_tokens}"
            )
        if self.finished_reason not in ("stop", "length"):
            raise ValueError(
                f"request {self.request_id!r}: finished_reason must be 'stop' or 'length', "
                f"got {self.finished_reason!r}"
            )


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """What happened to one request, emitted exactly once when it ends.

    Times are on the replica's clock (seconds). `first_token_s` is None only
    for a request aborted before its first token. `output_tokens` is the number
    of tokens actually produced (fewer than requested only when aborted).
    `first_scheduled_s` feeds vLLM's queue-time histogram.
    """

    request_id: str
    arrival_s: float
    first_token_s: float | None
    finish_s: float
    prompt_tokens: int
    output_tokens: int
    preemptions: int
    finished_reason: FinishedReason
    first_scheduled_s: float | None = None

    @property
    def ttft_s(self) -> float | None:
        """Time to first token, None when no token was produced."""
        if self.first_token_s is None:
            return None
        return self.first_token_s - self.arrival_s

    @property
    def e2e_s(self) -> float:
        return self.finish_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first (vLLM's TPOT)."""
        if self.first_token_s is None or self.output_tokens < 2:
            return None
        return (self.finish_s - self.first_token_s) / (self.output_tokens - 1)
