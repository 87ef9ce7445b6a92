"""The one metrics and health HTTP server of both sides (`--metrics-port`).

Each side keeps its own metric definitions in its own registry and hands this server the
registry (none: a health-only server, `/metrics` is 404). Paths: `/metrics` (Prometheus
text format), `/healthz` (the process is alive) and,
when the side gives a readiness function, `/readyz` (200 when ready, 503 otherwise: the
control plane's kubelet probe, since kubelet's gRPC probe cannot speak TLS; the agent's,
which also gives the reason, sent as the body). Anything else is 404. Request logging is
off: scrapes every few seconds would drown the decision lines.

Clients are bounded (`HttpLimits`): a connection that sends nothing for `idle_timeout`,
or has not sent its whole request head within `header_timeout` (a byte at a time does not
extend it), is closed, and past `max_connections` at once a new one is closed at accept.
Without that, slow clients held a thread and a descriptor each, forever, until the agent
could not open a socket to HAProxy. Errors of a connection go through logging (the JSON
formatter under `--log-format json`), and a client that resets is not an error at all.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

# The logger name every log line shows, kept from before the module moved to runtime/.
log = logging.getLogger("peerplane.httpserve")

# Ready or not, optionally with the reason (the body of the answer).
Readiness = Callable[[], bool | tuple[bool, str]]


@dataclass(frozen=True)
class HttpLimits:
    """What one client may hold. A scrape or a probe sends its head at once and is
    answered in milliseconds; kubelet probes time out after 1 s, Prometheus after 10 s."""

    idle_timeout: float = 10.0  # seconds without a byte, either way
    header_timeout: float = 5.0  # seconds from accept to the end of the request head
    max_connections: int = 64  # open at once; more are closed at accept


class _Deadlines:
    """One thread that shuts down the sockets whose request head is late (a socket
    timeout alone restarts with every byte a slow client sends)."""

    def __init__(self) -> None:
        self._due: dict[socket.socket, float] = {}
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="metrics-deadlines", daemon=True)
        self._thread.start()

    def add(self, sock: socket.socket, seconds: float) -> None:
        with self._cond:
            self._due[sock] = time.monotonic() + seconds
            self._cond.notify()

    def discard(self, sock: socket.socket) -> None:
        with self._cond:
            self._due.pop(sock, None)

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                now = time.monotonic()
                for sock in [s for s, due in self._due.items() if due <= now]:
                    del self._due[sock]
                    with contextlib.suppress(OSError):  # closed meanwhile
                        sock.shutdown(socket.SHUT_RDWR)  # its handler's read ends at once
                wait = min(self._due.values(), default=now + 3600) - now
                self._cond.wait(max(wait, 0.001))


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer with a connection cap, head deadlines, and errors logged."""

    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], limits: HttpLimits
    ) -> None:
        self.limits = limits
        self.deadlines = _Deadlines()
        self._active = 0
        self._count_lock = threading.Lock()
        try:
            super().__init__(address, handler)
        except BaseException:
            self.deadlines.stop()
            raise

    @property
    def active(self) -> int:
        """Connections open now."""
        with self._count_lock:
            return self._active

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._count_lock:
            full = self._active >= self.limits.max_connections
            if not full:
                self._active += 1
        if full:
            log.debug(
                "metrics: %d connections open, closing one from %s", self._active, client_address
            )
            self.shutdown_request(request)
            return
        self.deadlines.add(request, self.limits.header_timeout)
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def _release(self, request: Any) -> None:
        self.deadlines.discard(request)
        with self._count_lock:
            self._active -= 1

    def handle_error(self, request: Any, client_address: Any) -> None:
        """socketserver prints a traceback to stderr, past every log formatter; a client
        that resets or times out is routine, anything else is logged as an error."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            log.debug("metrics: client %s went away: %r", client_address, exc)
            return
        log.error("metrics: error answering %s", client_address, exc_info=True)

    def server_close(self) -> None:
        super().server_close()
        self.deadlines.stop()


class MetricsHttpServer:
    """`/metrics`, `/healthz` (and `/readyz`) on HOST:PORT in a daemon thread; port 0
    picks a free port (`port` says which)."""

    def __init__(
        self,
        registry: CollectorRegistry | None,
        host: str,
        port: int,
        ready: Readiness | None = None,
        limits: HttpLimits | None = None,
    ) -> None:
        limits = limits if limits is not None else HttpLimits()
        self._httpd = _Server((host, port), _handler(registry, ready, limits), limits)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.2,), name="metrics", daemon=True
        )

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def connections(self) -> int:
        """Client connections open now (at most `HttpLimits.max_connections`)."""
        return self._httpd.active

    def start(self) -> MetricsHttpServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def _handler(
    registry: CollectorRegistry | None, ready: Readiness | None, limits: HttpLimits
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        timeout = limits.idle_timeout  # the socket's: a read or write without progress

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def parse_request(self) -> bool:
            """Reads the headers; once the head is in, its deadline no longer applies (the
            reply's write has the idle timeout)."""
            parsed = super().parse_request()
            server = self.server
            assert isinstance(server, _Server)
            server.deadlines.discard(self.request)
            return parsed

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics" and registry is not None:
                self._reply(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._reply(200, b"ok\n")
            elif path == "/readyz" and ready is not None:
                answer = ready()
                serving, why = answer if isinstance(answer, tuple) else (answer, "")
                body = f"{why}\n".encode() if why else b"ok\n" if serving else b"not serving\n"
                self._reply(200 if serving else 503, body)
            else:
                self._reply(404, b"not found\n")

        def _reply(self, code: int, body: bytes, kind: str = "text/plain") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler
