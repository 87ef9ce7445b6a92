"""The demo fleet's HTTPS part (deploy/examples/demo-https/): its manifests and the
kubernetes.io/tls Secret they name, written into a fleet's manifests folder, HTTPS
clients that verify the served certificate against the test CA, and a request loop over
both HAProxy instances that counts what failed while a certificate is renewed.

Used by the HTTPS end-to-end tests, the rotation benchmark and `make demo`: the Secret is
made on the spot (no key in the repository) and replaced atomically, as a user editing
the folder would."""

from __future__ import annotations

import http.client
import os
import shutil
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from cryptography import x509

from nodeagent.haproxy.driver import HAProxy
from tests.helpers.fleet import REPO, AgentHandle
from tests.helpers.tls_certs import Leaf, TestCA, tls_secret
from tests.helpers.waiting import wait_until

DEMO_HTTPS = REPO / "deploy" / "examples" / "demo-https"
HTTPS_PORT = 18443  # the Gateway listener's port and the settings' https-port
GATEWAY_HOST = "secure.demo.example.com"  # HTTPRoute secure-store (Gateway secure)
INGRESS_HOST = "secure.example.com"  # Ingress secure-shop (spec.tls)
SECRET = "demo-tls"
SECRET_FILE = "demo-tls-secret.yaml"
SHOP_TABLE = "default_shop_http"  # both routes reach shop: its one stick table


def issue(ca: TestCA) -> Leaf:
    """A certificate for both HTTPS hosts (each call a new serial: a renewal)."""
    return ca.issue(GATEWAY_HOST, INGRESS_HOST)


def write_secret(manifests: Path, leaf: Leaf) -> float:
    """(Re)write the Secret's file atomically (the source never reads half of it); the
    moment (perf_counter) the new file appeared."""
    path = manifests / SECRET_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(yaml.safe_dump(tls_secret(SECRET, leaf)))
    tmp.chmod(0o600)
    start = time.perf_counter()
    os.replace(tmp, path)
    return start


def write_https(manifests: Path, leaf: Leaf) -> None:
    """The HTTPS manifests and their Secret, into a fleet's manifests folder (before the
    fleet starts: `Fleet.write_manifests` leaves files of other names alone)."""
    manifests.mkdir(parents=True, exist_ok=True)
    for source in DEMO_HTTPS.glob("*.yaml"):
        shutil.copy(source, manifests / source.name)
    write_secret(manifests, leaf)


