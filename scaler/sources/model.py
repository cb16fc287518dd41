"""Plain data shared by every metric source: what one ScaledObject reads, what comes back.

Why a module of its own: the Prometheus, direct-scrape and Kubernetes sources
all answer in the same ``Reading`` shape, so ``scaler.state`` never needs to
know where numbers came from, and tests can fake a source with a few lines.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal, Protocol

import numpy as np

SourceKind = Literal["prometheus", "scrape", "kubernetes"]


class SourceError(RuntimeError):
    """A source could not produce trustworthy numbers this time (down, slow, garbage)."""


class Matcher(Protocol):
    """A validated label matcher: ``scaler.settings.LabelMatcher`` (which
    renders escaped PromQL with ``promql()``)."""

    @property
    def name(self) -> str: ...

    @property
    def op(self) -> str: ...

    @property
    def value(self) -> str: ...

    def promql(self) -> str: ...


@lru_cache(maxsize=4096)
def _compiled(pattern: str) -> re.Pattern[str]:
    # PromQL regexes are RE2 and fully anchored; Python's fullmatch matches that.
    return re.compile(pattern)


def matcher_matches(matcher: Matcher, labels: Mapping[str, str]) -> bool:
    """Evaluate one matcher on a label set the way Prometheus does (absent == "")."""
    actual = labels.get(matcher.name, "")
    op = matcher.op
    if op == "=":
        return actual == matcher.value
    if op == "!=":
        return actual != matcher.value
    if op == "=~":
        return _compiled(matcher.value).fullmatch(actual) is not None
    if op == "!~":
        return _compiled(matcher.value).fullmatch(actual) is None
    raise ValueError(f"unknown label matcher operator {op!r}")


@dataclass(frozen=True)
class Selection:
    """Which vLLM series belong to one ScaledObject.

    ``matchers`` already include the ``model`` key (as ``model_name``).
    ``urls`` is the direct-scrape list; ``namespace``/``pod_selector`` are
    Kubernetes discovery. Equal selections share reads.
    """

    matchers: tuple[Matcher, ...] = ()
    urls: tuple[str, ...] = ()
    namespace: str = ""
    pod_selector: str = ""

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(matcher_matches(m, labels) for m in self.matchers)

    @property
    def label_names(self) -> tuple[str, ...]:
        return tuple(sorted({m.name for m in self.matchers}))


@dataclass(frozen=True)
class SourceSpec:
    """Which backend serves a selection: one source object per distinct spec."""

    kind: SourceKind
    address: str = ""

    @property
    def label(self) -> str:
        """The ``source`` label of ``prescaler_source_up``."""
        return self.kind


@dataclass(frozen=True)
class Reading:
    """What the fleet of one ScaledObject looked like at ``time_s``.

    Rates are per second over the source's rate window (Prometheus) or since
    the previous scrape (direct); ``None`` means "not measurable" (first
    scrape, a restart, the counter is absent on that vLLM version, or some
    replica could not be read). ``waiting`` is NaN when unknown (a replica
    could not be read, or the gauge is absent); ``running`` is NaN when the
    gauge is absent, and the readable replicas' sum (a lower bound) when some
    replica could not be read. Missing data is never reported as zero, which
    the policy would read as an idle fleet. Where vLLM splits its queue by
    reason, ``waiting`` is the part waiting for capacity (requests deferred by
    LoRA budget or KV transfer do not ask for replicas).
    ``arrival_rate_rps`` = finished requests per second + growth of requests
    in the system (the whole queue + running) per second: an exact balance
    over the window, and unlike completions alone it rises the moment a burst
    queues. Both sources also add requests turned away at admission (where
    vLLM counts them), and leave finishes with ``finished_reason="error"``
    (an internal failure, answered 500) out of ``completion_rate_rps`` while
    still balancing them in arrivals.

    Optional, from newer vLLM metric sets (``None`` where the source or the
    vLLM version does not say): ``rejections_per_s``, requests turned away
    at admission (already inside ``arrival_rate_rps``: it is demand);
    ``computed_prompt_tokens_per_s``, prompt tokens actually prefilled (not
    served from a cache); ``kv_cache_tokens``, one replica's KV cache size in
    tokens (the mean over replicas that state it).
    """

    time_s: float
    ready_replicas: int
    waiting: float
    running: float
    kv_usage: float | None = None
    arrival_rate_rps: float | None = None
    completion_rate_rps: float | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    preemptions_per_s: float | None = None
    lead_time_samples_s: tuple[float, ...] = field(default=(), compare=False)
    rejections_per_s: float | None = None
    computed_prompt_tokens_per_s: float | None = None
    kv_cache_tokens: float | None = None


def usable(reading: Reading) -> bool:
    """Whether the policy can act on ``reading``: it knows the queue or KV usage.

    Sources drop readings that know neither, so the state sees "no reading"
    and the data's age keeps growing (stale hold, then ``fallbackReplicas``);
    a NaN-only reading would look fresh yet never reach the fallback.
    """
    return math.isfinite(reading.waiting) or (
        reading.kv_usage is not None and math.isfinite(reading.kv_usage)
    )


def finite_or_error(value: float, what: str) -> float:
    """``value`` if it is a finite, non-negative number; else ``SourceError``."""
    if not math.isfinite(value) or value < 0:
        raise SourceError(f"{what} is {value!r}, not a finite non-negative number")
    return value


@dataclass(frozen=True, eq=False)
class History:
    """A long history for one selection, as arrays on a time grid (oldest first).

    What a restarted scaler needs to rebuild forecast bins and learned
    capacity without holding one ``Reading`` object per point (1,000 objects x
    6 h of 15 s bins would be millions of objects). NaN marks a gap.
    """

    times: np.ndarray
    requests_per_s: np.ndarray
    tokens_per_s: np.ndarray
    ready: np.ndarray
    waiting: np.ndarray
    completions_per_s: np.ndarray

    def __len__(self) -> int:
        return int(self.times.size)


class MetricSource(Protocol):
    """A backend that reads many selections in one go (see ``scaler.sources``)."""

    spec: SourceSpec

    async def read(self, selections: Sequence[Selection], at_s: float) -> dict[Selection, Reading]:
        """Readings at ``at_s``; raises ``SourceError`` when nothing can be trusted.

        A selection missing from the answer failed on its own (e.g. one of its
        scrape targets is down) and must be treated as "no new data".
        """
        ...

    async def read_range(
        self, selections: Sequence[Selection], start_s: float, end_s: float, step_s: float
    ) -> dict[Selection, list[Reading]]:
        """History at ``start_s, start_s + step_s, ... <= end_s``; ``{}`` when the
        backend keeps none (direct scrape)."""
        ...

    async def read_history(
        self, selections: Sequence[Selection], start_s: float, end_s: float, step_s: float
    ) -> dict[Selection, History]:
        """Like ``read_range`` but as arrays of the few signals forecasting and
        capacity learning need; ``{}`` when the backend keeps no history."""
        ...

    async def close(self) -> None: ...
