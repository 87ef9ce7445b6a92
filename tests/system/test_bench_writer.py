"""The route propagation benchmark's Kubernetes writer (one kept-alive connection, a write
that returns once its request is sent, so the poll starts then and not after the reply; a
refused write still fails the trial) and its poll (a round asks every HAProxy before
reading a reply)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import cast

import pytest

from tests.bench.api_writer import KeptAliveWriter
from tests.bench.routes import Bench, KubeRoutes
from tests.helpers.fleet import HTTP_PORT, Fleet

pytestmark = pytest.mark.unit


class SlowApi(ThreadingHTTPServer):
    """Answers every request once `release` is set: 201 for a POST, 409 for a name
    starting with "taken", the stored route (resourceVersion 7) for a GET, 200 for a PUT;
    records each request and the client port it came from."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.release = threading.Event()
        self.received = threading.Event()
        self.requests: list[tuple[str, str, dict[str, object]]] = []
        self.ports: set[int] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # kept alive
    server: SlowApi

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else {}
        self.server.requests.append((self.command, self.path, body))
        self.server.ports.add(self.client_address[1])
        self.server.received.set()
        self.server.release.wait(10)
        name = str((body.get("metadata") or {}).get("name", ""))
        status = 409 if name.startswith("taken") else 201 if self.command == "POST" else 200
        reply = {"metadata": {"name": name, "resourceVersion": "7"}, "message": "exists"}
        data = json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def api() -> Iterator[SlowApi]:
    server = SlowApi()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()


def test_a_write_returns_once_sent_and_its_reply_is_read_by_settle(api: SlowApi) -> None:
    routes = KubeRoutes(KeptAliveWriter(api.url))
    routes.write("new-0", "n0.demo.example.com", "shop")  # the server has not answered
    assert api.received.wait(5)
    assert api.requests[0][:2] == (
        "POST",
        "/apis/gateway.networking.k8s.io/v1/namespaces/default/httproutes",
    )
    assert api.requests[0][2]["spec"]["hostnames"] == ["n0.demo.example.com"]  # type: ignore[index]
    api.release.set()
    routes.settle()
    # Written again: a GET for its resourceVersion, then a PUT carrying it.
    routes.write("new-0", "n0.demo.example.com", "catalog")
    routes.settle()
    assert [(m, p.rsplit("/", 1)[-1]) for m, p, _ in api.requests] == [
        ("POST", "httproutes"),
        ("GET", "new-0"),
        ("PUT", "new-0"),
    ]
    assert api.requests[2][2]["metadata"]["resourceVersion"] == "7"  # type: ignore[index]
    assert len(api.ports) == 1  # one kept-alive connection for all three


def test_a_refused_write_fails_when_settled(api: SlowApi) -> None:
    api.release.set()
    routes = KubeRoutes(KeptAliveWriter(api.url))
    routes.write("taken-0", "t0.demo.example.com", "shop")
    with pytest.raises(RuntimeError, match="409 exists"):
        routes.settle()
    routes.write("new-1", "n1.demo.example.com", "shop")
    routes.settle()


class Answering(ThreadingHTTPServer):
    """An HAProxy stand-in on `address`:HTTP_PORT: 200 once `ready` is set (waits for it
    up to 2 s, then 404)."""

    daemon_threads = True

    def __init__(self, address: str, ready: threading.Event, asked: threading.Event) -> None:
        super().__init__((address, HTTP_PORT), Answer)
        self.ready, self.asked = ready, asked


class Answer(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Answering

    def do_GET(self) -> None:
        self.server.asked.set()
        status = 200 if self.server.ready.wait(2) else 404
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_poll_round_asks_every_haproxy_before_reading_a_reply() -> None:
    """The first HAProxy answers only once the second was asked: polled in turn (the
    second asked after the first's reply), its first answer would be a 404 after 2 s."""
    second_asked = threading.Event()
    addresses = ("127.77.250.1", "127.77.250.2")
    servers = [
        Answering(addresses[0], ready=second_asked, asked=threading.Event()),
        Answering(addresses[1], ready=threading.Event(), asked=second_asked),
    ]
    servers[1].ready.set()
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        fleet = SimpleNamespace(agents={a: SimpleNamespace(address=a) for a in addresses})
        bench = Bench(cast(Fleet, fleet), KubeRoutes(KeptAliveWriter("http://127.0.0.1:1")))
        start = time.perf_counter()
        assert bench._until_200("n0.demo.example.com", start, timeout=10) < 2
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
