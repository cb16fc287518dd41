"""prescaler's KEDA external scaler: the I/O shell around ``decision``.

Modules: ``sources`` (the only code that talks to Prometheus, vLLM and
Kubernetes), ``state`` (the live loop's facade, composing ``registry``,
``source_reader``, ``stepper``, ``live_outputs``, ``backfill`` and
``refresh``), ``decider`` (that loop in a child process of ``prescaler
serve``, publishing its answers: ``decider_wire``), ``decider_process`` /
``decision_table`` (the serving process's side: the child supervised, its
answers held), ``telemetry`` (own metrics), ``service`` / ``server`` /
``tls`` / ``cli`` (the gRPC server and ``prescaler serve``).
"""
