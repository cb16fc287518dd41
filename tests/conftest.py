"""Suite-wide settings.

Under CI the property tests run derandomized, so a submission's result does
not depend on the seed of the day; on developers' machines they explore new
examples on every run, which is where new counter-examples come from.
"""

from __future__ import annotations

from hypothesis import settings

from tests.support.ci import in_ci

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if in_ci() else "dev")
