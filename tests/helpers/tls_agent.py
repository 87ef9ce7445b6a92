"""TLS termination on the agent side, for tests and benchmarks: Certificate messages and
HTTPS listeners built by hand (as the control plane's encoder fills them), and what a
client is served (the certificate's serial for an SNI, a request over TLS)."""

from __future__ import annotations

import datetime as dt
import hashlib
import http.client
import socket
import ssl

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

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


def weak_rsa_certificate(name: str, host: str) -> pb.Certificate:
    """A self-signed certificate with a 1,024-bit RSA key: it parses, its key matches and it
    is valid, but the OpenSSL HAProxy runs with refuses so small a key (only `haproxy -c`
    or a `commit ssl cert` finds out)."""
    key = rsa.generate_private_key(65537, 1024)
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM) + key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    namespace, _, secret = name.partition("_")
    return pb.Certificate(
        name=name,
        secret=f"{namespace}/{secret}",
        fingerprint=hashlib.sha256(pem).hexdigest(),
        serial=format(cert.serial_number, "x"),
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
