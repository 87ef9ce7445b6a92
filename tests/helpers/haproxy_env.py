"""Loopback test environment for the node agent: snapshots, backends, HAProxy instances.

Every simulated pod or backend gets its own 127.x.y.z address; every process started here
is stopped by PID.
"""

from __future__ import annotations

import contextlib
import http.server
import random
import threading
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from nodeagent.apply.applier import Applier
from nodeagent.apply.saved import StateStore
from nodeagent.config.render import RenderOptions
from nodeagent.haproxy.driver import HAProxy
from nodeagent.haproxy.supervisor import Supervisor
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.fleet import HttpBackend
from tests.helpers.fleet import free_port as free_port  # re-exported for the agent tests
from tests.helpers.fleet import http_get as fleet_http_get
from tests.helpers.haproxy_versions import SYSTEM_BINARY


def loopback_net() -> str:
    """A random 127.a.b prefix so parallel test runs do not share addresses."""
    return f"127.{random.randint(100, 250)}.{random.randint(1, 250)}"


@contextlib.contextmanager
def identity_server(host: str, identity: str) -> Iterator[int]:
    """A tiny HTTP backend on host answering its identity; yields its port."""
    server = HttpBackend(identity, (host, 0))
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


class _Slow(http.server.BaseHTTPRequestHandler):
    """Answers 200 after `?delay=<seconds>`."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)
        time.sleep(float(query.get("delay", ["0"])[0]))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, format: str, *args: object) -> None:
        pass


class _SlowServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client or HAProxy closing before the answer is what its tests do


@contextlib.contextmanager
def slow_server(host: str) -> Iterator[tuple[str, int]]:
    """An HTTP backend on host that answers after the request's `?delay=<seconds>`
    (a request kept in flight, a backend past a timeout); yields its address."""
    server = _SlowServer((host, 0), _Slow)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,))
    thread.start()
    try:
        yield host, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def http_get(host: str, port: int, host_header: str, timeout: float = 3.0) -> str:
    """One request on a fresh connection; returns the body."""
    return fleet_http_get(host, host_header, port=port, timeout=timeout)


def slots(endpoints: list[tuple[str, int]], count: int = 4) -> list[pb.Slot]:
    out = []
    for i in range(1, count + 1):
        if i <= len(endpoints):
            addr, port = endpoints[i - 1]
            out.append(
                pb.Slot(index=i, server_name=f"SRV_{i}", address=addr, port=port, enabled=True)
            )
        else:
            out.append(pb.Slot(index=i, server_name=f"SRV_{i}"))
    return out


def backend(
    name: str,
    endpoints: list[tuple[str, int]],
    mode: str = "http",
    balance: str = "source",
    persistence: bool = True,
    count: int = 4,
    balance_argument: str = "",
    hash_type: str = "",
) -> pb.Backend:
    b = pb.Backend(
        name=name,
        service=name.replace("_", "/", 1).rsplit("_", 1)[0],
        service_port=name.rsplit("_", 1)[1],
        mode=mode,
        balance=balance,
        slots=slots(endpoints, count),
        balance_argument=balance_argument,
        hash_type=hash_type,
    )
    if persistence:
        b.persistence.CopyFrom(pb.Persistence(table_size=1 << 20, expire_ms=1_800_000))
    return b


def snapshot(
    peers: list[tuple[str, str, int]],
    backends: list[pb.Backend],
    http_port: int | None = None,
    routes: Sequence[tuple[str, str]] = (),
    tcp: Sequence[tuple[int, str]] = (),
    version: int = 1,
) -> pb.Snapshot:
    s = pb.Snapshot(
        workload="haproxy-system/DaemonSet/haproxy",
        version=version,
        content_hash=f"{version:064x}",
        peers=pb.PeerSection(
            name="localinstance",
            port=peers[0][2] if peers else 10000,
            peers=[pb.Peer(name=n, address=a, port=p) for n, a, p in peers],
        ),
        backends=backends,
        tcp_frontends=[pb.TcpFrontend(port=p, backend=b) for p, b in tcp],
    )
    if http_port is not None:
        s.http_frontend.CopyFrom(
            pb.HttpFrontend(
                port=http_port, routes=[pb.HostRoute(host=h, backend=b) for h, b in routes]
            )
        )
    return s


@dataclass
class Instance:
    """One managed HAProxy with its applier, as the agent runs it."""

    ip: str
    pod: str
    dir: Path
    applier: Applier
    haproxy: HAProxy
    supervisor: Supervisor

    @property
    def config_path(self) -> str:
        """haproxy.cfg, with the write the applier defers after a runtime change done: the
        file as any reader of it (a reload, a restart) finds it."""
        self.applier.files.config.flush()
        return self.applier.config_path


def make_instance(
    tmp: Path,
    ip: str,
    pod: str,
    sync_wait: float = 1.0,
    binary: str = SYSTEM_BINARY,
    bind_address: str = "",
) -> Instance:
    """One agent-managed HAProxy. Tests that run it pass `binary=haproxy_bin.path` (the
    `haproxy_bin` fixture: each installed version); the default is for tests that never
    start it. `bind_address`: the agent's --bind-address (default: `ip`)."""
    tmp.mkdir(parents=True, exist_ok=True)
    master, runtime = str(tmp / "master.sock"), str(tmp / "runtime.sock")
    cfg = str(tmp / "haproxy.cfg")
    hx = HAProxy(master, runtime, binary, sync_wait=sync_wait)
    sup = Supervisor(cfg, master, str(tmp / "haproxy.pid"), binary)
    applier = Applier(
        RenderOptions(pod, bind_address=bind_address or ip, runtime_socket=runtime),
        cfg,
        StateStore(str(tmp / "state")),
        hx,
        sup,
    )
    return Instance(ip, pod, tmp, applier, hx, sup)


@contextlib.contextmanager
def running_instance(
    tmp: Path,
    ip: str,
    pod: str,
    sync_wait: float = 1.0,
    binary: str = SYSTEM_BINARY,
    bind_address: str = "",
) -> Iterator[Instance]:
    inst = make_instance(tmp, ip, pod, sync_wait, binary, bind_address)
    try:
        yield inst
    finally:
        inst.applier.close()
        inst.supervisor.stop()
