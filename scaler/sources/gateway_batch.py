"""Read many ``gatewayRateQuery`` texts in a bounded number of Prometheus queries.

Why: the scaler sends a fixed number of queries per refresh whatever the
number of ScaledObjects, but every distinct gateway text was one more query
(a thousand objects with their own texts, a thousand queries a refresh).
Here up to ``BATCH_SIZE`` texts share one query: each is wrapped in
``label_replace`` so its series carry ``INDEX_LABEL`` naming its place, the
wrapped texts are joined with ``or`` (the index keeps their series apart),
and the answer is split back by that label. A batch Prometheus refuses is
bisected until the text at fault stands alone; that text is then sent as
written, on its own, like before batching, and remembered so it is not
bisected again. The reasons and the batch size: docs/decisions/gateway-query-batching.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import requests
from prometheus_api_client.exceptions import PrometheusApiClientException

BATCH_SIZE = 50
"""Most texts in one query. A text is at most 2,048 characters (the key's
limit in ``decision.settings``), so a full batch's POST body stays under
~110 KB as written and ~320 KB fully percent-encoded: inside the 1 MiB a
default nginx in front of Prometheus accepts. A bad text among them costs
about ``2 log2(BATCH_SIZE)`` (12) extra queries once, to isolate it."""

ALONE_PER_REFRESH = 4
"""Most texts sent on their own in one live refresh (those isolated as
failing, or that cannot be wrapped); the rest wait their turn, least
recently tried first, and are unknown meanwhile. This bounds a refresh's
queries at ``ceil(n / BATCH_SIZE) + ALONE_PER_REFRESH`` once every bad text
is isolated, however many texts fail."""

FORGET_AFTER_REFRESHES = 1000
"""What is remembered of a text no refresh has asked for in this many
refreshes is dropped (a ScaledObject deleted or its text changed)."""

INDEX_LABEL = "prescaler_gateway_query"
"""The label naming a series' text by its index in its batch."""

_QUERY_ERROR_STATUSES = tuple(f"HTTP Status Code {code} " for code in (400, 413, 422))
"""Answers that blame the query, not Prometheus, so bisecting helps: one it
cannot parse or type-check (400 bad_data), fails to evaluate (422
execution), or a body too large for a proxy in front of it (413)."""


@functools.lru_cache(maxsize=8192)  # asked of every text every refresh
def self_contained(text: str) -> bool:
    """Whether ``text`` is lexically one closed piece: brackets balanced
    outside strings and comments, no string left open.

    Why: a wrapped text lies inside the wrapper's parentheses; one that
    closed them (``x) or (y``) could write series under another text's
    index. Any text that is not one closed piece is sent on its own."""
    closing = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'`":
            end = _string_end(text, i)
            if end < 0:
                return False
            i = end
        elif c == "#":  # a comment runs to the end of the line
            newline = text.find("\n", i)
            i = n if newline < 0 else newline
        elif c in "([{":
            stack.append(c)
        elif c in closing and (not stack or stack.pop() != closing[c]):
            return False
        i += 1
    return not stack


def _string_end(text: str, start: int) -> int:
    """Index of the quote closing the string opened at ``start``, or -1.
    Backquoted strings have no escapes; the others escape with a backslash."""
    quote = text[start]
    i = start + 1
    while i < len(text):
        c = text[i]
        if c == "\\" and quote != "`":
            i += 2
            continue
        if c == quote:
            return i
        i += 1
    return -1


def wrapped(text: str, index: int, *, scalar: bool) -> str:
    """``text`` with ``INDEX_LABEL="index"`` on its series; a scalar text is
    made a one-series vector first. The text sits on lines of its own so a
    trailing ``#`` comment cannot swallow the wrapper."""
    inner = f"vector(\n{text}\n)" if scalar else f"(\n{text}\n)"
    return f'label_replace({inner}, "{INDEX_LABEL}", "{index}", "", "")'


