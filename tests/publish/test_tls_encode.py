"""TLS on the wire: certificates (field 15), TLS passthrough listeners (16), the HTTPS
listener's crt-list and PROXY protocol flags, and a TCPRoute frontend's source, byte for
byte as protobuf's deterministic serialization; an unchanged certificate is never encoded
again and a rotated one is encoded, and sent in a delta, alone."""

from __future__ import annotations

import dataclasses

from controlplane.compute import Computer
from controlplane.publish import Encoder
from controlplane.publish.content import SnapshotContent
from controlplane.publish.delta import delta_bytes
from controlplane.snapshot import WorkloadSnapshot
from nodeagent.held import Held
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.builders import DEFAULT_PODS, WORKLOAD, cluster, endpoint_slice, service
from tests.helpers.delta_agent import apply_delta
from tests.helpers.tls_certs import make_ca
from tests.helpers.tls_snapshot import certificate_of, with_tls

BACKEND = "default_web_http"
CA = make_ca()
WEB = certificate_of(CA.issue("web.example", "www.example"), "default/web-tls")
API = certificate_of(CA.issue("api.example"), "shop/api-tls")


def base(endpoints: tuple[str, ...] = ("10.0.0.1",)) -> WorkloadSnapshot:
    state = cluster([service("web")], [endpoint_slice("web", endpoints)], DEFAULT_PODS)
    return Computer().compute(state, {}).workloads[WORKLOAD]


def test_tls_fields_are_encoded_as_the_contract_says() -> None:
    snapshot = with_tls(base(), (WEB, API), BACKEND)
    content = Encoder().encode({WORKLOAD: snapshot})[WORKLOAD]
    message = content.message()
    # Sorted by name: "default_web-tls" before "shop_api-tls".
    assert [c.name for c in message.certificates] == ["default_web-tls", "shop_api-tls"]
    web = message.certificates[0]
    assert web == pb.Certificate(
        name="default_web-tls",
        secret="default/web-tls",
        fingerprint=WEB.fingerprint,
        serial=WEB.serial,
        not_after=WEB.not_after,
        dns_names=["web.example", "www.example"],
        pem=WEB.pem,
    )
    (https,) = [x for x in message.http_listeners if x.port == 8443]
    assert https.accept_proxy
    assert [(b.certificate, list(b.hostnames)) for b in https.tls.certificates] == [
        ("default_web-tls", ["web.example", "www.example"]),
        ("shop_api-tls", ["api.example"]),
    ]
    (passthrough,) = message.tls_listeners
    assert passthrough.port == 9443 and passthrough.accept_proxy
    assert list(passthrough.routes[0].hostnames) == ["db.example"]
    assert passthrough.routes[0].backends[0].backend == BACKEND
    (tcp,) = message.tcp_frontends
    assert (tcp.source, tcp.accept_proxy) == ("TCPRoute default/pg rule 0", True)
    # The payload is the whole message's deterministic serialization, hash for hash.
    message.ClearField("version")
    message.ClearField("content_hash")
    assert content.payload == message.SerializeToString(deterministic=True)
    assert SnapshotContent.from_message(message).content_hash == content.content_hash


def test_certificates_are_encoded_in_name_order_whatever_order_they_come_in() -> None:
    snapshot = dataclasses.replace(with_tls(base(), (WEB, API), BACKEND), certificates=(API, WEB))
    content = Encoder().encode({WORKLOAD: snapshot})[WORKLOAD]
    assert list(content.parts.certificates) == ["default_web-tls", "shop_api-tls"]
    assert SnapshotContent.from_message(content.message()).content_hash == content.content_hash


def test_a_plain_listener_has_no_tls_and_a_service_tcp_port_no_source() -> None:
    snapshot = base()
    content = Encoder().encode({WORKLOAD: snapshot})[WORKLOAD]
    assert content.parts.certificates == {} and content.parts.tls_listeners == b""
    assert not content.message().certificates


def test_an_unchanged_certificate_is_reused_and_a_rotated_one_travels_alone() -> None:
    encoder = Encoder()
    first = with_tls(base(), (WEB, API), BACKEND)
    old = encoder.encode({WORKLOAD: first})[WORKLOAD]
    assert encoder.encoded_certificates == 2
    # An endpoint change: the same certificate and listener objects, nothing re-encoded.
    second = dataclasses.replace(
        with_tls(base(("10.0.0.1", "10.0.0.2")), (WEB, API), BACKEND),
        certificates=first.certificates,
        tls_listeners=first.tls_listeners,
    )
    same = encoder.encode({WORKLOAD: second})[WORKLOAD]
    assert encoder.encoded_certificates == 0
    assert same.parts.certificates is old.parts.certificates
    assert same.parts.tls_listeners is old.parts.tls_listeners
    # The web Secret renewed: a new tuple holding API's same object and WEB's successor.
    renewed = certificate_of(CA.issue("web.example", "www.example"), "default/web-tls")
    third = dataclasses.replace(second, certificates=(renewed, API))
    new = encoder.encode({WORKLOAD: third})[WORKLOAD]
    assert encoder.encoded_certificates == 1
    assert new.parts.certificates["shop_api-tls"] is same.parts.certificates["shop_api-tls"]
    delta = pb.SnapshotDelta.FromString(
        delta_bytes(same.parts, new.parts, same.content_hash, new.content_hash, 3)
    )
    assert [c.name for c in delta.certificates] == ["default_web-tls"]
    assert delta.certificates[0].fingerprint == renewed.fingerprint
    assert not delta.removed_certificates and not delta.backends
    assert not delta.frontends_changed and not delta.peers_changed
    assert apply_delta(same.message(2), delta) == new.message(3)
    held, change = Held.from_snapshot(same.message(2)).apply(delta)
    assert change.certificates == {"default_web-tls"} and not change.frontends
    assert held.computed_hash() == new.content_hash


def test_a_removed_certificate_is_sent_by_name_with_its_listener_change() -> None:
    encoder = Encoder()
    old = encoder.encode({WORKLOAD: with_tls(base(), (WEB, API), BACKEND)})[WORKLOAD]
    new = encoder.encode({WORKLOAD: with_tls(base(), (WEB,), BACKEND)})[WORKLOAD]
    delta = pb.SnapshotDelta.FromString(
        delta_bytes(old.parts, new.parts, old.content_hash, new.content_hash, 2)
    )
    assert list(delta.removed_certificates) == ["shop_api-tls"] and not delta.certificates
    assert delta.frontends_changed  # the crt-list lost its second line
    assert apply_delta(old.message(1), delta) == new.message(2)
