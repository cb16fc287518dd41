"""``prescaler stack``: the whole autoscaling loop as real local processes.

Prometheus, ``prescaler serve``, ``prescaler emulate`` replicas, a load
generator replaying a trace over HTTP, and a controller that plays KEDA, the
HPA and Karpenter with the simulator's own rule code, all on the wall clock
(optionally compressed by ``--speed``).
"""
