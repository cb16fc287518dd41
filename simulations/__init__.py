"""Offline replay of request traces through emulated replicas and autoscalers.

``simulation`` (one run's wiring), ``router`` (the request path), ``scrape`` (the
emulated Prometheus), ``policies`` and ``runner`` (what runs, and the static
fleet search), ``report`` (summary JSON, table, plots) and ``cli``
(``prescaler simulate``) sit on top of the cluster model (``cluster``), the
control plane (``keda``, ``hpa``), the traffic (``traffic``,
``scaledobject``) and the very ``decision.tracker`` the live scaler runs.
See docs/simulator.md.
"""

from prescaler_native.loader import compiled_first

# the compiled request path (``make native``) comes first while it matches these
# sources exactly (prescaler_native/loader.py); before any module of the package loads
__path__ = compiled_first(__path__, __file__)
