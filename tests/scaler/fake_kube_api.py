"""A tiny fake kube-apiserver: Deployment ``/scale`` GET and PATCH, recorded.

Serves ``/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale`` on
127.0.0.1, port 0, in a background thread; ``calls`` records every request
(method, path, content type, JSON body) so tests can assert exactly what the
balloon controller sent.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_SCALE = re.compile(r"^/apis/apps/v1/namespaces/([^/]+)/deployments/([^/]+)/scale$")


@dataclass
class Call:
    method: str
    path: str
    content_type: str | None
    body: Any = None


@dataclass
class FakeKubeApi:
    """Deployments by (namespace, name) -> replicas; ``fail_patch`` forces 500s."""

    deployments: dict[tuple[str, str], int] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    fail_patch: bool = False
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def patches(self) -> list[Call]:
        return [c for c in self.calls if c.method == "PATCH"]

    def start(self) -> FakeKubeApi:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                return

            def _send(self, code: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _scale(self, ns: str, name: str) -> dict[str, Any]:
                replicas = api.deployments[(ns, name)]
                return {
                    "apiVersion": "autoscaling/v1",
                    "kind": "Scale",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {"replicas": replicas},
                    "status": {"replicas": replicas, "selector": f"app={name}"},
                }

            def _not_found(self, name: str) -> None:
                self._send(
                    404,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "reason": "NotFound",
                        "code": 404,
                        "message": f'deployments.apps "{name}" not found',
                    },
                )

            def _handle(self, method: str) -> None:
                path = self.path.split("?", 1)[0]
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                api.calls.append(Call(method, path, self.headers.get("Content-Type"), body))
                m = _SCALE.match(path)
                if not m:
                    self._send(404, {"kind": "Status", "code": 404, "message": "no such path"})
                    return
                ns, name = m.groups()
                if (ns, name) not in api.deployments:
                    self._not_found(name)
                    return
                if method == "PATCH":
                    if api.fail_patch:
                        self._send(500, {"kind": "Status", "code": 500, "message": "boom"})
                        return
                    api.deployments[(ns, name)] = int(body["spec"]["replicas"])
                self._send(200, self._scale(ns, name))

            def do_GET(self) -> None:
                self._handle("GET")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
