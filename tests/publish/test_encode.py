"""The encoder: hand-assembled snapshot bytes equal protobuf's own deterministic
serialization, the incremental `Computer` gives exactly what a fresh computation gives,
and an `Encoder` encodes again only the backends that changed (docs/design.md,
"Architecture")."""

from __future__ import annotations

import dataclasses
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from immutables import Map

from controlplane.compute import Computer, compute
from controlplane.model import ServicePort
from controlplane.publish import Encoder, encode, wire
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.builders import (
    DEFAULT_PODS,
    WORKLOAD,
    cluster,
    endpoint_slice,
    haproxy_pod,
    service,
)
from tests.helpers.builders import settings as settings_map
from tests.helpers.delta_agent import digest
from tests.helpers.route_builders import gateway, prefix_rule, route, state, to


def rich_state():  # type: ignore[no-untyped-def]
    services = [
        service(
            "a",
            annotations={
                "haproxy.org/hosts": "a.example.com",
                "haproxy.org/source-ip-persistence": "true",
                "haproxy.org/load-balance": "nonsense",
            },
        ),
        service(
            "b",
            created="2026-02-01T00:00:00Z",
            annotations={"haproxy.org/hosts": "a.example.com,b.example.com"},
        ),
        service("c", ports=[("pg", 5432)], annotations={"haproxy.org/tcp-port": "5432"}),
    ]
    slices = [
        endpoint_slice("a", ["127.0.0.3", "127.0.0.1", "::1"]),
        endpoint_slice("b", ["127.0.0.7"]),
        endpoint_slice("c", ["127.0.0.9"], port_name="pg", port=5433),
    ]
    return cluster(services, slices, DEFAULT_PODS, config=settings_map(**{"hash-type": "x"}))


def test_payload_is_the_deterministic_serialization() -> None:
    content = encode(compute(rich_state(), {}).workloads)[WORKLOAD]
    message = content.message()
    assert message.backends[0].warnings  # warnings appended after slots round-trip
    assert message.warnings
    message.content_hash = ""
    assert message.SerializeToString(deterministic=True) == content.payload
    assert digest(message) == content.content_hash  # contract 2, computed from protobuf


def test_versioned_bytes_parse_as_the_versioned_snapshot() -> None:
    content = encode(compute(rich_state(), {}).workloads)[WORKLOAD]
    raw = wire.snapshot_message(content.payload, 7, content.content_hash)
    nonce = pb.ServerMessage(nonce="n-1").SerializeToString()
    parsed = pb.ServerMessage.FromString(nonce + raw)
    assert parsed.nonce == "n-1"
    assert parsed.snapshot == content.message(version=7)


def test_message_returns_independent_copies() -> None:
    content = encode(compute(rich_state(), {}).workloads)[WORKLOAD]
    first = content.message()
    first.workload = "changed"
    assert content.message().workload == WORKLOAD


addresses = st.sets(st.integers(1, 40).map(lambda i: f"127.0.6.{i}"), max_size=12)


@settings(max_examples=40, deadline=None)
@given(history=st.lists(st.tuples(addresses, addresses, st.booleans()), min_size=1, max_size=8))
def test_incremental_equals_fresh(history: list[tuple[set[str], set[str], bool]]) -> None:
    computer = Computer()
    encoder = Encoder()
    previous: dict = {}  # type: ignore[type-arg]
    for a_endpoints, b_endpoints, persistence in history:
        services = [
            service("a", annotations={"haproxy.org/server-slots": "4"}),
            service("b", annotations={"haproxy.org/source-ip-persistence": str(persistence)}),
        ]
        state = cluster(
            services,
            [endpoint_slice("a", sorted(a_endpoints)), endpoint_slice("b", sorted(b_endpoints))],
            DEFAULT_PODS,
        )
        incremental = computer.compute(state, previous)
        fresh = compute(state, previous)
        assert incremental.workloads == fresh.workloads
        assert encoder.encode(incremental.workloads) == encode(fresh.workloads)
        assert dict(incremental.assignment) == dict(fresh.assignment)
        assert incremental.rejections == fresh.rejections
        previous = dict(incremental.assignment)


