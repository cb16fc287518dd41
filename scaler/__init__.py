"""prescaler's KEDA external scaler.

Modules, each with one job: ``settings`` (trigger metadata -> typed,
validated settings), ``policy`` (the pure replica decision, shared with the
simulator), ``capacity`` (per-replica capacity from an engine profile),
``prewarm`` (pure balloon sizing), ``telemetry`` (own metrics), ``sources``
(the only code that talks to Prometheus, vLLM and Kubernetes), ``state``
(history and background refresh), ``service`` / ``tls`` / ``cli`` (the gRPC
server and ``prescaler serve``).
"""