def verifying_context(ca: TestCA) -> ssl.SSLContext:
    """Trusts `ca` alone and checks the name: what `curl --cacert` does. No session
    tickets are kept between connections (each connection is its own handshake)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(cadata=ca.pem.decode())
    return ctx


@dataclass(frozen=True, slots=True)
class Answer:
    """One HTTPS GET: who answered and with which certificate."""

    body: str
    serial: str  # hex, of the certificate the handshake got


@dataclass
class KeepAlive:
    """One HTTPS connection kept open across requests (HTTP/1.1 keep-alive)."""

    conn: http.client.HTTPSConnection
    host: str
    serial: str  # of the certificate its handshake got

    def get(self, close: bool = False) -> Answer:
        """GET / (`close`: asking the server to close the connection after it)."""
        headers = {"Host": self.host, **({"Connection": "close"} if close else {})}
        self.conn.request("GET", "/", headers=headers)
        reply = self.conn.getresponse()
        body = reply.read().decode().strip()
        if reply.status != 200:
            raise RuntimeError(f"HTTP {reply.status} for {self.host}: {body[:200]}")
        return Answer(body, self.serial)

    def close(self) -> None:
        self.conn.close()


def keepalive(
    ctx: ssl.SSLContext,
    haproxy: str,
    host: str,
    source: str | None = None,
    port: int = HTTPS_PORT,
    timeout: float = 5,
) -> KeepAlive:
    """An HTTPS connection to `haproxy` for `host` (SNI, verified) from `source` (any
    when None), open until closed."""
    raw = socket.create_connection((haproxy, port), timeout, (source, 0) if source else None)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        tls = ctx.wrap_socket(raw, server_hostname=host)
    except BaseException:
        raw.close()
        raise
    der = tls.getpeercert(binary_form=True)
    assert der is not None
    conn = http.client.HTTPSConnection(host, port, timeout=timeout, context=ctx)
    conn.sock = tls
    return KeepAlive(conn, host, format(x509.load_der_x509_certificate(der).serial_number, "x"))


def https_get(
    ctx: ssl.SSLContext,
    haproxy: str,
    host: str,
    source: str | None = None,
    port: int = HTTPS_PORT,
    timeout: float = 5,
) -> Answer:
    """GET / with SNI and Host `host` through `haproxy` on a fresh connection from
    `source` (any when None); raises on a failed handshake, verification or non-200."""
    connection = keepalive(ctx, haproxy, host, source, port, timeout)
    try:
        return connection.get(close=True)
    finally:
        connection.close()


def served_serial(ctx: ssl.SSLContext, haproxy: str, host: str, port: int = HTTPS_PORT) -> str:
    """The serial a handshake for `host` gets from `haproxy` now ("" when it fails)."""
    try:
        raw = socket.create_connection((haproxy, port), 2)
    except OSError:
        return ""
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        with ctx.wrap_socket(raw, server_hostname=host) as tls:
            der = tls.getpeercert(binary_form=True)
    except (OSError, ssl.SSLError):
        return ""
    finally:
        raw.close()
    return format(x509.load_der_x509_certificate(der).serial_number, "x") if der else ""


def reloads(agents: Sequence[AgentHandle]) -> int:
    """Reloads of these agents' HAProxy masters so far (`show proc` on the master CLI)."""
    return sum(
        HAProxy(str(a.master_socket), str(a.runtime_socket)).show_proc().reloads for a in agents
    )


def wait_served(
    ctx: ssl.SSLContext,
    haproxies: Sequence[str],
    host: str,
    serial: str,
    since: float,
    timeout: float = 10,
    poll: float = 0.005,
) -> float:
    """Until every HAProxy serves the certificate `serial` for `host`: seconds from `since`
    (perf_counter)."""
    waiting = set(haproxies)
    while waiting:
        waiting = {h for h in waiting if served_serial(ctx, h, host) != serial}
        if not waiting:
            break
        if time.perf_counter() - since > timeout:
            raise TimeoutError(f"serial {serial} not served by {sorted(waiting)} in {timeout}s")
        time.sleep(poll)
    return time.perf_counter() - since


@dataclass
class RequestLoop:
    """HTTPS GETs round-robin over `haproxies` on a background thread, each on a fresh
    connection verified against the CA, until `stop`: what was sent and what failed."""

    ctx: ssl.SSLContext
    haproxies: Sequence[str]
    host: str
    gap: float = 0.005  # seconds between requests
    sent: int = 0
    failures: list[str] = field(default_factory=list)
    serials: set[str] = field(default_factory=set)  # every serial a request was served
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stop.is_set():
            haproxy = self.haproxies[self.sent % len(self.haproxies)]
            self.sent += 1
            try:
                self.serials.add(https_get(self.ctx, haproxy, self.host, timeout=2).serial)
            except (OSError, ssl.SSLError, RuntimeError, http.client.HTTPException) as e:
                self.failures.append(f"{haproxy}: {type(e).__name__}: {str(e)[:120]}")
            self._stop.wait(self.gap)

    def wait_sent(self, count: int, timeout: float = 30) -> None:
        """Until `count` requests were sent in all."""
        wait_until(lambda: self.sent >= count, timeout, f"{count} requests sent", step=0.01)

    def __enter__(self) -> RequestLoop:
        self._thread = threading.Thread(target=self._run, name="https-loop", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
