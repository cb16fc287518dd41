"""Suite-wide settings.

The suite's own options (``--update-golden``, ``--reference-dir``, the
benches' ``--bench-jobs``, ``--bench-trials``, ``--bench-prune``, the tuner
benches' ``--tune-*`` and ``--vllm-home``) are registered here
(tests.support.options).

Under CI the property tests run derandomized, so a submission's result does
not depend on the seed of the day; on developers' machines they explore new
examples on every run, which is where new counter-examples come from.

The stack tests run the stack in this process, so it runs as ``prescaler
stack`` does: gRPC's fork handlers off before gRPC loads
(:func:`stack.processes.quiet_grpc_forks`). With them on, a child forked
while the stack's gRPC client was busy could abort before it ran its
program. Children started through ``stack.processes.Child`` keep gRPC's own
setting; other subprocesses of the suite inherit the "off", and the scaler
tests' in-process gRPC servers run with it too (``prescaler serve`` in
production keeps gRPC's default). A ``GRPC_ENABLE_FORK_SUPPORT`` already in
the environment is left as it is.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

from stack.processes import quiet_grpc_forks
from tests.support.ci import in_ci
from tests.support.options import add_options, configure

quiet_grpc_forks()

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if in_ci() else "dev")


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    configure(config)
