"""Deltas between two encoded versions (docs/design.md, "The agent stream"): the parts
join to the payload, a delta parses as the SnapshotDelta the contract describes, and
applying it to the old snapshot gives the new one, hash for hash."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.compute import Computer
from controlplane.publish import Encoder
from controlplane.publish.content import SnapshotContent
from controlplane.publish.delta import changed_backends, delta_bytes, server_message_with_delta
from nodeagent.held import Held
from peerplane import parts
from peerplane.parts import ContentParts
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.builders import DEFAULT_PODS, WORKLOAD, cluster, endpoint_slice, service
from tests.helpers.delta_agent import apply_delta, digest

W = "haproxy-system/DaemonSet/haproxy"


def backend(name: str, *addresses: str) -> pb.Backend:
    slots = [
        pb.Slot(index=i, server_name=f"SRV_{i}", address=a, port=80, enabled=True)
        for i, a in enumerate(addresses, start=1)
    ]
    return pb.Backend(name=name, service=f"default/{name}", mode="http", slots=slots)


def message(
    backends: list[pb.Backend],
    peers: tuple[str, ...] = ("haproxy-a",),
    hosts: tuple[str, ...] = (),
    warning: str = "",
) -> pb.Snapshot:
    snap = pb.Snapshot(workload=W, backends=backends)
    snap.peers.name = "localinstance"
    snap.peers.port = 10000
    for i, name in enumerate(peers, start=1):
        snap.peers.peers.add(name=name, address=f"127.0.1.{i}", port=10000)
    if hosts:
        snap.http_frontend.port = 80
        for host in hosts:
            snap.http_frontend.routes.add(host=host, backend=backends[0].name)
    snap.tcp_frontends.add(port=5432, backend=backends[-1].name)
    if warning:
        snap.warnings.add(object="cm", key="k", value=warning, reason="bad")
    return snap


def delta_of(old: SnapshotContent, new: SnapshotContent, version: int = 2) -> pb.SnapshotDelta:
    raw = delta_bytes(old.parts, new.parts, old.content_hash, new.content_hash, version)
    return pb.SnapshotDelta.FromString(raw)


def test_parts_join_to_the_payload() -> None:
    snap = message([backend("a", "127.0.0.1"), backend("b")], hosts=("a.example",), warning="x")
    content = SnapshotContent.from_message(snap)
    assert content.parts.join() == content.payload
    assert content.payload == snap.SerializeToString(deterministic=True)
    assert list(content.parts.backends) == ["a", "b"]


def test_a_message_naming_a_backend_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="backend 'a' twice"):
        ContentParts.of_message(message([backend("a"), backend("a")]))


def test_delta_carries_changed_backends_whole_removed_names_and_only_changed_parts() -> None:
    old = SnapshotContent.from_message(
        message(
            [backend("a", "127.0.0.1"), backend("b", "127.0.0.2"), backend("c", "127.0.0.3")],
            hosts=("a.example",),
            warning="w",
        )
    )
    new_message = message(
        [backend("a", "127.0.0.1"), backend("b", "127.0.0.9"), backend("d", "127.0.0.4")],
        hosts=("a.example", "b.example"),
        warning="w",
    )
    new = SnapshotContent.from_message(new_message)
    delta = delta_of(old, new, version=7)
    assert delta.workload == W
    assert delta.version == 7
    assert (delta.from_content_hash, delta.to_content_hash) == (
        old.content_hash,
        new.content_hash,
    )
    assert list(delta.backends) == [new_message.backends[1], new_message.backends[2]]
    assert list(delta.removed_backends) == ["c"]
    assert (delta.peers_changed, delta.frontends_changed, delta.warnings_changed) == (
        False,
        True,
        False,
    )
    assert not delta.HasField("peers")
    assert not delta.warnings
    assert delta.http_frontend == new_message.http_frontend
    assert list(delta.tcp_frontends) == list(new_message.tcp_frontends)

    held = old.message(version=1)
    assert apply_delta(held, delta) == new.message(version=7)


def test_peers_and_warnings_are_sent_when_they_change_and_cleared_frontends_flagged() -> None:
    old = SnapshotContent.from_message(message([backend("a")], hosts=("a.example",)))
    new_message = message([backend("a")], peers=("haproxy-a", "haproxy-b"), warning="w")
    new = SnapshotContent.from_message(new_message)
    delta = delta_of(old, new)
    assert (delta.peers_changed, delta.frontends_changed, delta.warnings_changed) == (
        True,
        True,
        True,
    )
    assert delta.peers == new_message.peers
    assert not delta.HasField("http_frontend")  # the HTTP frontend is gone
    assert list(delta.warnings) == list(new_message.warnings)
    assert not delta.backends and not delta.removed_backends
    assert apply_delta(old.message(1), delta) == new.message(2)


def certificate(name: str, pem: bytes) -> pb.Certificate:
    return pb.Certificate(
        name=name, secret=name.replace("_", "/", 1), fingerprint=digest_of(pem), pem=pem
    )


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_a_rotated_certificate_travels_alone_and_a_removed_one_by_name() -> None:
    """Certificates are parts like backends: a rotation sends that certificate only, a
    removal its name; the TLS listeners travel with the frontends."""
    one = message([backend("a", "127.0.0.1")], hosts=("a.example",))
    one.certificates.extend([certificate("default_a", b"A1"), certificate("default_b", b"B1")])
    one.tls_listeners.add(port=8443).routes.add(
        source="TLSRoute default/db rule 0",
        hostnames=["db.example"],
        backends=[pb.WeightedBackend(backend="a", weight=1)],
    )
    old = SnapshotContent.from_message(one)
    assert old.parts.join() == one.SerializeToString(deterministic=True)
    two = pb.Snapshot()
    two.CopyFrom(one)
    del two.certificates[:]
    two.certificates.extend([certificate("default_a", b"A2"), certificate("default_c", b"C1")])
    new = SnapshotContent.from_message(two)
    delta = delta_of(old, new, version=3)
    assert [c.name for c in delta.certificates] == ["default_a", "default_c"]
    assert list(delta.removed_certificates) == ["default_b"]
    assert not delta.frontends_changed and not delta.backends
    assert apply_delta(old.message(1), delta) == new.message(3)
    held, change = Held.from_snapshot(old.message(1)).apply(delta)
    assert held.content_hash == new.content_hash == held.computed_hash()
    assert change.certificates == {"default_a", "default_c"}
    assert change.removed_certificates == {"default_b"} and not change.frontends
    assert held.certificates["default_a"].pem == b"A2"
    three = pb.Snapshot()
    three.CopyFrom(two)
    three.tls_listeners[0].routes[0].hostnames.append("*.db.example")
    newer = SnapshotContent.from_message(three)
    delta = delta_of(new, newer, version=4)
    assert delta.frontends_changed and list(delta.tls_listeners) == list(three.tls_listeners)
    assert not delta.certificates and not delta.removed_certificates
    later, change = held.apply(delta)
    assert change.frontends and later.tls_listeners == tuple(three.tls_listeners)
    assert later.computed_hash() == newer.content_hash


def test_delta_in_a_server_message_takes_a_nonce_prefix() -> None:
    old = SnapshotContent.from_message(message([backend("a")]))
    new = SnapshotContent.from_message(message([backend("a", "127.0.0.1")]))
    raw = server_message_with_delta(
        delta_bytes(old.parts, new.parts, old.content_hash, new.content_hash, 3)
    )
    parsed = pb.ServerMessage.FromString(pb.ServerMessage(nonce="5").SerializeToString() + raw)
    assert parsed.nonce == "5"
    assert parsed.WhichOneof("message") == "delta"
    assert parsed.delta.to_content_hash == new.content_hash


def test_an_incremental_change_shares_unchanged_backend_bytes_and_sends_one_backend() -> None:
    """The encoder hands the same bytes object for an unchanged backend, so the delta
    finds it by identity; only the changed Service's backend is in the delta."""
    computer, encoder = Computer(), Encoder()
    services = [service(name) for name in ("a", "b", "c")]
    slices = [endpoint_slice(name, ["127.0.0.1"]) for name in ("a", "b", "c")]
    first = computer.compute(cluster(services, slices, DEFAULT_PODS), {})
    old = encoder.encode(first.workloads)[WORKLOAD]
    slices[1] = endpoint_slice("b", ["127.0.0.1", "127.0.0.2"])
    second = computer.compute(cluster(services, slices, DEFAULT_PODS), first.assignment)
    new = encoder.encode(second.workloads)[WORKLOAD]
    assert new.parts.backends["default_a_http"] is old.parts.backends["default_a_http"]
    changed, removed = changed_backends(old.parts, new.parts)
    assert changed == [new.parts.backends["default_b_http"]]
    assert removed == []
    delta = delta_of(old, new)
    assert [b.name for b in delta.backends] == ["default_b_http"]
    assert apply_delta(old.message(1), delta) == new.message(2)
    assert digest(new.message(2)) == new.content_hash


