"""Suite-wide settings.

Under CI the property tests run derandomized, so a submission's result does
not depend on the seed of the day; on developers' machines they explore new
examples on every run, which is where new counter-examples come from.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("dev", print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")