def test_unchanged_services_are_reused() -> None:
    computer = Computer()
    state = rich_state()
    first = computer.compute(state, {})
    assert computer.planned == 3
    again = computer.compute(state, first.assignment)
    assert computer.planned == 0
    assert again.workloads == first.workloads
    # A fresh ClusterState of equal objects: everything is checked, nothing re-planned.
    copied = type(state)(
        *(
            tuple(x) if isinstance(x, tuple) else x
            for x in (
                state.services,
                state.endpoint_slices,
                state.haproxy_pods,
                state.replica_sets,
                state.settings,
            )
        )
    )
    assert computer.compute(copied, dict(again.assignment)).workloads == first.workloads
    assert computer.planned == 0


def test_the_encoder_encodes_only_the_backends_that_changed() -> None:
    """Unchanged Services keep their `BackendSpec` objects, so their bytes are reused; the
    result still equals a fresh encoding of a fresh computation."""
    computer, encoder = Computer(), Encoder()
    services = [service(name) for name in ("a", "b", "c")]
    slices = [endpoint_slice(name, ["127.0.0.1"]) for name in ("a", "b", "c")]
    first = computer.compute(cluster(services, slices, DEFAULT_PODS), {})
    encoder.encode(first.workloads)
    assert encoder.encoded == 3
    slices[1] = endpoint_slice("b", ["127.0.0.1", "127.0.0.2"])
    state = cluster(services, slices, DEFAULT_PODS)
    second = computer.compute(state, first.assignment)
    contents = encoder.encode(second.workloads)
    assert encoder.encoded == 1
    assert contents == encode(compute(state, first.assignment).workloads)
    spec = second.workloads[WORKLOAD].backend("default_b_http")
    used, *free = spec.slot_list()[:2], *spec.slot_list()[2:]
    assert [(s.server_name, s.address, s.enabled) for s in used] == [
        ("SRV_1", "127.0.0.1", True),
        ("SRV_2", "127.0.0.2", True),
    ]
    assert free and not any(s.enabled or s.address for s in free)


def test_a_spec_seen_once_per_computation_is_encoded_once_for_every_workload() -> None:
    """Two workloads serving the same Service share its encoded backend."""
    pods = [
        haproxy_pod("haproxy-a", "127.0.1.1"),
        haproxy_pod("lb-a", "127.0.1.2", owner=("Deployment", "lb")),
    ]
    state = cluster([service("s")], [endpoint_slice("s", ["127.0.0.1"])], pods)
    result = compute(state, {})
    assert len(result.workloads) == 2
    encoder = Encoder()
    contents = encoder.encode(result.workloads)
    assert encoder.encoded == 1
    assert contents == encode(result.workloads)


def test_field_numbers_are_the_descriptors() -> None:
    """The wire helpers take field numbers from the generated descriptors: a free slot
    parses as the Slot protobuf builds."""
    backend = pb.Backend.FromString(wire.free_slot(3))
    assert list(backend.slots) == [pb.Slot(index=3, server_name="SRV_3")]
    used = pb.Backend.FromString(wire.used_slot(2, "::1", 8080))
    expected = pb.Slot(index=2, server_name="SRV_2", address="::1", port=8080, enabled=True)
    assert list(used.slots) == [expected]


def test_health_checks_follow_the_warnings_byte_for_byte() -> None:
    """Backend.check (field 11) comes after the warnings (10): on a plain backend, one with
    its own warnings, one that gains warnings per snapshot (a lost host) and one without
    checks, the hand-assembled bytes still equal protobuf's."""
    services = [
        service(
            "a",
            annotations={
                "haproxy.org/hosts": "a.example.com",
                "haproxy.org/check-http": "/healthz?deep=1",
                "haproxy.org/check-interval": "750ms",
                "haproxy.org/check-rise": "nonsense",
            },
        ),
        service(
            "b",
            created="2026-02-01T00:00:00Z",
            annotations={"haproxy.org/hosts": "a.example.com", "haproxy.org/check-fall": "9"},
        ),
        service("c", annotations={"haproxy.org/check": "false"}),
    ]
    slices = [endpoint_slice(name, ["127.0.0.1"]) for name in ("a", "b", "c")]
    state = cluster(services, slices, DEFAULT_PODS, config=settings_map(**{"check-rise": "4"}))
    content = encode(compute(state, {}).workloads)[WORKLOAD]
    message = content.message()
    got = {b.name: b for b in message.backends}
    a, b, c = got["default_a_http"], got["default_b_http"], got["default_c_http"]
    assert (a.check.interval_ms, a.check.rise, a.check.http_path) == (750, 4, "/healthz?deep=1")
    assert a.warnings and b.warnings  # a: its own rejection; b: the lost host
    assert (b.check.fall, b.check.rise) == (9, 4)
    assert not c.HasField("check")
    message.content_hash = ""
    assert message.SerializeToString(deterministic=True) == content.payload


