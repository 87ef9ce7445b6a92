"""Each part of a workload's snapshot in its wire form: a backend's and a certificate's
framed entry, the peers, the frontends, a listener's fields after its rules, a route rule,
the TLS passthrough listeners and the warnings, each deterministic, as protobuf would
serialize it (docs/design.md, "Architecture").

Pure, and apart from the encoder (encode.py) for that: the encoder decides which parts it
can reuse from the last encoding and joins them; these only say how each part is written.
"""

from __future__ import annotations

from collections.abc import Sequence

from controlplane.publish import wire
from controlplane.publish.encode_filters import encode_filters
from controlplane.snapshot import (
    BackendSpec,
    Certificate,
    CertificateBinding,
    HttpListener,
    RejectedInput,
    RouteRule,
    TlsPassthroughListener,
    WeightedBackend,
    WorkloadSnapshot,
)
from peerplane import protowire
from peerplane.parts import framed_certificate, tls_listeners_part
from peerplane.runtime.untrusted import redact_pem
from peerplane.v1 import peerplane_pb2 as pb

PATH_TYPES = {"PathPrefix": pb.PathMatch.PATH_PREFIX, "Exact": pb.PathMatch.EXACT}


def rejected_input(rejection: RejectedInput) -> pb.RejectedInput:
    """A warning as the snapshot carries it (and GetSnapshot shows it): a value or reason
    quoting a Secret's key shows "[PEM removed]" instead."""
    return pb.RejectedInput(
        object=rejection.object,
        key=rejection.key,
        value=redact_pem(rejection.value),
        reason=redact_pem(rejection.reason),
    )


def _warnings(rejections: Sequence[RejectedInput]) -> bytes:
    """Backend `warnings` entries (field 10: after the slots, before the check)."""
    if not rejections:
        return b""
    return pb.Backend(warnings=[rejected_input(r) for r in rejections]).SerializeToString()


def backend_bytes(spec: BackendSpec) -> bytes:
    """The `Snapshot.backends` entry of `spec`: framing, fields 1..9 (slots encoded
    directly), warnings, check, session persistence, protocol (field 15), the spare
    section it runs in, whether it is a spare."""
    head = pb.Backend(
        name=spec.name,
        service=spec.service,
        service_port=spec.service_port,
        mode=spec.mode,
        balance=spec.balance,
        balance_argument=spec.balance_argument,
        hash_type=spec.hash_type,
    )
    if spec.persistence is not None:
        head.persistence.table_size = spec.persistence.table_size
        head.persistence.expire_ms = spec.persistence.expire_ms
    parts = [head.SerializeToString(deterministic=True)]
    slots = spec.slots
    by_slot = {slot: endpoint for endpoint, slot in slots.slots.items()}
    for index in range(1, slots.count + 1):
        endpoint = by_slot.get(index)
        if endpoint is None:
            parts.append(wire.free_slot(index))
        else:
            parts.append(wire.used_slot(index, endpoint[0], endpoint[1]))
    parts.append(_warnings(spec.warnings))
    check = spec.check
    if check is not None:
        parts.append(wire.health_check(check.interval_ms, check.rise, check.fall, check.http_path))
    parts.append(_session(spec))
    if spec.protocol:
        parts.append(pb.Backend(protocol=spec.protocol).SerializeToString())
    if slots.spare or spec.spare:  # fields 17 and 18, in field order after the rest
        tail = pb.Backend(section=slots.spare, spare=spec.spare)
        parts.append(tail.SerializeToString(deterministic=True))
    return protowire.length_delimited(wire.SNAPSHOT_BACKENDS, b"".join(parts))


def _session(spec: BackendSpec) -> bytes:
    """Backend `session_cookie` and `session_header` (fields 12 and 13, after the check)."""
    cookie, header = spec.session_cookie, spec.session_header
    if cookie is None and header is None:
        return b""
    tail = pb.Backend()
    if cookie is not None:
        tail.session_cookie.name = cookie.name
        tail.session_cookie.max_age_s = cookie.max_age_s
        tail.session_cookie.max_life_s = cookie.max_life_s
        tail.session_cookie.max_idle_s = cookie.max_idle_s
    if header is not None:
        tail.session_header.name = header.name
        tail.session_header.table_size = header.table_size
        tail.session_header.expire_ms = header.expire_ms
    return tail.SerializeToString(deterministic=True)


