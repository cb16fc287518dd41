"""Plain data shared by every metric source: what one ScaledObject reads, what comes back.

Why a module of its own: the Prometheus, direct-scrape and Kubernetes sources
all answer in the same ``Reading`` shape (``decision.reading``), so ``scaler.state`` never needs to
know where numbers came from, and tests can fake a source with a few lines.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Protocol

import numpy as np

from decision.reading import Reading

SourceKind = Literal["prometheus", "scrape", "kubernetes"]


class SourceError(RuntimeError):
    """A source could not produce trustworthy numbers this time (down, slow, garbage)."""


class Matcher(Protocol):
    """A validated label matcher: ``decision.settings.LabelMatcher`` (which
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
    Kubernetes discovery; ``gateway_query`` is the ``gatewayRateQuery``
    PromQL (empty: none). Equal selections share reads.
    """

    matchers: tuple[Matcher, ...] = ()
    urls: tuple[str, ...] = ()
    namespace: str = ""
    pod_selector: str = ""
    gateway_query: str = ""

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
