"""Backends that terminate TLS themselves (what a passthrough listener reaches), a client
that says which certificate it got, and the PROXY protocol v2 header a load balancer
sends in front of a connection.

Every server here listens on its own 127.x address and is stopped by the context that
started it."""

from __future__ import annotations

import contextlib
import socket
import socketserver
import ssl
import struct
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import NameOID

from tests.helpers.tls_certs import Leaf, TestCA

PROXY_V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"


def proxy_v2(source: tuple[str, int], destination: tuple[str, int]) -> bytes:
    """A PROXY protocol v2 header (PROXY command, TCP over IPv4) claiming `source`."""
    addresses = socket.inet_aton(source[0]) + socket.inet_aton(destination[0])
    body = addresses + struct.pack("!HH", source[1], destination[1])
    return PROXY_V2_SIGNATURE + bytes([0x21, 0x11]) + struct.pack("!H", len(body)) + body


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        server: TlsIdentityServer = self.server  # type: ignore[assignment]
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no 40 ms waits
        try:
            with server.context.wrap_socket(self.request, server_side=True) as tls:
                tls.sendall(f"{server.name}\n".encode())
                tls.recv(1)  # until the client closes: no reset under its read
        except (OSError, ssl.SSLError):
            pass  # a client that gave up, or HAProxy's health of nothing


class TlsIdentityServer(socketserver.ThreadingTCPServer):
    """Answers every TLS client with its name, presenting its own certificate."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, name: str, address: tuple[str, int], leaf: Leaf) -> None:
        self.name = name
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.num_tickets = 0  # no session tickets: the name is the only record sent
        with tempfile.TemporaryDirectory() as tmp:  # the key on disk only while loaded
            path = Path(tmp) / "server.pem"
            path.write_bytes(leaf.cert_pem + leaf.key_pem)
            path.chmod(0o600)
            self.context.load_cert_chain(str(path))
        super().__init__(address, _Handler)


@contextlib.contextmanager
def tls_servers(
    servers: dict[str, tuple[str, Leaf]], port: int = 0
) -> Iterator[dict[str, tuple[str, int]]]:
    """One TLS identity server per name on its address (and `port`, or one the system
    picks); yields each one's endpoint."""
    running = [TlsIdentityServer(name, (ip, port), leaf) for name, (ip, leaf) in servers.items()]
    threads = [threading.Thread(target=s.serve_forever, args=(0.05,)) for s in running]
    for t in threads:
        t.start()
    try:
        yield {s.name: (s.server_address[0], s.server_address[1]) for s in running}  # type: ignore[misc]
    finally:
        for s in running:
            s.shutdown()
            s.server_close()
        for t in threads:
            t.join(5)


def client_context(ca: TestCA) -> ssl.SSLContext:
    """Trusts `ca` only; the name is checked by the caller (a re-pointed name reaches a
    backend whose certificate is another name's)."""
    ctx = ssl.create_default_context(cafile=None, cadata=ca.pem.decode())
    ctx.check_hostname = False
    return ctx


def tls_hello(
    ctx: ssl.SSLContext,
    address: tuple[str, int],
    sni: str | None,
    source: str = "",
    header: bytes = b"",
    timeout: float = 5.0,
) -> tuple[str, str] | None:
    """One connection: (the certificate's CN, what the server said), or None when the
    connection was closed before the handshake ended."""
    sock = socket.create_connection(address, timeout, (source, 0) if source else None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.sendall(header)
        with ctx.wrap_socket(sock, server_hostname=sni) as tls:
            der = tls.getpeercert(binary_form=True)
            said = tls.recv(100).decode().strip()
    except (ssl.SSLError, ConnectionError):
        return None
    finally:
        sock.close()
    assert der is not None
    cert = x509.load_der_x509_certificate(der)
    cn = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    return str(cn), said
