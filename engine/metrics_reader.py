"""Fetching vLLM /metrics pages over a period, and keeping them in a file.

The I/O half of the /metrics profile fit (``engine.metrics_windows`` is the
pure half). Pages are kept as JSON lines, ``{"t": seconds, "text": page}``,
so a fit can be rerun, or shared, without the server.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from engine.metrics_windows import MetricsPage


class ScrapeError(RuntimeError):
    """A /metrics URL that could not be read (which URL, and why)."""


def fetch_page(url: str, timeout_s: float = 5.0) -> str:
    """One GET of ``url``'s text."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return str(resp.read().decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise ScrapeError(f"{url}: {exc}") from None


def scrape_pages(
    url: str,
    *,
    duration_s: float,
    interval_s: float,
    timeout_s: float = 5.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    on_page: Callable[[MetricsPage], None] | None = None,
) -> list[MetricsPage]:
    """Pages of ``url`` every ``interval_s`` for ``duration_s`` (the first at once).

    ``t`` is the clock when each GET returned. Load the server meanwhile.
    """
    if interval_s <= 0 or duration_s <= 0:
        raise ValueError("scrape: duration and interval must be > 0")
    pages: list[MetricsPage] = []
    start = clock()
    next_at = start
    while True:
        text = fetch_page(url, timeout_s)
        page = MetricsPage(clock() - start, text)
        pages.append(page)
        if on_page is not None:
            on_page(page)
        next_at += interval_s
        if next_at - start > duration_s:
            return pages
        sleep(max(0.0, next_at - clock()))


def write_pages(pages: Sequence[MetricsPage], path: str | Path) -> Path:
    target = Path(path)
    with target.open("w", encoding="utf-8") as out:
        for page in pages:
            out.write(json.dumps({"t": page.t, "text": page.text}) + "\n")
    return target


def read_pages(path: str | Path) -> list[MetricsPage]:
    """Pages written by ``write_pages`` (errors name the file and line)."""
    pages: list[MetricsPage] = []
    source = Path(path)
    try:
        lines = source.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            pages.append(MetricsPage(float(row["t"]), str(row["text"])))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(
                f'{path}:{number}: expected {{"t": seconds, "text": page}} ({exc})'
            ) from None
    return pages
