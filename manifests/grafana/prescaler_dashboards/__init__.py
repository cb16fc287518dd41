"""prescaler's Grafana dashboards, built with Grafana's typed SDK.

``DASHBOARDS`` maps each committed file name under ``dashboards/`` to the
function that builds it; ``generate.py`` beside this package writes or
checks the files. Shared pieces: ``panels`` (panel and target styling),
``board`` (variables, label filters, import inputs); one module per dashboard.
"""

from __future__ import annotations

from collections.abc import Callable

from prescaler_dashboards.board import Json
from prescaler_dashboards.fleet import fleet
from prescaler_dashboards.forecast_accuracy import forecast_accuracy

__all__ = ["DASHBOARDS", "Json"]

DASHBOARDS: dict[str, Callable[[], Json]] = {
    "forecast-accuracy.json": forecast_accuracy,
    "fleet.json": fleet,
}
