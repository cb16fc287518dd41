"""Offline replay of request traces through emulated replicas and autoscalers.

Not built yet: the simulator issue adds the event loop, cluster model,
KEDA/HPA emulation, reports and tuning. It will reuse ``scaler.policy``.
"""
