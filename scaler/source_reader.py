"""Reading the metric sources for the live loop, and keeping their health.

One grouped read per source per refresh (one query for all the objects
sharing a Prometheus), ``prescaler_source_up`` per source, a log line when a
source goes down or comes back, and the last failure of each source in words
so an UNAVAILABLE answer can say what failed (Prometheus unreachable, a DNS
failure, an HTTP status, a timeout) instead of only ``no_data``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from decision.reading import Reading
from scaler.registry import Entry, ObjectKey
from scaler.sources import MetricSource, SourceFactory, SourceSpec

__all__ = ["SourceReader", "by_source", "describe_failure", "source_name"]

log = logging.getLogger(__name__)

_E = TypeVar("_E", bound=Entry)
_HTTP_STATUS = re.compile(r"\bHTTP(?: Status Code)? ([1-5][0-9]{2})\b")


def by_source(entries: Iterable[_E]) -> dict[SourceSpec, list[_E]]:
    """Entries grouped by the source that serves them, in order of first appearance."""
    groups: dict[SourceSpec, list[_E]] = {}
    for entry in entries:
        groups.setdefault(entry.spec, []).append(entry)
    return groups


def source_name(spec: SourceSpec) -> str:
    """A source as a person names it: ``Prometheus http://prom:9090``."""
    if spec.kind == "prometheus":
        return f"Prometheus {spec.address}"
    return "direct scrape" if spec.kind == "scrape" else "Kubernetes pod discovery"


def _causes(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps: causes, contexts, urllib3's ``reason`` and
    exceptions passed as arguments (requests wraps urllib3 that way)."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo and len(seen) < 32:
        current = todo.pop(0)
        if any(current is s for s in seen):
            continue
        seen.append(current)
        inner = [current.__cause__, current.__context__, getattr(current, "reason", None)]
        inner.extend(a for a in current.args if isinstance(a, BaseException))
        todo.extend(e for e in inner if isinstance(e, BaseException))
    return seen


def describe_failure(spec: SourceSpec, exc: BaseException) -> str:
    """Why ``spec`` failed, in words: refused, DNS, an HTTP status, a timeout,
    or else the error's own message."""
    name = source_name(spec)
    chain = _causes(exc)
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return f"{name} unreachable: connection refused"
    dns = next((e for e in chain if isinstance(e, socket.gaierror)), None)
    if dns is not None:
        return f"{name} unreachable: DNS lookup failed ({dns.strerror or dns})"
    for e in chain:
        status = _HTTP_STATUS.search(str(e))
        if status is not None:
            return f"{name} answered HTTP {status.group(1)}"
    text = str(exc) or type(exc).__name__
    if any(isinstance(e, TimeoutError) for e in chain):
        return f"{name} timed out: {text}"
    return text if text.startswith(name) else f"{name}: {text}"


class SourceReader:
    """The live loop's metric sources: one per :class:`SourceSpec`, made by
    ``factory`` on first use; ``report_up(label, up)`` publishes each
    source's health (``ScalerTelemetry.set_source_up``)."""

    def __init__(
        self, factory: SourceFactory, *, report_up: Callable[[str, bool], None] | None = None
    ) -> None:
        self._factory = factory
        self._report_up = report_up
        self._sources: dict[SourceSpec, MetricSource] = {}
        self._was_up: dict[SourceSpec, bool] = {}
        self._failures: dict[SourceSpec, str] = {}
        self._unread: set[ObjectKey] = set()

    @staticmethod
    def label(spec: SourceSpec) -> str:
        """The ``source`` label of ``prescaler_source_up``."""
        return f"prometheus:{spec.address}" if spec.kind == "prometheus" else spec.kind

    def source(self, spec: SourceSpec) -> MetricSource:
        source = self._sources.get(spec)
        if source is None:
            source = self._sources[spec] = self._factory(spec)
        return source

    async def read(self, entries: Sequence[Entry], tick: float) -> dict[ObjectKey, Reading]:
        """Each object's reading at grid time ``tick``: every source read once,
        concurrently, for all its objects. An object whose source failed, or
        that its source left out, gets none."""
        groups = by_source(entries)
        specs = list(groups)
        answers = await asyncio.gather(
            *(
                self.source(spec).read(list(dict.fromkeys(e.selection for e in groups[spec])), tick)
                for spec in specs
            ),
            return_exceptions=True,
        )
        readings: dict[ObjectKey, Reading] = {}
        for spec, answer in zip(specs, answers, strict=True):
            if isinstance(answer, BaseException):
                if isinstance(answer, asyncio.CancelledError):
                    raise answer
                self._failures[spec] = describe_failure(spec, answer)
                self._health(spec, False, str(answer))
                continue
            self._failures.pop(spec, None)
            complete = True
            for entry in groups[spec]:
                reading = answer.get(entry.selection)
                if reading is None:
                    complete = False
                    self._unread.add(entry.key)
                else:
                    self._unread.discard(entry.key)
                    readings[entry.key] = reading
            self._health(spec, complete, "some objects got no reading")
        return readings

    def problem(self, entry: Entry) -> str | None:
        """What kept ``entry``'s last read from giving a reading, in words, or
        ``None`` when it gave one (or none was tried yet)."""
        failure = self._failures.get(entry.spec)
        if failure is not None:
            return failure
        if entry.key not in self._unread:
            return None
        urls = ", ".join(entry.selection.urls)
        if entry.spec.kind == "scrape" and urls:
            return f"direct scrape: no reading from {urls} (unreachable, or no series of its model)"
        return f"{source_name(entry.spec)} answered no series for this object"

    def forget(self, key: ObjectKey) -> None:
        """Drop what is kept about an object no longer tracked."""
        self._unread.discard(key)

    def _health(self, spec: SourceSpec, up: bool, why: str) -> None:
        """``prescaler_source_up``, and a log line when it changes (not every refresh)."""
        label = self.label(spec)
        if self._report_up is not None:
            self._report_up(label, up)
        if self._was_up.get(spec, True) != up:
            if up:
                log.info("source %s is back", label)
            else:
                log.warning("source %s failed: %s", label, why)
        self._was_up[spec] = up

    async def close(self) -> None:
        """Close every source (best effort) and forget them."""
        for source in list(self._sources.values()):
            try:
                await source.close()
            except Exception:  # closing is best effort
                log.debug("closing source failed", exc_info=True)
        self._sources.clear()
