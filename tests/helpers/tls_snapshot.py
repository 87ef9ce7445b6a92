"""A workload's computed TLS parts made by hand from test certificates: the `Certificate`
the computation would derive from a kubernetes.io/tls Secret (pem = chain then key,
fingerprint = SHA-256 of pem) and a snapshot that serves it on an HTTPS listener, for the
tests of what travels and what inspection shows."""

from __future__ import annotations

import dataclasses
import hashlib

from cryptography import x509

from controlplane.snapshot import (
    Certificate,
    CertificateBinding,
    HttpListener,
    RoutePath,
    RouteRule,
    SniRoute,
    TcpFrontend,
    TlsPassthroughListener,
    WeightedBackend,
    WorkloadSnapshot,
)
from tests.helpers.tls_certs import Leaf


def certificate_of(leaf: Leaf, secret: str = "default/web-tls") -> Certificate:
    """The contract's Certificate of a Secret holding `leaf` (name "<ns>_<secret>")."""
    pem = leaf.cert_pem + leaf.key_pem
    san = leaf.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    names = tuple(san.get_values_for_type(x509.DNSName))
    return Certificate(
        name=secret.replace("/", "_", 1),
        secret=secret,
        fingerprint=hashlib.sha256(pem).hexdigest(),
        serial=leaf.serial_hex,
        not_after=leaf.cert.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ"),
        dns_names=names,
        pem=pem,
    )


def with_tls(
    snapshot: WorkloadSnapshot,
    certificates: tuple[Certificate, ...],
    backend: str,
    https_port: int = 8443,
    passthrough_port: int = 9443,
) -> WorkloadSnapshot:
    """`snapshot` serving `backend` on an HTTPS listener presenting `certificates` (the
    first the default), a passthrough listener and a TCPRoute frontend, all with PROXY
    protocol."""
    rule = RouteRule(
        source="HTTPRoute default/web rule 0 match 0",
        hostnames=(),
        path=RoutePath("PathPrefix", "/"),
        backends=(WeightedBackend(backend, 1),),
    )
    https = HttpListener(
        https_port,
        (rule,),
        tls=tuple(CertificateBinding(c.name, c.dns_names) for c in certificates),
        accept_proxy=True,
    )
    passthrough = TlsPassthroughListener(
        passthrough_port,
        (SniRoute("TLSRoute default/db rule 0", ("db.example",), (WeightedBackend(backend, 1),)),),
        accept_proxy=True,
    )
    tcp = TcpFrontend(5432, backend, source="TCPRoute default/pg rule 0", accept_proxy=True)
    return dataclasses.replace(
        snapshot,
        http_listeners=(*snapshot.http_listeners, https),
        certificates=tuple(sorted(certificates, key=lambda c: c.name)),
        tls_listeners=(passthrough,),
        tcp_frontends=(*snapshot.tcp_frontends, tcp),
    )