@dataclasses.dataclass(frozen=True)
class GatewayGroup:
    """Texts read by one query: wrapped and joined, or one text as written
    (``alone``)."""

    members: tuple[str, ...]
    alone: bool = False


def split_answer(members: Sequence[str], answer: object) -> dict[str, object]:
    """A batch's answer (instant vector or range matrix) split into each
    member's own series by ``INDEX_LABEL``; a member with no series gets an
    empty answer (unknown, as an empty answer always is)."""
    if not isinstance(answer, list):
        problem = ValueError(f"a batch answered {answer!r}"[:300])
        return dict.fromkeys(members, problem)
    parts: dict[str, list[Any]] = {m: [] for m in members}
    for series in answer:
        metric = series.get("metric", {}) if isinstance(series, Mapping) else {}
        index = metric.get(INDEX_LABEL) if isinstance(metric, Mapping) else None
        if isinstance(index, str) and index.isdigit() and int(index) < len(members):
            parts[members[int(index)]].append(series)
    return dict(parts)


def is_query_error(exc: BaseException) -> bool:
    """Whether Prometheus refused the query itself (its text), as opposed to
    being down, slow or unreachable; the exception's causes are searched."""
    for link in _chain(exc):
        if isinstance(link, PrometheusApiClientException) and str(link).startswith(
            _QUERY_ERROR_STATUSES
        ):
            return True
    return False


def is_timeout(exc: BaseException) -> bool:
    return any(isinstance(link, TimeoutError | requests.Timeout) for link in _chain(exc))


def _chain(exc: BaseException) -> list[BaseException]:
    links: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in links:
        links.append(current)
        current = current.__cause__ or current.__context__
    return links


def is_scalar_answer(answer: object) -> bool:
    """An instant query's scalar answer: ``[time, "value"]``."""
    return (
        isinstance(answer, list)
        and len(answer) == 2
        and isinstance(answer[0], int | float)
        and isinstance(answer[1], str)
    )


def _is_vector(answer: object) -> bool:
    return (
        isinstance(answer, list)
        and bool(answer)
        and all(isinstance(s, Mapping) and "value" in s for s in answer)
    )


class NotRetriedError(Exception):
    """A text known to fail that waits its turn to be retried alone."""


