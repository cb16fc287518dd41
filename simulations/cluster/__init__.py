"""The Kubernetes side of a simulation: the vLLM Deployment's pods
(``pods``), Karpenter's nodes (``karpenter``), where pods land
(``placement``), the records both share (``state``) and the NodePool
settings (``config``)."""
