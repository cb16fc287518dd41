"""The fit-window bench's pieces, on small series (the bench itself is ``-m bench``)."""

from __future__ import annotations

import numpy as np

from forecasting.registry import make_forecaster
from lab.fit_window import STEP_S, WindowedForecaster, focus_origins


def test_a_windowed_forecaster_sees_only_its_last_bins() -> None:
    """Fitted on a long history it forecasts as prescaler fitted on the
    window's bins alone: what a tracker with that fit window would say."""
    rng = np.random.default_rng(1)
    y = rng.poisson(5.0, 200) / 15.0
    windowed, plain = WindowedForecaster(64), make_forecaster("prescaler")
    windowed.fit(y, STEP_S)
    plain.fit(y[-64:], STEP_S)
    np.testing.assert_array_equal(
        windowed.predict(8, (0.5, 0.9)).values, plain.predict(8, (0.5, 0.9)).values
    )


def test_the_scored_span_is_the_held_back_days_focus_hours() -> None:
    times = np.arange(1, 5 * 5760 + 1) * STEP_S  # five days of 15 s bin ends
    lo, hi = focus_origins(times, "business-hours", 4)  # focus 06:00-12:00
    assert times[lo - 1] <= 4 * 86400 + 6 * 3600 < times[lo]
    assert (hi - lo) * STEP_S == 6 * 3600