addresses = st.sets(st.integers(1, 30).map(lambda i: f"127.0.6.{i}"), max_size=6)
names = st.sets(st.sampled_from(["a", "b", "c", "d"]), min_size=1)


@settings(max_examples=40, deadline=None)
@given(history=st.lists(st.tuples(names, addresses, st.booleans()), min_size=2, max_size=6))
def test_every_delta_rebuilds_the_next_snapshot(
    history: list[tuple[set[str], set[str], bool]],
) -> None:
    """Over computed versions (Services appearing, disappearing, changing endpoints and
    hosts), each delta applied to the previous snapshot gives the next, hash for hash."""
    computer, encoder = Computer(), Encoder()
    previous: dict = {}  # type: ignore[type-arg]
    held: pb.Snapshot | None = None
    old: SnapshotContent | None = None
    for version, (present, endpoints, hosts) in enumerate(history, start=1):
        notes = {"haproxy.org/hosts": "x.example"} if hosts else {}
        services = [service(n, annotations=notes if n == "a" else None) for n in sorted(present)]
        slices = [endpoint_slice(n, sorted(endpoints)) for n in sorted(present)]
        result = computer.compute(cluster(services, slices, DEFAULT_PODS), previous)
        previous = dict(result.assignment)
        new = encoder.encode(result.workloads)[WORKLOAD]
        if old is not None and held is not None:
            held = apply_delta(held, delta_of(old, new, version))
        else:
            held = new.message(version)
        assert held == new.message(version)
        old = new


def test_the_single_parts_digest_cache_keeps_at_most_16_mib_of_replaced_parts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each version's new frontends part (1 MiB here) is cached by identity, and so kept
    alive after no version holds it: 100 versions keep 16 MiB at most, not 100."""
    cache: dict[int, tuple[bytes, bytes]] = {}
    monkeypatch.setattr(parts, "_SINGLE", cache)
    monkeypatch.setattr(parts, "_single_bytes", 0, raising=False)
    for n in range(100):
        part = bytes([n]) * (1 << 20)
        assert parts.single_digest(part) == hashlib.sha256(part).digest()
        assert sum(len(kept) for kept, _ in cache.values()) <= 16 << 20
