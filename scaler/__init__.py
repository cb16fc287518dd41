"""prescaler's KEDA external scaler.

Modules, each with one job: ``settings`` (trigger metadata -> typed,
validated settings), ``policy`` (the pure replica decision, shared with the
simulator), ``capacity`` (per-replica capacity from an engine profile),
``prewarm`` (pure balloon sizing), ``telemetry`` (own metrics), ``sources``
(the only code that talks to Prometheus, vLLM and Kubernetes), ``tracker``
(one object's pure path from a reading to a decision; its data in
``tracker_data``, its forecast requests in ``prediction``), ``state``
(history and background refresh, in layers: ``refresh``, ``backfill``,
``live_step``, ``live_outputs``, ``live_entry``, ``pacing``), ``service`` /
``tls`` / ``cli`` (the gRPC server and ``prescaler serve``).
"""
