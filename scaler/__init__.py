"""prescaler's KEDA external scaler: the I/O shell around ``decision``.

Modules: ``sources`` (the only code that talks to Prometheus, vLLM and
Kubernetes), ``state`` (history and background refresh, in layers:
``refresh``, ``backfill``, ``live_step``, ``live_outputs``, ``live_entry``,
``pacing``), ``forecast_worker`` (forecasts in a child process),
``telemetry`` (own metrics), ``service`` / ``front`` / ``tls`` / ``cli``
(the gRPC server and ``prescaler serve``).
"""