def test_the_reconcile_fake_encodes_like_the_server_harness_snapshot() -> None:
    """The typed snapshot the reconcile tests' fake compute returns is, once encoded, the
    very snapshot the server tests build as a message."""
    from tests.helpers.server_fakes import workload_snapshot
    from tests.helpers.server_harness import W1, snapshot

    typed = workload_snapshot(W1, "10.0.0.1", "10.0.0.2")
    assert encode({W1: typed})[W1] == snapshot(W1, "10.0.0.1", "10.0.0.2")


def test_the_backend_protocol_is_encoded_last_as_field_15() -> None:
    """`Backend.protocol` (a port's appProtocol) after the warnings and the check: the
    payload stays the deterministic serialization."""
    shop = service("shop", annotations={"haproxy.org/load-balance": "nonsense"})
    shop = dataclasses.replace(
        shop, ports=(ServicePort("http", 80, app_protocol="kubernetes.io/h2c"),)
    )
    state = cluster([shop], [endpoint_slice("shop", ["127.0.0.1"])], DEFAULT_PODS)
    content = encode(compute(state, {}).workloads)[WORKLOAD]
    message = content.message()
    (found,) = message.backends
    assert (found.protocol, bool(found.warnings), found.HasField("check")) == ("h2", True, True)


def test_session_persistence_is_encoded_after_the_check_as_protobuf_would() -> None:
    """Backend fields 12 and 13 (session cookie, session header) follow the warnings and
    the check: the bytes are still the deterministic serialization."""
    cookie = {"sessionName": "s", "absoluteTimeout": "1h"}
    header = {"type": "Header", "sessionName": "X-Session"}
    routed = state(
        gateway(),
        route(
            "r",
            [
                prefix_rule("/a", [to("shop")], sessionPersistence=cookie),
                prefix_rule("/b", [to("catalog")], sessionPersistence=header),
            ],
        ),
        endpoint_slices=(endpoint_slice("shop", ["127.0.0.1"]),),
    )
    content = encode(compute(routed, {}).workloads)[WORKLOAD]
    message = content.message()
    got = {b.name: b for b in message.backends}
    shop, catalog = got["default_shop_http"], got["default_catalog_http"]
    assert (shop.session_cookie.name, shop.session_cookie.max_life_s) == ("s", 3600)
    assert shop.session_cookie.max_idle_s == 1800 and shop.check.rise
    assert (catalog.session_header.name, catalog.session_header.expire_ms) == (
        "X-Session",
        1_800_000,
    )
    message.content_hash = ""
    assert message.SerializeToString(deterministic=True) == content.payload


