"""The lab's bench tests read their grid from a lab config (lab/configs/),
``--lab-config PATH`` (``make lab LAB_CONFIG=PATH``), the defaults without.

pytest registers a conftest's options only when a path at or under its folder
is on the command line, so ``--lab-config`` parses only where ``lab/tests``
(or a file in it) is named, as ``make lab`` and the bare ``pytest`` do."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from lab.config import sections

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "default.yaml"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--lab-config",
        type=Path,
        default=DEFAULT_CONFIG,
        help="the lab config the lab's bench tests run (default: lab/configs/default.yaml)",
    )


@pytest.fixture
def lab_config(request: pytest.FixtureRequest) -> Path:
    """The lab config given with ``--lab-config``."""
    path: Path = request.config.getoption("--lab-config")
    return path


@pytest.fixture
def lab_config_for(lab_config: Path) -> Callable[[str], Path]:
    """``lab_config_for(SECTION)``: the lab config, the test skipped when it
    has no such section (``make lab`` with one experiment's config runs only
    that experiment)."""

    def need(section: str) -> Path:
        if section not in sections(lab_config):
            pytest.skip(f"{lab_config} has no {section} section")
        return lab_config

    return need
