"""Suite-wide settings.

The suite's own options (``--update-golden``, ``--reference-dir``, the
benches' ``--bench-jobs``, ``--bench-trials``, ``--bench-prune``, the tuner
benches' ``--tune-*`` and ``--vllm-home``) are registered here
(tests.support.options).

Under CI the property tests run derandomized, so a submission's result does
not depend on the seed of the day; on developers' machines they explore new
examples on every run, which is where new counter-examples come from.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

from tests.support.ci import in_ci
from tests.support.options import add_options, configure

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if in_ci() else "dev")


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    configure(config)
