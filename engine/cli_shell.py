"""What every ``prescaler engine`` subcommand shares: its report printed as text or
JSON, an expected error as one line and exit status 2, and its JSON files."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def print_report(report: T, as_json: bool, text: Callable[[T], str]) -> None:
    """Indented JSON with ``--json``, else ``text(report)``."""
    if as_json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(text(report))


def run_reported(
    command: str,
    errors: tuple[type[Exception], ...],
    work: Callable[[], T],
    text: Callable[[T], str],
    as_json: bool = False,
) -> T | None:
    """``work()``'s report, printed; None when it raised one of ``errors``, said on
    stderr in one line (the caller exits 2)."""
    try:
        report = work()
    except errors as exc:
        sys.stderr.write(f"{command}: {exc}\n")
        return None
    print_report(report, as_json, text)
    return report


def read_json(path: str) -> Any:
    """The JSON document in ``path``; ValueError naming the file when it cannot be read."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None


def write_json(path: str, doc: Any) -> None:
    Path(path).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
