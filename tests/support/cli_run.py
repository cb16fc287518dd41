"""One ``prescaler`` command run in-process, its exit code and what it printed."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout

from prescaler.cli import main


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``prescaler ARGV``: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()