def peers_bytes(snapshot: WorkloadSnapshot) -> bytes:
    """Field 4: the peers section."""
    head = pb.Snapshot()
    section = snapshot.peers
    head.peers.name = section.name
    head.peers.port = section.port
    for peer in section.peers:
        head.peers.peers.add(name=peer.name, address=peer.address, port=peer.port)
    return head.SerializeToString(deterministic=True)


def frontends_bytes(snapshot: WorkloadSnapshot) -> bytes:
    """Fields 6 and 7: the HTTP and TCP frontends."""
    tail = pb.Snapshot()
    http = snapshot.http_frontend
    if http is not None:
        tail.http_frontend.port = http.port
        for route in http.routes:
            tail.http_frontend.routes.add(host=route.host, backend=route.backend)
    for frontend in snapshot.tcp_frontends:
        tail.tcp_frontends.add(
            port=frontend.port,
            backend=frontend.backend,
            source=frontend.source,
            accept_proxy=frontend.accept_proxy,
        )
    return tail.SerializeToString(deterministic=True)


def route_rule(rule: RouteRule) -> pb.RouteRule:
    """One rule as the contract's message."""
    message = pb.RouteRule(
        source=rule.source,
        hostnames=rule.hostnames,
        method=rule.method,
        headers=[pb.NameValue(name=n, value=v) for n, v in rule.headers],
        query_params=[pb.NameValue(name=n, value=v) for n, v in rule.query_params],
        backends=[pb.WeightedBackend(backend=b.backend, weight=b.weight) for b in rule.backends],
        single_label_wildcards=rule.single_label_wildcards,
    )
    if rule.path is not None:
        message.path.type = PATH_TYPES[rule.path.type]
        message.path.value = rule.path.value
    encode_filters(rule.filters, message)
    return message


def listener_tail(listener: HttpListener) -> bytes:
    """A listener's fields after its rules (3 to 7), deterministic: its serialization is
    its port, then these (contract 2: its rules travel in route groups)."""
    tail = pb.HttpListener(
        default_backend=listener.default_backend,
        tls=tls_termination(listener.tls, listener.strict_sni),
        accept_proxy=listener.accept_proxy,
        closed_hosts=listener.closed_hosts,
        address=listener.address,
    )
    return tail.SerializeToString(deterministic=True)


def tls_termination(
    bindings: tuple[CertificateBinding, ...], strict_sni: bool = False
) -> pb.TlsTermination | None:
    """A listener's crt-list (the first binding the default certificate unless
    `strict_sni`); None: plain HTTP."""
    if not bindings:
        return None
    return pb.TlsTermination(
        certificates=[
            pb.CertificateBinding(certificate=b.certificate, hostnames=b.hostnames)
            for b in bindings
        ],
        strict_sni=strict_sni,
    )


def certificate_bytes(certificate: Certificate) -> bytes:
    """The `Snapshot.certificates` entry of `certificate` (framed, deterministic)."""
    return framed_certificate(
        pb.Certificate(
            name=certificate.name,
            secret=certificate.secret,
            fingerprint=certificate.fingerprint,
            serial=certificate.serial,
            not_after=certificate.not_after,
            dns_names=certificate.dns_names,
            pem=certificate.pem,
        )
    )


def _weighted(backends: tuple[WeightedBackend, ...]) -> list[pb.WeightedBackend]:
    return [pb.WeightedBackend(backend=b.backend, weight=b.weight) for b in backends]


def tls_listener(listener: TlsPassthroughListener) -> pb.TlsPassthroughListener:
    return pb.TlsPassthroughListener(
        port=listener.port,
        routes=[
            pb.SniRoute(
                source=route.source, hostnames=route.hostnames, backends=_weighted(route.backends)
            )
            for route in listener.routes
        ],
        accept_proxy=listener.accept_proxy,
    )


def tls_listeners_bytes(snapshot: WorkloadSnapshot) -> bytes:
    """Field 16: the TLS passthrough listeners (`peerplane.parts.tls_listeners_part`)."""
    return tls_listeners_part([tls_listener(listener) for listener in snapshot.tls_listeners])


def snapshot_warnings_bytes(snapshot: WorkloadSnapshot) -> bytes:
    """Field 8: the snapshot's own warnings."""
    tail = pb.Snapshot(warnings=[rejected_input(r) for r in snapshot.warnings])
    return tail.SerializeToString(deterministic=True)
