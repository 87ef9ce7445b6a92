"""nodeagent/held.py: a delta applied to the held snapshot equals the full snapshot (hash,
saved bytes, rendered config), over random sequences of versions computed and encoded by
the control plane; malformed deltas are refused with a reason and change nothing.

docs/design.md, "The agent stream" (deltas on the agent side)."""

from __future__ import annotations

import itertools

import pytest

from controlplane.publish import content_hash
from nodeagent.config.changes import ApplyPath, classify
from nodeagent.config.render import RenderOptions, render, render_held
from nodeagent.held import DeltaError, Held, diff
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.deltas import delta_between, hashed, random_versions
from tests.helpers.haproxy_env import backend, snapshot
from tests.helpers.malloc import live_c_heap_bytes

pytestmark = pytest.mark.unit  # pure: `-m unit` selects it although the folder is integration

OPTS = RenderOptions("haproxy-a")


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_deltas_over_random_versions_equal_the_full_snapshots(seed: int) -> None:
    """Every step, also skipping versions (a delta spans what the agent last got)."""
    versions = list(random_versions(seed, 25))
    assert len(versions) == 25
    held = Held.from_snapshot(versions[0])
    rendered = render_held(held, OPTS)
    steps = 0
    i = 0
    while i + 1 < len(versions):
        j = min(len(versions) - 1, i + 1 + (i % 3 == 2))  # sometimes skip one
        old, new = versions[i], versions[j]
        held_next, change = held.apply(delta_between(old, new))
        assert held_next.computed_hash() == new.content_hash == content_hash(new)
        assert held_next.serialized() == new.SerializeToString(deterministic=True)
        assert held_next.message() == new
        full = Held.from_snapshot(new)
        assert diff(held, full) == change
        cached = render_held(held_next, OPTS, rendered)
        assert cached.text() == render(new, OPTS)
        assert cached.data() == cached.text().encode()
        # The change set's decision is the one a whole comparison gives.
        by_delta = classify(held, rendered, held_next, cached, change)
        by_full = classify(held, rendered, full, render_held(full, OPTS), diff(held, full))
        assert by_delta == by_full
        held, rendered, i = held_next, cached, j
        steps += 1
    assert steps >= 15


def _pair() -> tuple[pb.Snapshot, pb.Snapshot]:
    peers = [("haproxy-a", "10.0.0.1", 10000)]
    old = hashed(
        snapshot(
            peers,
            [backend("ns_a_80", [("10.1.0.1", 80)]), backend("ns_b_80", [("10.1.0.2", 80)])],
            http_port=80,
            routes=[("a.example.com", "ns_a_80")],
        ),
        version=1,
    )
    new = pb.Snapshot()
    new.CopyFrom(old)
    new.backends[0].slots[1].CopyFrom(
        pb.Slot(index=2, server_name="SRV_2", address="10.1.0.9", port=80, enabled=True)
    )
    return old, hashed(new, version=2)


def test_a_one_slot_delta_is_a_runtime_change_of_that_slot_only() -> None:
    old, new = _pair()
    held = Held.from_snapshot(old)
    held_next, change = held.apply(delta_between(old, new))
    assert change.backends == {"ns_a_80"} and not (change.removed or change.peers)
    assert held_next.framed["ns_b_80"] is held.framed["ns_b_80"]  # shared, not copied
    r0 = render_held(held, OPTS)
    decision = classify(held, r0, held_next, render_held(held_next, OPTS, r0), change)
    assert decision.kind is ApplyPath.RUNTIME
    assert [(u.backend, u.server) for u in decision.updates] == [("ns_a_80", "SRV_2")]


def test_a_delta_replacing_backends_in_place_splices_their_joined_digests() -> None:
    """Unverified (the saved journal's replay), nothing joins the digests: the joined
    ones are the held snapshot's with the replaced digest put in, and the hash they give
    is the full snapshot's."""
    old, new = _pair()
    held = Held.from_snapshot(old)
    held.parts.content_hash()  # joins them, as the verification of the first snapshot does
    held_next, _ = held.apply(delta_between(old, new), verify=False)
    parts = held_next.parts
    assert parts.backend_joined == b"".join(parts.backend_digests.values())
    assert held_next.computed_hash() == new.content_hash


