"""Strict JSON Schemas, written by hand, for CRD kinds whose CRDs are not shipped.

Why by hand: KEDA's TriggerAuthentication and prometheus-operator's
ServiceMonitor/PodMonitor CRDs are large and change often; these schemas
hold only the fields the manifests use, with every other field an error, so
a typo or a field moved between versions fails CI instead of being dropped
by the API server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["HAND_SCHEMAS"]

_STR = {"type": "string"}
_SELECTOR = {
    "type": "object",
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": _STR},
        "matchExpressions": {"type": "array", "items": {"type": "object"}},
    },
    "additionalProperties": False,
}
_METADATA = {
    "type": "object",
    "properties": {
        "name": _STR,
        "namespace": _STR,
        "labels": {"type": "object", "additionalProperties": _STR},
        "annotations": {"type": "object", "additionalProperties": _STR},
    },
    "required": ["name"],
    "additionalProperties": False,
}
_NAMESPACE_SELECTOR = {
    "type": "object",
    "properties": {
        "any": {"type": "boolean"},
        "matchNames": {"type": "array", "items": _STR},
    },
    "additionalProperties": False,
}
# One scrape endpoint: the fields ServiceMonitor `endpoints` and PodMonitor
# `podMetricsEndpoints` share (monitoring.coreos.com/v1).
_SCRAPE_ENDPOINT = {
    "type": "object",
    "properties": {
        "port": _STR,
        "path": _STR,
        "interval": {"type": "string", "pattern": r"^[0-9]+(ms|s|m|h)$"},
        "scheme": {"enum": ["http", "https"]},
        "honorLabels": {"type": "boolean"},
    },
    "required": ["port"],
    "additionalProperties": False,
}


def _monitor(endpoints_key: str) -> Mapping[str, Any]:
    return {
        "type": "object",
        "properties": {
            "apiVersion": _STR,
            "kind": _STR,
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "properties": {
                    "selector": _SELECTOR,
                    "namespaceSelector": _NAMESPACE_SELECTOR,
                    endpoints_key: {"type": "array", "minItems": 1, "items": _SCRAPE_ENDPOINT},
                },
                "required": ["selector", endpoints_key],
                "additionalProperties": False,
            },
        },
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
    }


HAND_SCHEMAS: dict[tuple[str, str], Mapping[str, Any]] = {
    ("keda.sh/v1alpha1", "TriggerAuthentication"): {
        "type": "object",
        "properties": {
            "apiVersion": _STR,
            "kind": _STR,
            "metadata": _METADATA,
            "spec": {
                "type": "object",
                "properties": {
                    "secretTargetRef": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "properties": {"parameter": _STR, "name": _STR, "key": _STR},
                            "required": ["parameter", "name", "key"],
                            "additionalProperties": False,
                        },
                    },
                },
                "additionalProperties": False,
            },
        },
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
    },
    ("monitoring.coreos.com/v1", "ServiceMonitor"): _monitor("endpoints"),
    ("monitoring.coreos.com/v1", "PodMonitor"): _monitor("podMetricsEndpoints"),
}
