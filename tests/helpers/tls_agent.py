"""TLS termination on the agent side, for tests and benchmarks: Certificate messages and
HTTPS listeners built by hand (as the control plane's encoder fills them), and what a
client is served (the certificate's serial for an SNI, a request over TLS)."""

from __future__ import annotations

import hashlib
import http.client
import socket
import ssl

from cryptography import x509

from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.tls_certs import Leaf


def certificate(name: str, leaf: Leaf, *, key_pem: bytes | None = None) -> pb.Certificate:
    """The Certificate `<namespace>_<secret>` of a leaf: chain, then key; fingerprint
    SHA-256 of the PEM (`key_pem` replaces the leaf's own key)."""
    pem = leaf.cert_pem + (key_pem if key_pem is not None else leaf.key_pem)
    namespace, _, secret = name.partition("_")
    return pb.Certificate(
        name=name,
        secret=f"{namespace}/{secret}",
        fingerprint=hashlib.sha256(pem).hexdigest(),
        serial=leaf.serial_hex,
        not_after=leaf.cert.not_valid_after_utc.isoformat(),
        dns_names=[
            n.value
            for n in leaf.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            if isinstance(n, x509.DNSName)
        ],
        pem=pem,
    )


def https_listener(
    port: int, bindings: list[tuple[str, list[str]]], rules: list[pb.RouteRule] | None = None
) -> pb.HttpListener:
    """A listener terminating TLS: (certificate name, SNI filters) in crt-list order."""
    listener = pb.HttpListener(port=port, rules=rules or [])
    for name, hosts in bindings:
        listener.tls.certificates.add(certificate=name, hostnames=hosts)
    return listener


def client_context() -> ssl.SSLContext:
    """A client that takes any certificate (the tests look at which one, not trust it);
    no CA store loaded (that alone takes tens of milliseconds)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def served_serial(ip: str, port: int, sni: str | None, timeout: float = 5.0) -> str:
    """The serial (hex) of the certificate a handshake with this SNI (None: none) gets."""
    raw = socket.create_connection((ip, port), timeout=timeout)
    with client_context().wrap_socket(raw, server_hostname=sni) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return format(x509.load_der_x509_certificate(der).serial_number, "x")


def https_connection(
    ip: str, port: int, sni: str, timeout: float = 5.0
) -> http.client.HTTPSConnection:
    """A keep-alive HTTPS connection sending `sni` (the Host header is the caller's)."""
    conn = http.client.HTTPSConnection(sni, port, timeout=timeout, context=client_context())
    conn.sock = client_context().wrap_socket(
        socket.create_connection((ip, port), timeout=timeout), server_hostname=sni
    )
    return conn


def peer_serial(conn: http.client.HTTPSConnection) -> str:
    """The serial of the certificate an open HTTPS connection was made with."""
    sock = conn.sock
    assert isinstance(sock, ssl.SSLSocket)
    der = sock.getpeercert(binary_form=True)
    assert der is not None
    return format(x509.load_der_x509_certificate(der).serial_number, "x")
