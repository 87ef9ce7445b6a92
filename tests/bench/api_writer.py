"""Writes to a Kubernetes API server as a lean production client makes them: JSON over
one kept-alive HTTP/1.1 connection (TLS with the admin's client certificate for a real
server), the request sent at once and its reply read when the caller asks.

The route propagation benchmark times a route from the moment its write starts to the
first 200 through every HAProxy. With the Kubernetes Python client each write opened a
new TLS connection (the reply, asked for unread, was never read, so its pool could not
reuse the connection) and the poll could only start once the reply was back: on a loaded
machine 5 to 6 ms after the control plane had read the watch event at the median, up to
30 ms after the agents had set the route
(docs/findings.md, "Route propagation through a real API server: the writer, the poll,
the informer"). Here the clock still starts before the request is written; the poll
starts as soon as it is sent, and the reply is read (and checked) once the route is
served.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
from typing import Any
from urllib.parse import urlsplit

from kubernetes import client

Obj = dict[str, Any]
# A connection idle this long is opened again before a write: under the idle timeout of
# any server (the kube-apiserver's is 90 s), so a write never meets one the server closed.
IDLE_S = 30.0


class KeptAliveWriter:
    """One connection to the API server at `url`, opened again only when the server closed
    it or a request failed; one request in flight at a time."""

    def __init__(
        self, url: str, context: ssl.SSLContext | None = None, headers: dict[str, str] | None = None
    ) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.context = context if parts.scheme == "https" else None
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        self.headers.update(headers or {})
        self.conn: http.client.HTTPConnection | None = None
        self.pending = ""  # "METHOD path" of the request whose reply is not read yet
        self.connections = 0  # opened so far
        self.used_at = 0.0  # `time.monotonic` of the last reply read

    @classmethod
    def from_configuration(cls, configuration: client.Configuration) -> KeptAliveWriter:
        """A writer with the credentials of a Kubernetes client configuration (a loaded
        kubeconfig): the CA, a client certificate, a bearer token."""
        context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
        if configuration.cert_file:
            context.load_cert_chain(configuration.cert_file, configuration.key_file)
        headers = {}
        token = configuration.api_key.get("authorization") or configuration.api_key.get(
            "BearerToken"
        )
        if token:
            prefix = configuration.api_key_prefix.get("authorization", "")
            headers["Authorization"] = f"{prefix} {token}".strip()
        return cls(configuration.host, context, headers)

    def _connection(self) -> http.client.HTTPConnection:
        if self.conn is not None and time.monotonic() - self.used_at > IDLE_S:
            self.close()
        if self.conn is None:
            if self.context is not None:
                self.conn = http.client.HTTPSConnection(
                    self.host, self.port, timeout=10, context=self.context
                )
            else:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
            self.conn.connect()
            self.connections += 1
        return self.conn

    def send(self, method: str, path: str, body: Obj | None = None) -> None:
        """Write one request; its reply is read by `reply`."""
        if self.pending:
            raise RuntimeError(f"{self.pending}: reply not read")
        data = json.dumps(body).encode() if body is not None else None
        conn = self._connection()
        try:
            conn.request(method, path, body=data, headers=self.headers)
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        self.pending = f"{method} {path}"

    def reply(self) -> Obj:
        """The reply to the request sent last, decoded; raises when it is not a success."""
        what, self.pending = self.pending, ""
        if not what or self.conn is None:
            raise RuntimeError("no request sent")
        try:
            answer = self.conn.getresponse()
            raw = answer.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        self.used_at = time.monotonic()
        if answer.will_close:
            self.close()
        found: Obj = json.loads(raw or b"{}")
        if answer.status >= 300:
            raise RuntimeError(f"{what}: {answer.status} {found.get('message')}")
        return found

    def request(self, method: str, path: str, body: Obj | None = None) -> Obj:
        """One request and its reply."""
        self.send(method, path, body)
        return self.reply()

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None
