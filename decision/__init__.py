"""The pure decision path: from a fleet reading to a replica count.

Below both the live scaler and the simulator, which run this very code, so
what is tuned offline is what answers KEDA. No I/O, no clock it is not given.
Modules: ``settings`` (trigger metadata -> typed settings, with ``selectors``
and the forecast ``methods``), ``reading`` (one measurement of a fleet),
``tracker`` with ``tracker_data`` and ``prediction`` (one ScaledObject's path
from readings to decisions), ``policy`` (the decision itself) and
``answer`` (the ``Decision``, its reasons, the fallback rule),
``queue_hold``, ``history``, ``capacity``, ``seasonal``, ``prewarm``,
``forecast_ledger``.
"""