def test_the_backend_cache_keeps_only_the_current_specs_over_many_changes() -> None:
    """A replaced spec leaves the cache when its successor is encoded: the cache holds the
    backends served, not twice as many before a sweep (issue 33: at 8,000 Services the
    control plane's memory rose by the replaced specs for hours of endpoint changes)."""
    computer, encoder = Computer(), Encoder()
    names = [f"s{i}" for i in range(20)]
    services = [service(name) for name in names]
    slices = [endpoint_slice(name, ["127.0.0.1"]) for name in names]
    result = computer.compute(cluster(services, slices, DEFAULT_PODS), {})
    encoder.encode(result.workloads)
    sizes = []
    for change in range(200):
        index = change % len(names)
        address = "127.0.0.2" if (change // len(names)) % 2 == 0 else "127.0.0.1"
        slices[index] = endpoint_slice(names[index], [address])
        result = computer.compute(cluster(services, slices, DEFAULT_PODS), result.assignment)
        encoder.encode(result.workloads)
        sizes.append(encoder.cached_backends)
    assert max(sizes) == len(names)


def test_a_workload_sharing_a_retired_spec_is_still_encoded_right() -> None:
    """Two workloads share a Service's spec; when one of them replaces it first, the other
    still gets correct bytes (the retired spec is encoded again when needed)."""
    pods = [
        haproxy_pod("haproxy-a", "127.0.1.1"),
        haproxy_pod("lb-a", "127.0.1.2", owner=("Deployment", "lb")),
    ]
    state = cluster([service("s")], [endpoint_slice("s", ["127.0.0.1"])], pods)
    first = compute(state, {})
    encoder = Encoder()
    encoder.encode(first.workloads)
    keys = sorted(first.workloads)
    moved = compute(
        cluster([service("s")], [endpoint_slice("s", ["127.0.0.2"])], pods), first.assignment
    )
    mixed = {keys[0]: moved.workloads[keys[0]], keys[1]: first.workloads[keys[1]]}
    assert encoder.encode(mixed) == encode(mixed)
    fresh_names = {keys[0]: first.workloads[keys[0]], keys[1]: first.workloads[keys[1]]}
    assert encoder.encode(fresh_names) == encode(fresh_names)


def test_endpoint_changes_patch_persistent_maps_of_the_backends_and_keep_their_order() -> None:
    """A version whose specs were replaced in place holds its backends' bytes and digests
    in persistent maps patched from the last version's (copying two dicts of 8,000 entries
    per endpoint change was O(backends)), with their payload order beside them; the last
    version's maps are left as they were, and the content is a fresh encoding's."""
    computer, encoder = Computer(), Encoder()
    names = ("a", "b", "c", "d")
    services = [service(name) for name in names]
    slices = [endpoint_slice(name, ["127.0.0.1"]) for name in names]
    first = computer.compute(cluster(services, slices, DEFAULT_PODS), {})
    contents = [encoder.encode(first.workloads)[WORKLOAD]]
    assert isinstance(contents[0].parts.backends, dict)  # a whole encoding: dicts in order
    assignment = first.assignment
    for step, name in enumerate(("b", "d", "a"), start=2):
        slices[names.index(name)] = endpoint_slice(name, ["127.0.0.1", f"127.0.0.{step}"])
        state = cluster(services, slices, DEFAULT_PODS)
        result = computer.compute(state, assignment)
        assignment = result.assignment
        content = encoder.encode(result.workloads)[WORKLOAD]
        parts, last = content.parts, contents[-1].parts
        assert isinstance(parts.backends, Map) and isinstance(parts.backend_digests, Map)
        assert parts.backend_order == tuple(last.backend_order or last.backends)
        changed = [key for key in parts.backend_order if parts.backends[key] != last.backends[key]]
        assert changed == [f"default_{name}_http"]
        shared = [key for key in parts.backend_order if parts.backends[key] is last.backends[key]]
        assert len(shared) == len(names) - 1  # the others' bytes objects are the last's
        assert content == encode(result.workloads)[WORKLOAD]  # what a fresh encoder makes
        contents.append(content)
    for before, after in itertools.pairwise(contents):
        assert before.parts.backends is not after.parts.backends  # never edited in place


def test_an_endpoint_change_splices_the_joined_backend_digests_and_releases_the_last() -> None:
    """The content hash of a version whose specs were replaced in place reads the joined
    digests of the last version with the replaced ones put in, not a join of every
    backend's digest; the last version lets go of its joined digests (only the newest
    splices)."""
    computer, encoder = Computer(), Encoder()
    services = [service(name) for name in ("a", "b", "c")]
    slices = [endpoint_slice(name, ["127.0.0.1"]) for name in ("a", "b", "c")]
    first = computer.compute(cluster(services, slices, DEFAULT_PODS), {})
    before = encoder.encode(first.workloads)[WORKLOAD].parts
    assert before.backend_joined is not None  # joined once, for the content hash
    slices[1] = endpoint_slice("b", ["127.0.0.1", "127.0.0.2"])
    state = cluster(services, slices, DEFAULT_PODS)
    second = computer.compute(state, first.assignment)
    after = encoder.encode(second.workloads)[WORKLOAD]
    parts = after.parts
    assert parts.backend_joined == b"".join(parts.in_backend_order(parts.backend_digests))
    assert after.parts.backend_joined is not None
    assert before.backend_joined is None
    assert after == encode(compute(state, first.assignment).workloads)[WORKLOAD]
