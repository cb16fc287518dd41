"""prescaler's default forecasts are pinned: a refactor must not move them.

``tests/forecasting/data/prescaler_golden.json`` holds the 0.1/0.5/0.9 forecasts (30 steps) of
the default configuration fitted on cuts of three shipped fixtures, and after
``update`` with seven more steps, recorded before the model was split into
configuration, members and band modules. Keys are ``file:steps`` (fitted on
the first ``steps``) or ``file:steps+7`` (then updated with seven more).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from forecasting import make_forecaster
from forecasting.readers import read_series

DATA = Path(__file__).parents[1] / "data"
GOLDEN = json.loads((DATA / "prescaler_golden.json").read_text())
STEPS = {"azure_2023_code_head.csv": 30.0}


@pytest.mark.parametrize("key", sorted(GOLDEN))
def test_default_forecasts_are_unchanged(key: str) -> None:
    name, cut = key.split(":")
    fitted, _, more = cut.partition("+")
    series = read_series(DATA / name, STEPS.get(name))
    y = np.asarray(series.values, dtype=float)
    f = make_forecaster("prescaler")
    f.fit(y[: int(fitted)], series.step_s)
    if more:
        f.update(y[: int(fitted) + int(more)])
    got = f.predict(30, (0.1, 0.5, 0.9)).values
    # Bit-equal on the machine that recorded them; 1e-12 leaves room for
    # another BLAS's summation order, none for a change of logic.
    np.testing.assert_allclose(got, np.asarray(GOLDEN[key]), rtol=1e-12, atol=1e-12)
