"""Sets the balloon (placeholder) Deployment's replicas through the Kubernetes API.

The only node pre-warming code that talks to the outside; the sizing is
``decision.prewarm.plan_balloons`` (pure). It PATCHes the Deployment's
``scale`` subresource with a JSON merge patch (``{"spec": {"replicas": N}}``
-- RBAC needs ``patch`` and ``get`` on ``deployments/scale``), and only when
the count changes: the last value set is remembered per Deployment and
re-read from the API every ``verify_after_s`` in case someone edited it.

The ``kubernetes`` client is blocking: call :meth:`BalloonController.apply`
from a worker thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["BalloonController", "BalloonError"]

_MERGE_PATCH = "application/merge-patch+json"


class BalloonError(RuntimeError):
    """The Kubernetes API refused or failed a balloon read or update."""


class BalloonController:
    """``BalloonController(api_client).apply(namespace, deployment, replicas)``."""

    def __init__(
        self,
        api_client: Any,
        *,
        verify_after_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from kubernetes import client as k8s

        self._apps = k8s.AppsV1Api(api_client)
        self._api_exception = k8s.ApiException
        self.verify_after_s = verify_after_s
        self._clock = clock
        self._known: dict[tuple[str, str], tuple[int, float]] = {}

    def current(self, namespace: str, deployment: str) -> int:
        """The Deployment's ``spec.replicas`` as the API has it now."""
        try:
            scale = self._apps.read_namespaced_deployment_scale(deployment, namespace)
        except self._api_exception as exc:
            raise BalloonError(
                f"reading {namespace}/{deployment} scale: {exc.status} {exc.reason}"
            ) from None
        except Exception as exc:  # connection refused, timeouts, TLS
            raise BalloonError(f"reading {namespace}/{deployment} scale: {exc!r}"[:300]) from None
        return int(getattr(scale.spec, "replicas", 0) or 0)

    def apply(self, namespace: str, deployment: str, replicas: int) -> bool:
        """Make the Deployment run ``replicas`` balloons; True if it PATCHed."""
        if replicas < 0:
            raise ValueError(f"balloon replicas must be >= 0, got {replicas}")
        key = (namespace, deployment)
        now = self._clock()
        known = self._known.get(key)
        if known is None or now - known[1] >= self.verify_after_s:
            self._known[key] = (self.current(namespace, deployment), now)
            known = self._known[key]
        if known[0] == replicas:
            return False
        body = {"spec": {"replicas": int(replicas)}}
        try:
            try:
                self._apps.patch_namespaced_deployment_scale(
                    deployment, namespace, body, _content_type=_MERGE_PATCH
                )
            except TypeError:  # older generated clients have no _content_type
                self._apps.patch_namespaced_deployment_scale(deployment, namespace, body)
        except self._api_exception as exc:
            self._known.pop(key, None)
            raise BalloonError(
                f"scaling {namespace}/{deployment} to {replicas}: {exc.status} {exc.reason}"
            ) from None
        except Exception as exc:
            self._known.pop(key, None)
            raise BalloonError(f"scaling {namespace}/{deployment}: {exc!r}"[:300]) from None
        self._known[key] = (int(replicas), now)
        return True

    def forget(self, namespace: str, deployment: str) -> None:
        self._known.pop((namespace, deployment), None)