def _corrupt(d: pb.SnapshotDelta, how: str) -> None:
    if how == "wrong to_content_hash":
        d.to_content_hash = "f" * 64
    elif how == "unknown from hash":
        d.from_content_hash = "e" * 64
    elif how == "backend changed behind the hash":
        d.backends[0].slots[0].port = 81
    elif how == "duplicate backend":
        d.backends.append(d.backends[0])
    elif how == "removed backend not held":
        d.removed_backends.append("ns_zz_80")
    elif how == "changed and removed":
        d.removed_backends.append(d.backends[0].name)
    elif how == "nameless backend":
        d.backends.add()
    elif how == "other workload":
        d.workload = "other/DaemonSet/x"


@pytest.mark.parametrize(
    "how",
    [
        "wrong to_content_hash",
        "unknown from hash",
        "backend changed behind the hash",
        "duplicate backend",
        "removed backend not held",
        "changed and removed",
        "nameless backend",
        "other workload",
    ],
)
def test_a_bad_delta_is_refused_and_changes_nothing(how: str) -> None:
    old, new = _pair()
    held = Held.from_snapshot(old)
    before = held.serialized()
    d = delta_between(old, new)
    _corrupt(d, how)
    with pytest.raises(DeltaError) as refused:
        held.apply(d)
    assert str(refused.value)
    assert held.serialized() == before and held.computed_hash() == old.content_hash


def test_a_duplicate_backend_in_a_full_snapshot_is_refused() -> None:
    old, _ = _pair()
    old.backends.append(old.backends[0])
    with pytest.raises(DeltaError, match="duplicate backend 'ns_a_80'"):
        Held.from_snapshot(old)


def test_peers_frontends_and_warnings_are_replaced_only_when_flagged() -> None:
    old, _ = _pair()
    new = pb.Snapshot()
    new.CopyFrom(old)
    new.peers.peers.add(name="haproxy-b", address="10.0.0.2", port=10000)
    new.ClearField("http_frontend")
    new.warnings.add(object="ConfigMap x", key="k", value="v", reason="r")
    new.ClearField("backends")
    hashed(new, version=3)
    d = delta_between(old, new)
    assert (d.peers_changed, d.frontends_changed, d.warnings_changed) == (True, True, True)
    assert list(d.removed_backends) == ["ns_a_80", "ns_b_80"]
    held_next, change = Held.from_snapshot(old).apply(d)
    assert held_next.message() == new
    assert held_next.http_frontend is None
    assert (change.peers, change.frontends, change.warnings) == (True, True, True)
    # The same delta without its flags leaves those parts as held: the hash says no.
    d.peers_changed = False
    with pytest.raises(DeltaError, match="content hash"):
        Held.from_snapshot(old).apply(d)


def _listener(*paths: str) -> pb.HttpListener:
    rules = [
        pb.RouteRule(
            source=f"HTTPRoute ns/r rule {i}",
            hostnames=["a.example.com"],
            path=pb.PathMatch(type=pb.PathMatch.PATH_PREFIX, value=path),
            backends=[pb.WeightedBackend(backend="ns_b_80", weight=1)],
        )
        for i, path in enumerate(paths)
    ]
    return pb.HttpListener(port=80, rules=rules)


def test_listeners_move_with_the_frontends_and_are_hashed() -> None:
    """Field 14 is its own content part; a delta's frontends_changed replaces it with the
    HTTP and TCP frontends, and a change of map rules only is a runtime change."""
    old, _ = _pair()
    old.http_listeners.append(_listener("/a"))
    hashed(old, version=1)
    new = pb.Snapshot()
    new.CopyFrom(old)
    new.http_listeners[0].CopyFrom(_listener("/a", "/b"))
    hashed(new, version=2)
    d = delta_between(old, new)
    assert d.frontends_changed and len(d.http_listeners) == 1
    held = Held.from_snapshot(old)
    held_next, change = held.apply(d)
    assert held_next.serialized() == new.SerializeToString(deterministic=True)
    assert held_next.message() == new and change.frontends
    assert diff(held, Held.from_snapshot(new)) == change
    r0 = render_held(held, OPTS)
    r1 = render_held(held_next, OPTS, r0, change)
    assert r1.text() == render(new, OPTS)
    assert r1.frontends == r0.frontends  # the new rule is a map entry, not a config line
    decision = classify(held, r0, held_next, r1, change)
    assert decision.kind is ApplyPath.RUNTIME and not decision.updates
    added = [(u.op, u.key, u.value) for u in decision.maps]
    assert added == [("add", "a.example.com/b/", "2:ns_b_80")]
    # Without the flag the held listeners stay: the hash says no.
    d.frontends_changed = False
    with pytest.raises(DeltaError, match="content hash"):
        held.apply(d)


