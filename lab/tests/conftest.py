"""The lab's bench tests read their grid from a lab config (lab/configs/),
``--lab-config PATH`` (``make lab LAB_CONFIG=PATH``), the defaults without."""

from __future__ import annotations

from pathlib import Path

import pytest

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
