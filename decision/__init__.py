"""The pure decision path: from a fleet reading to a replica count.

Below both the live scaler (``scaler``) and the simulator (``simulations``),
which run this very code, so what is tuned offline is what answers KEDA.
Modules: ``settings`` (trigger metadata -> typed settings) with
``selectors``, ``reading`` (one measurement of a fleet), ``history``
(binned demand, learned capacity, lead-time samples), ``capacity``
(per-replica capacity from a profile), ``prediction`` (forecast requests),
``forecast_ledger`` (forecast accuracy), ``policy`` (the decision itself),
``prewarm`` (balloon sizing), ``tracker`` with ``tracker_data`` (one
ScaledObject's path from readings to decisions). No I/O, no clock it is not
given.
"""
