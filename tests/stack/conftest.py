"""Shared set-up of the stack tests: the ``soak`` marker and the Prometheus prerequisite.

``soak`` tests (ten minutes of wall time) run only when asked for with
``-m soak``; ``bench`` tests follow the suite's ``make bench`` rule. Every
test here starts real processes, so each first makes sure the `prometheus`
binary exists: under CI its absence fails the run, elsewhere it skips.
"""

from __future__ import annotations

import pytest

from stack.processes import INSTALL_HINT, prometheus_binary
from tests.support.ci import fail_in_ci_else_skip


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "soak: ten-minute stack run checking memory stays flat (opt-in: -m soak)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "soak" in (config.getoption("markexpr", "") or ""):
        return
    skip = pytest.mark.skip(reason="soak test: run it with -m soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def prometheus() -> str:
    """The prometheus binary (fail under CI, skip elsewhere, when it is missing)."""
    found = prometheus_binary()
    if found is None:
        fail_in_ci_else_skip(INSTALL_HINT)
    return found
