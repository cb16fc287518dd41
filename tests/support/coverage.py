"""Out-of-sample coverage of a fitted forecaster's upper quantile."""

from __future__ import annotations

import numpy as np

from forecasting import Forecaster


def rolling_coverage(f: Forecaster, y: np.ndarray, origins: range, q: float = 0.9) -> float:
    """Share of ``y[t + 1]`` at or below the 2-step ``q`` quantile forecast at
    each origin ``t`` (``update`` only: the fitted parameters stay)."""
    hits = []
    for t in origins:
        f.update(y[:t])
        hits.append(y[t + 1] <= f.predict(2, (0.5, q)).values[1, 1])
    return float(np.mean(hits))
