"""Offline replay of request traces through emulated replicas and autoscalers.

``simulation`` (one run's wiring), ``router`` (the request path), ``scrape`` (the
emulated Prometheus), ``policies`` and ``runner`` (what runs, and the static
fleet search), ``report`` (summary JSON, table, plots) and ``cli``
(``prescaler simulate``) sit on top of the cluster model (``cluster``), the
control plane (``keda``, ``hpa``), the traffic (``traffic``,
``scaledobject``) and the very ``scaler.tracker`` the live scaler runs.
See docs/simulator.md.
"""

from pathlib import Path as _Path

from engine._native import native_dir as _native_dir

# the compiled request path (``make native``) comes first while it matches
# these sources exactly (see engine/_native.py)
_compiled = _native_dir(_Path(__file__).resolve().parent)
if _compiled is not None:
    __path__.insert(0, str(_compiled))
