"""KEDA and the HPA as the simulator runs them: a ScaledObject, its triggers, their controllers."""