# Memory: what the held snapshot keeps alive (docs/design.md, "What the agent holds").
BIG_WARNINGS = 200  # of 500 characters each: about 100 KB a version


def _with_warnings(s: pb.Snapshot, version: int, count: int) -> pb.Snapshot:
    s.ClearField("warnings")
    for n in range(count):
        s.warnings.add(object=f"ConfigMap v{version}-{n}", key="k", reason="x" * 500)
    return hashed(s, version=version)


def _versions_moving_one_backend_each(services: int) -> list[pb.Snapshot]:
    """Version 1, then one version per Service: its endpoint moved, and a big backend
    (about 100 KB, 2,000 slots) changed too, as a busy cluster's deltas carry several
    parts: a delta is about 100 KB, a Service's backend well under 1 KB."""
    peers = [("haproxy-a", "10.0.0.1", 10000)]
    big = backend("ns_big_80", [("10.3.0.1", 80)], count=2000)
    backends = [backend(f"ns_s{i:02d}_80", [(f"10.1.0.{i + 1}", 80)]) for i in range(services)]
    first = snapshot(peers, [big, *backends], http_port=80, routes=[("a.example.com", "ns_big_80")])
    versions = [hashed(first, version=1)]
    for i in range(services):
        new = pb.Snapshot()
        new.CopyFrom(versions[-1])
        new.backends[0].slots[0].address = f"10.3.{i // 250}.{i % 250 + 2}"
        new.backends[i + 1].slots[0].address = f"10.2.0.{i + 1}"
        versions.append(hashed(new, version=i + 2))
    return versions


def test_a_backend_held_from_a_delta_does_not_keep_the_rest_of_that_delta_alive() -> None:
    """Each delta moves one small backend and changes the big one: the held small backend
    must not pin its delta (protobuf parses a message into one arena with all its
    submessages), or the agent holds one delta per backend changed since it started."""
    versions = _versions_moving_one_backend_each(40)
    wire = [delta_between(a, b).SerializeToString() for a, b in itertools.pairwise(versions)]
    held = Held.from_snapshot(pb.Snapshot.FromString(versions[0].SerializeToString()))
    before = live_c_heap_bytes()
    for data in wire:
        held, _ = held.apply(pb.SnapshotDelta.FromString(data))
    grown = live_c_heap_bytes() - before
    assert held.message() == versions[-1]
    one_delta = len(wire[-1])
    assert grown < 4 * one_delta, f"{grown:,} bytes kept after {len(wire)} deltas"


def test_a_held_full_snapshot_keeps_only_what_it_holds() -> None:
    """The first full snapshot's parts, once replaced (the warnings here), are freed
    although its backends are still held."""
    versions = _versions_moving_one_backend_each(1)
    big = versions[0]
    _with_warnings(big, 1, 20 * BIG_WARNINGS)  # about 2 MB
    small = pb.Snapshot()
    small.CopyFrom(big)
    _with_warnings(small, 2, 0)
    data, delta = big.SerializeToString(), delta_between(big, small).SerializeToString()
    for _ in range(2):  # the first round also grows protobuf's own tables, once
        before = live_c_heap_bytes()
        held = Held.from_snapshot(pb.Snapshot.FromString(data))
        held, _ = held.apply(pb.SnapshotDelta.FromString(delta))
        grown = live_c_heap_bytes() - before
        assert held.message() == small
        del held
    assert grown < len(data) // 10, f"{grown:,} bytes kept of a {len(data):,}-byte snapshot"
