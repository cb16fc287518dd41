"""KEDA's external-scaler wire contract.

The ``*_pb2`` modules are generated from ``externalscaler.proto`` at build time
(``make protos``) and never committed or edited by hand.
"""