class GatewayBatches:
    """What is learned of each text, kept across refreshes: the texts that
    must be sent alone (isolated as failing when wrapped, or not one closed
    piece), the scalar ones (wrapped in ``vector``; found when a text alone
    is refused, so range reads learn them too), and the largest batch a
    text may join after its batch timed out (halved each time, doubled back
    on each answer), so a slow text ends up costing only itself."""

    def __init__(
        self, batch_size: int = BATCH_SIZE, alone_per_refresh: int = ALONE_PER_REFRESH
    ) -> None:
        if batch_size < 1 or alone_per_refresh < 1:
            raise ValueError(
                f"batch_size and alone_per_refresh must be >= 1, got "
                f"{batch_size} and {alone_per_refresh}"
            )
        self.batch_size = batch_size
        self.alone_per_refresh = alone_per_refresh
        self._alone: dict[str, int] = {}
        """Text -> the refresh it was last sent alone (-1: never yet)."""
        self._scalar: set[str] = set()
        self._limit: dict[str, int] = {}
        self._seen: dict[str, int] = {}
        self._refresh = 0

    @property
    def alone(self) -> frozenset[str]:
        return frozenset(self._alone)

    def plan(self, texts: Sequence[str], *, live: bool) -> tuple[list[GatewayGroup], list[str]]:
        """The groups to send for ``texts`` and the texts left out this time
        (alone ones past ``alone_per_refresh``; only in a ``live`` refresh,
        a range read sends every alone text)."""
        if live:
            self._refresh += 1
            self._forget(texts)
        for text in texts:
            if not self_contained(text):
                self._alone.setdefault(text, -1)
        batched = sorted(
            (t for t in texts if t not in self._alone), key=lambda t: (self._limit_of(t), t)
        )
        groups: list[GatewayGroup] = []
        rest = iter(batched)
        for first in rest:
            size = self._limit_of(first)
            groups.append(GatewayGroup((first, *itertools.islice(rest, size - 1))))
        alone = sorted((t for t in texts if t in self._alone), key=lambda t: (self._alone[t], t))
        skipped: list[str] = []
        if live and len(alone) > self.alone_per_refresh:
            alone, skipped = alone[: self.alone_per_refresh], alone[self.alone_per_refresh :]
        for text in alone:
            if live:
                self._alone[text] = self._refresh
            groups.append(GatewayGroup((text,), alone=True))
        return groups, skipped

    def query(self, group: GatewayGroup) -> str:
        if group.alone:
            return group.members[0]
        return " or ".join(
            wrapped(text, i, scalar=text in self._scalar) for i, text in enumerate(group.members)
        )

    def refused(self, group: GatewayGroup) -> list[GatewayGroup]:
        """The groups to send at once after Prometheus refused ``group``'s
        query: its halves; for one text, the text again made a vector (a
        scalar cannot be labelled), and if that is refused too, the text
        alone as written (from now on)."""
        if len(group.members) == 1:
            text = group.members[0]
            if text not in self._scalar:
                self._scalar.add(text)
                return [group]
            self._scalar.discard(text)
            self._alone.setdefault(text, -1)
            return [GatewayGroup(group.members, alone=True)]
        return halves(group)

    def answered(self, group: GatewayGroup) -> None:
        """A batch answered: its texts may join batches twice as large."""
        for text in group.members:
            limit = self._limit_of(text) * 2
            if limit >= self.batch_size:
                self._limit.pop(text, None)
            else:
                self._limit[text] = limit

    def answered_alone(self, text: str, answer: object) -> None:
        """A text sent alone in a live refresh answered: a non-empty instant
        vector rejoins batches (it was refused for a passing reason);
        anything else (an empty answer, a range vector, a string) stays
        alone, so a text that cannot be wrapped is not bisected again."""
        if self_contained(text) and _is_vector(answer):
            # pop: two overlapping refreshes may both have sent it alone
            self._alone.pop(text, None)

    def timed_out(self, groups: Sequence[GatewayGroup]) -> None:
        """Batches of a live refresh that missed the timeout while Prometheus
        answered the others: their texts join batches half as large from the
        next refresh on, so a slow text is split from the rest in a few
        refreshes. Range reads split theirs at once (``read_gateways``) and
        do not come here: a range query is far heavier than an instant one,
        so its timeout says little of the live batches."""
        for group in groups:
            if group.alone:
                continue
            for text in group.members:
                self._limit[text] = max(1, (len(group.members) + 1) // 2)

    def _limit_of(self, text: str) -> int:
        return self._limit.get(text, self.batch_size)

    def _forget(self, texts: Sequence[str]) -> None:
        for text in texts:
            self._seen[text] = self._refresh
        if self._refresh % FORGET_AFTER_REFRESHES:
            return
        oldest = self._refresh - FORGET_AFTER_REFRESHES
        stale = {t for t, seen in self._seen.items() if seen < oldest}
        for text in stale:
            self._seen.pop(text, None)
            self._alone.pop(text, None)
            self._scalar.discard(text)
            self._limit.pop(text, None)


def halves(group: GatewayGroup) -> list[GatewayGroup]:
    """``group``'s texts in two batches, the first the larger by one at most."""
    half = (len(group.members) + 1) // 2
    return [GatewayGroup(group.members[:half]), GatewayGroup(group.members[half:])]


class RangeSplits:
    """Which batches of one range read to split after a timeout.

    Why: a range read has no next refresh to split a slow batch over, and a
    text it loses has no gateway history over the whole range. A batch that
    times out is halved at once; a half that times out is halved again only
    once its sibling has answered, which says the slow text is in this half.
    Both halves timing out says Prometheus itself is slow (or each half holds
    a slow text): splitting on would cost up to one more timeout per text,
    run one after the other, so both are lost instead."""

    def __init__(self) -> None:
        self._sibling: dict[GatewayGroup, GatewayGroup] = {}
        """Each half made here whose query has not finished -> its sibling."""
        self._timed_out: dict[GatewayGroup, bool] = {}
        """A finished half whose sibling has not -> whether it timed out."""

    def settled(self, group: GatewayGroup, *, timed_out: bool) -> list[GatewayGroup]:
        """The groups to send now that ``group``'s query finished."""
        sibling = self._sibling.pop(group, None)
        if sibling is None:  # a batch as planned: no sibling to go by
            return self._halves(group) if timed_out else []
        if sibling in self._sibling:  # decided when the sibling finishes
            self._timed_out[group] = timed_out
            return []
        sibling_timed_out = self._timed_out.pop(sibling)
        if timed_out and not sibling_timed_out:
            return self._halves(group)
        if sibling_timed_out and not timed_out:
            return self._halves(sibling)
        return []

    def _halves(self, group: GatewayGroup) -> list[GatewayGroup]:
        if len(group.members) < 2:
            return []
        first, second = halves(group)
        self._sibling[first], self._sibling[second] = second, first
        return [first, second]


@dataclasses.dataclass
class GatewayAnswers:
    """Each text's own answer (its series, a scalar, or the exception that
    left it unknown) and the batches that timed out (in a range read also
    those split afterwards, whose texts were answered by the halves)."""

    answers: dict[str, object]
    timed_out: list[GatewayGroup]


async def read_gateways(
    batches: GatewayBatches,
    texts: Sequence[str],
    fetch: Callable[[str], Awaitable[Any]],
    *,
    deadline: float | None,
    live: bool,
) -> GatewayAnswers:
    """Read every text through ``fetch`` (one Prometheus query, instant or
    range) in batches, bisecting a refused batch at once, until each text
    has an answer or the loop's clock passes ``deadline``.

    A range read (not ``live``) bisects a batch that times out at once too
    (``RangeSplits``), down to the slow text, so only that text is lost."""
    loop = asyncio.get_running_loop()
    splits = None if live else RangeSplits()
    groups, skipped = batches.plan(texts, live=live)
    answers: dict[str, object] = {
        text: NotRetriedError("known to fail; retried alone in turn") for text in skipped
    }
    timed_out: list[GatewayGroup] = []
    pending = {asyncio.ensure_future(fetch(batches.query(g))): g for g in groups}
    try:
        while pending:
            wait_s = None if deadline is None else max(0.0, deadline - loop.time())
            done, _ = await asyncio.wait(
                pending, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                break
            for task in done:
                group = pending.pop(task)
                retries = _settle(batches, group, task, answers, timed_out, live=live)
                if splits is not None:
                    exc = task.exception()
                    slow = exc is not None and is_timeout(exc)
                    retries += splits.settled(group, timed_out=slow)
                for retry in retries:
                    pending[asyncio.ensure_future(fetch(batches.query(retry)))] = retry
    finally:
        for task, group in pending.items():
            task.cancel()
            timed_out.append(group)
            for text in group.members:
                answers[text] = TimeoutError("no answer before the refresh's timeout")
    return GatewayAnswers(answers, timed_out)


def _settle(
    batches: GatewayBatches,
    group: GatewayGroup,
    task: asyncio.Future[Any],
    answers: dict[str, object],
    timed_out: list[GatewayGroup],
    *,
    live: bool,
) -> list[GatewayGroup]:
    """Record one finished query's answers; return the groups to send next."""
    exc = task.exception()
    if exc is None:
        answer = task.result()
        if group.alone:
            answers[group.members[0]] = answer
            if live:
                batches.answered_alone(group.members[0], answer)
        else:
            answers.update(split_answer(group.members, answer))
            batches.answered(group)
        return []
    if not group.alone and is_query_error(exc):
        return batches.refused(group)
    if is_timeout(exc):
        timed_out.append(group)
    for text in group.members:
        answers[text] = exc
    return []
