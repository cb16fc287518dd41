"""Offline replay of request traces through emulated replicas and autoscalers.

``simulation`` (the event loop, router and records), ``scrape`` (the
emulated Prometheus), ``policies`` and ``runner`` (what runs, and the static
fleet search), ``report`` (summary JSON, table, plots) and ``cli``
(``prescaler simulate``) sit on top of the cluster model (``cluster``), the
control plane (``keda``, ``hpa``), the traffic (``traffic``,
``scaledobject``) and the very ``scaler.tracker`` the live scaler runs.
See docs/simulator.md.
"""
