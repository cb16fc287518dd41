"""prescaler's KEDA external scaler: the I/O shell around ``decision``.

Modules: ``sources`` (the only code that talks to Prometheus, vLLM and
Kubernetes), ``state`` (the live loop's facade, composing ``registry``,
``source_reader``, ``stepper``, ``live_outputs``, ``backfill``, ``refresh``
and ``pacing``), ``forecast_worker`` (forecasts in a child process),
``telemetry`` (own metrics), ``service`` / ``front`` / ``tls`` / ``cli``
(the gRPC server and ``prescaler serve``).
"""
