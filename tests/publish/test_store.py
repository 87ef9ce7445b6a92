"""SnapshotStore: versions follow content, bytes are built once, subscribers are told,
retained contents and built deltas stay within their byte budgets."""

from __future__ import annotations

import gc
import itertools
import random
import tracemalloc
from typing import Any

import pytest

from controlplane.compute import Computer
from controlplane.publish import Encoder
from controlplane.publish.content import SnapshotContent, content_hash
from controlplane.publish.store import SnapshotStore
from peerplane.parts import ContentParts, backend_changes
from peerplane.protowire import framed_backend
from peerplane.v1 import peerplane_pb2 as pb
from tests.helpers.builders import DEFAULT_PODS, WORKLOAD, cluster, endpoint_slice, service
from tests.helpers.route_builders import gateway, prefix_rule, route, state, to
from tests.helpers.server_harness import W1, W2, snapshot


def test_same_content_keeps_the_version_and_notifies_nobody() -> None:
    store = SnapshotStore()
    calls: list[str] = []
    store.subscribe(lambda: calls.append("change"))
    assert store.publish({W1: snapshot(W1, "10.0.0.1")}) == [W1]
    first = store.get(W1)
    assert first is not None and first.version == 1
    assert calls == ["change"]

    assert store.publish({W1: snapshot(W1, "10.0.0.1")}) == []
    assert store.get(W1) is first
    assert calls == ["change"]


def test_changed_content_increments_the_version() -> None:
    store = SnapshotStore()
    store.publish({W1: snapshot(W1, "10.0.0.1"), W2: snapshot(W2, "10.0.9.1")})
    assert store.publish({W1: snapshot(W1, "10.0.0.2"), W2: snapshot(W2, "10.0.9.1")}) == [W1]
    w1, w2 = store.get(W1), store.get(W2)
    assert w1 is not None and w2 is not None
    assert (w1.version, w2.version) == (2, 1)
    assert w1.snapshot().version == 2
    assert w1.content_hash == snapshot(W1, "10.0.0.2").content_hash


def test_message_bytes_are_a_server_message_that_takes_a_nonce_prefix() -> None:
    store = SnapshotStore()
    store.publish({W1: snapshot(W1, "10.0.0.1")})
    published = store.get(W1)
    assert published is not None
    wire = pb.ServerMessage(nonce="42").SerializeToString() + published.message_bytes
    message = pb.ServerMessage.FromString(wire)
    assert message.nonce == "42"
    assert message.snapshot == published.snapshot()
    assert message.snapshot.version == 1


def test_vanished_workloads_are_removed_and_versions_keep_counting() -> None:
    store = SnapshotStore()
    store.publish({W1: snapshot(W1, "10.0.0.1"), W2: snapshot(W2, "10.0.9.1")})
    result = store.publish_result({W2: snapshot(W2, "10.0.9.1")})
    assert result.removed == (W1,)
    assert result.changed == ()
    assert store.workloads() == [W2]
    assert store.get(W1) is None
    store.publish({W1: snapshot(W1, "10.0.0.1"), W2: snapshot(W2, "10.0.9.1")})
    again = store.get(W1)
    assert again is not None and again.version == 2


def test_pod_mapping_is_kept_and_its_changes_notify() -> None:
    store = SnapshotStore()
    calls: list[str] = []
    unsubscribe = store.subscribe(lambda: calls.append("change"))
    store.publish({W1: snapshot(W1, "10.0.0.1")}, {"ns/a": W1})
    assert store.workload_of("ns/a") == W1
    assert store.workload_of("ns/b") is None
    result = store.publish_result({W1: snapshot(W1, "10.0.0.1")}, {"ns/a": W1, "ns/b": W1})
    assert result.pods_changed and result.changed == ()
    assert store.workload_of("ns/b") == W1
    assert calls == ["change", "change"]
    unsubscribe()
    store.publish({W1: snapshot(W1, "10.0.0.2")})
    assert calls == ["change", "change"]
    assert store.workload_of("ns/b") == W1  # no mapping given: the last one is kept


def test_the_hash_is_the_sha256_of_the_content_message() -> None:
    store = SnapshotStore()
    content = snapshot(W1, "10.0.0.1")
    message = content.message(version=9)
    assert content_hash(message) == content.content_hash
    store.publish({W1: content})
    published = store.get(W1)
    assert published is not None and published.content_hash == content.content_hash
    assert published.snapshot().content_hash == content.content_hash


def test_the_first_publish_counts_even_when_empty() -> None:
    store = SnapshotStore()
    calls: list[str] = []
    store.subscribe(lambda: calls.append("change"))
    assert not store.has_published
    assert store.publish({}) == []
    assert store.has_published
    assert calls == ["change"]


# ---------------------------------------------------------------------- deltas


def _versions(store: SnapshotStore, count: int) -> list[str]:
    """Publish `count` contents of W1 (one more endpoint each); their hashes in order."""
    hashes = []
    for n in range(1, count + 1):
        content = snapshot(W1, *(f"10.0.0.{i}" for i in range(1, n + 1)))
        store.publish({W1: content})
        hashes.append(content.content_hash)
    return hashes


def test_a_delta_is_built_once_per_base_and_shared() -> None:
    store = SnapshotStore()
    first, second = _versions(store, 2)
    current = store.get(W1)
    assert current is not None and current.bases == frozenset({first})
    one = store.delta_message(W1, second, first)
    assert one is not None
    assert store.delta_message(W1, second, first) is one  # a second stream: same bytes
    parsed = pb.ServerMessage.FromString(pb.ServerMessage(nonce="3").SerializeToString() + one)
    assert parsed.delta.from_content_hash == first
    assert parsed.delta.to_content_hash == second
    assert parsed.delta.version == 2
    assert [s.address for s in parsed.delta.backends[0].slots] == ["10.0.0.1", "10.0.0.2"]


def test_no_delta_from_an_unknown_base_or_to_a_version_no_longer_current() -> None:
    store = SnapshotStore()
    first, second = _versions(store, 2)
    assert store.delta_message(W1, second, "f" * 64) is None  # another control plane's
    assert store.delta_message(W1, second, second) is None  # the current itself
    cached = store.delta_message(W1, second, first)
    store.publish({W1: snapshot(W1, "10.0.0.9")})
    assert store.delta_message(W1, second, first) is None  # `second` is superseded
    third = store.get(W1)
    assert third is not None
    rebuilt = store.delta_message(W1, third.content_hash, first)
    assert rebuilt is not None and rebuilt is not cached
    assert store.delta_message("other/Deployment/x", second, first) is None


def test_the_window_keeps_the_last_n_contents() -> None:
    store = SnapshotStore(retained_versions=3)
    hashes = _versions(store, 4)
    current = store.get(W1)
    assert current is not None
    assert current.bases == frozenset(hashes[1:3])  # hashes[0] fell out of the window
    assert store.delta_message(W1, hashes[3], hashes[0]) is None
    assert store.delta_message(W1, hashes[3], hashes[1]) is not None
    assert store.retained_count == 3
    assert store.retained_bytes > 0


def test_content_going_back_is_one_retained_entry_and_a_removed_workload_is_forgotten() -> None:
    store = SnapshotStore()
    a, b = _versions(store, 2)
    store.publish({W1: snapshot(W1, "10.0.0.1")})  # back to a, as version 3
    current = store.get(W1)
    assert current is not None and current.version == 3
    assert current.bases == frozenset({b})
    assert store.retained_count == 2
    store.publish({W2: snapshot(W2, "10.0.9.1")})
    assert store.retained_count == 1  # W1 is gone, and its retained contents with it
    assert store.delta_message(W1, a, b) is None


def test_the_window_size_is_checked() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        SnapshotStore(retained_versions=0)


# ---------------------------------------------------------------------- byte budgets

EDITED = [f"{W1}-{i}" for i in range(4)]


def _edit(workload: str, edit: int, backends: int = 8, size: int = 1000) -> SnapshotContent:
    """`workload`'s content after settings edit number `edit`: every backend differs from
    the previous edit's, as when a ConfigMap setting changes."""
    snap = pb.Snapshot(workload=workload)
    for index in range(backends):
        snap.backends.add(name=f"b{index}", service="default/s", balance=f"{edit}".ljust(size))
    return SnapshotContent.from_message(snap)


def _edits(store: SnapshotStore, edit: int) -> dict[str, str]:
    """Publish edit number `edit` of every workload of `EDITED`; their hashes."""
    contents = {w: _edit(w, edit) for w in EDITED}
    store.publish(contents)
    return {w: c.content_hash for w, c in contents.items()}


def _own_bytes_of_one_edit() -> int:
    """What one replaced content of `_edit` holds on its own (the store's estimate)."""
    store = SnapshotStore(retained_bytes=0)
    _edits(store, 0)
    _edits(store, 1)
    return store.retained_bytes // len(EDITED)


def test_retained_bytes_stay_within_the_budget_over_all_workloads() -> None:
    """A settings edit changes every backend, so each retained content held a whole
    snapshot's backends and only their count per workload was bounded: 2,000 Services x
    8 workloads and 17 edits took the control plane from 127 to 264 MiB. The retained
    contents of all workloads together stay within the byte budget, those replaced
    longest ago going first, every current version kept; a current version's bases
    follow, and an evicted base gives no delta (the full snapshot is sent)."""
    one = _own_bytes_of_one_edit()
    budget = 3 * one + one // 2  # three replaced contents, whatever their workload
    store = SnapshotStore(retained_bytes=budget)
    replaced: list[tuple[str, str]] = []  # (workload, hash), in the order replaced
    hashes = _edits(store, 0)
    for edit in range(1, 6):
        previous = hashes
        hashes = _edits(store, edit)
        replaced.extend((w, previous[w]) for w in sorted(EDITED))
        assert store.retained_bytes <= budget
        kept = set(replaced[-3:])  # the three replaced last, spread over workloads
        assert store.retained_count == len(EDITED) + 3  # the current ones always
        for workload in EDITED:
            current = store.get(workload)
            assert current is not None and current.content_hash == hashes[workload]
            assert current.bases == {h for w, h in kept if w == workload}
            for base in current.bases:
                assert store.delta_message(workload, current.content_hash, base) is not None
            evicted = previous[workload]
            if (workload, evicted) not in kept:
                assert store.delta_message(workload, current.content_hash, evicted) is None


def test_a_budget_smaller_than_one_content_keeps_only_the_current_versions() -> None:
    store = SnapshotStore(retained_bytes=1)
    _edits(store, 0)
    hashes = _edits(store, 1)
    assert store.retained_bytes == 0
    assert store.retained_count == len(EDITED)
    for workload in EDITED:
        current = store.get(workload)
        assert current is not None and current.content_hash == hashes[workload]
        assert current.bases == frozenset()
    _edits(store, 2)
    assert (store.retained_count, store.retained_bytes) == (len(EDITED), 0)


def _sharing(workloads: list[str], edit: int) -> tuple[dict[str, SnapshotContent], int]:
    """Contents of `workloads` holding the same backend bytes objects (as the encoder
    shares a Service's backend between the workloads that serve it); their size."""
    framed = {f"b{i}": framed_backend(_edit(W1, edit).message().backends[i]) for i in range(8)}
    contents = {
        w: SnapshotContent.of_parts(
            w, ContentParts(b"", b"", framed, b"", b""), peers=0, backends=8, warnings=0
        )
        for w in workloads
    }
    return contents, sum(map(len, framed.values()))


def test_retained_bytes_count_a_backend_shared_by_workloads_once() -> None:
    """A settings edit gives every workload new bytes for the same Services, one object
    per Service shared by all (the encoder's cache): summing per workload counted 8
    workloads' retained contents 8 times. An object is counted once, and not at all
    while a current version still holds it."""
    store = SnapshotStore(retained_bytes=0)
    store.publish(_sharing([W1, W2], 0)[0])
    edited, size = _sharing([W1, W2], 1)
    store.publish(edited)
    overhead = store.retained_bytes - size  # the two replaced backends dicts
    assert 0 < overhead < size / 2  # counted twice, it would exceed `size`
    store.publish({W1: _sharing([W1], 2)[0][W1], W2: edited[W2]})
    # W1's edit 1 is replaced, but W2 still runs those very bytes: only a dict more.
    assert store.retained_bytes - size < 2 * overhead
    store.publish({W1: _sharing([W1], 2)[0][W1], W2: _sharing([W2], 3)[0][W2]})
    assert store.retained_bytes > 2 * size  # now edit 1's bytes are held for deltas only


def test_the_delta_cache_is_bounded_least_recently_used_first() -> None:
    """Built deltas were cached per (base, current) until the content changed: 120
    agents on different bases of a settings edit held 120 snapshot-sized deltas (495
    MiB). The cache stays within its byte budget, the least recently used delta going
    first; an evicted one is rebuilt (equal bytes), and a delta larger than the whole
    cache is built for its stream and not kept."""
    hashes = [_edit(W1, edit) for edit in range(5)]
    probe = SnapshotStore(delta_cache_bytes=0)
    for content in hashes:
        probe.publish({W1: content})
    to = hashes[-1].content_hash
    size = len(probe.delta_message(W1, to, hashes[0].content_hash) or b"")
    assert size > 8000  # every backend: about the snapshot

    store = SnapshotStore(delta_cache_bytes=2 * size + size // 2)  # two deltas
    for content in hashes:
        store.publish({W1: content})
    b0, b1, b2 = (c.content_hash for c in hashes[:3])
    first = store.delta_message(W1, to, b0)
    second = store.delta_message(W1, to, b1)
    assert first is not None and second is not None
    assert store.delta_cache_bytes == 2 * size
    assert store.delta_message(W1, to, b0) is first  # used: now the most recent
    assert store.delta_message(W1, to, b2) is not None  # evicts b1's, the least recent
    assert store.delta_cache_bytes == 2 * size
    assert store.delta_message(W1, to, b0) is first
    rebuilt = store.delta_message(W1, to, b1)
    assert rebuilt is not None and rebuilt is not second and rebuilt == second
    assert store.delta_cache_bytes <= 2 * size + size // 2

    small = SnapshotStore(delta_cache_bytes=size // 2)
    for content in hashes:
        small.publish({W1: content})
    one = small.delta_message(W1, to, b0)
    assert one == first and small.delta_message(W1, to, b0) is not one
    assert small.delta_cache_bytes == 0


def test_the_delta_cache_forgets_a_workload_that_changed_or_went() -> None:
    store = SnapshotStore()
    contents = [_edit(W1, edit) for edit in range(3)]
    for content in contents[:2]:
        store.publish({W1: content, W2: snapshot(W2, "10.0.9.1")})
    assert store.delta_message(W1, contents[1].content_hash, contents[0].content_hash)
    assert store.delta_cache_bytes > 0
    store.publish({W1: contents[2], W2: snapshot(W2, "10.0.9.1")})
    assert store.delta_cache_bytes == 0  # W1's content changed: deltas to it are stale
    assert store.delta_message(W1, contents[2].content_hash, contents[0].content_hash)
    retained = store.retained_bytes
    assert retained > 0
    store.publish({W2: snapshot(W2, "10.0.9.1")})
    assert (store.delta_cache_bytes, store.retained_bytes) == (0, 0)


def test_the_byte_budgets_are_checked() -> None:
    with pytest.raises(ValueError, match="at least 0"):
        SnapshotStore(retained_bytes=-1)
    with pytest.raises(ValueError, match="at least 0"):
        SnapshotStore(delta_cache_bytes=-1)


def _retention_cost(retained: int, services: int, versions: int) -> tuple[int, int, int]:
    """Traced bytes the store holds after `versions` one-endpoint changes of a cluster of
    `services` Services x 20 endpoints, the contents it retains, and the snapshot's
    payload size."""
    computer, encoder, store = Computer(), Encoder(), SnapshotStore(retained)
    names = [f"s{i}" for i in range(services)]
    addresses = [f"127.0.{i // 200}.{i % 200 + 1}" for i in range(20)]
    slices = {n: endpoint_slice(n, addresses) for n in names}
    assignment: dict = {}  # type: ignore[type-arg]
    gc.collect()
    tracemalloc.start()
    try:
        base = 0
        for version in range(versions):
            # Service i loses an endpoint: one change per version, each a new content.
            name = names[version % services]
            slices[name] = endpoint_slice(name, addresses[:19])
            state = cluster([service(n) for n in names], list(slices.values()), DEFAULT_PODS)
            result = computer.compute(state, assignment)
            assignment = dict(result.assignment)
            store.publish(encoder.encode(result.workloads))
            del result, state
            if version == 0:
                gc.collect()
                base = tracemalloc.get_traced_memory()[0]
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    current = store.get(WORKLOAD)
    assert current is not None
    return held, store.retained_count, len(current.content.payload)


def test_a_retained_version_costs_a_small_part_of_a_snapshot(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Retaining 16 versions rather than 1 costs, per extra version, the backends dict
    and the bytes of what changed, not a copy of the snapshot (measured with
    tracemalloc: everything else is equal between the two runs)."""
    one, kept_one, payload = _retention_cost(1, services=200, versions=17)
    sixteen, kept_sixteen, _ = _retention_cost(16, services=200, versions=17)
    assert (kept_one, kept_sixteen) == (1, 16)
    per_version = (sixteen - one) / 15
    with capsys.disabled():
        print(
            f"\nretention: {payload} B snapshot (200 Services x 20 endpoints); "
            f"{per_version:.0f} B per retained version ({per_version / payload:.1%})"
        )
    assert 0 < per_version < payload / 10


def _changes_of_a_cluster() -> list[dict[str, SnapshotContent]]:
    """Encoded contents of a cluster going through one-endpoint changes, a Service gone
    and back (the encoder then re-encodes every backend), and back to an earlier
    content, as the reconcile loop hands them to the store: each step a new content."""
    computer, encoder = Computer(), Encoder()
    names = [f"s{i}" for i in range(12)]
    addresses = [f"127.0.3.{i + 1}" for i in range(6)]
    slices = {n: endpoint_slice(n, addresses) for n in names}
    present = list(names)
    plan = [
        ("s0", 6),
        ("s0", 5),
        ("s1", 5),
        ("s2", 4),
        ("s11", 0),  # gone
        ("s1", 6),
        ("s11", 6),  # back
        ("s2", 6),
        ("s0", 6),  # the first content again
        ("s3", 5),
    ]
    steps: list[dict[str, SnapshotContent]] = []
    assignment: dict = {}  # type: ignore[type-arg]
    for name, size in plan:
        if not size:
            present.remove(name)
        elif name not in present:
            present.append(name)
        else:
            slices[name] = endpoint_slice(name, addresses[:size])
        state = cluster([service(n) for n in present], [slices[n] for n in present], DEFAULT_PODS)
        result = computer.compute(state, assignment)
        assignment = dict(result.assignment)
        steps.append(encoder.encode(result.workloads))
    return steps


def _held(store: SnapshotStore) -> tuple[object, ...]:
    """What the store's bookkeeping says: retained bytes and count, each workload's bases
    and the delta from every base."""
    found: list[object] = [store.retained_bytes, store.retained_count]
    for workload in store.workloads():
        current = store.get(workload)
        assert current is not None
        found.append((workload, current.version, sorted(current.bases)))
        found.extend(
            store.delta_message(workload, current.content_hash, base)
            for base in sorted(current.bases)
        )
    return tuple(found)


def test_following_the_encoders_replaced_backends_keeps_the_bookkeeping_unchanged() -> None:
    """The store follows the backends the encoder said it re-encoded (O(changed)) instead
    of comparing every backend by identity: the retained bytes, bases and deltas are
    what the whole comparison gives, step by step."""
    told, compared = SnapshotStore(retained_bytes=4096), SnapshotStore(retained_bytes=4096)
    steps = _changes_of_a_cluster()
    assert sum(c.derived is not None for s in steps for c in s.values()) >= 5
    for contents in steps:
        assert told.publish(contents)
        for content in contents.values():
            content.derived = None  # as a content the encoder said nothing about
        compared.publish(contents)
        assert _held(told) == _held(compared)


def _route_changes() -> list[dict[str, SnapshotContent]]:
    """Contents of a cluster whose HTTPRoutes come, go and change path one at a time (new
    hosts among them), each encoded by one `Encoder` after the last."""
    rng = random.Random(7)
    routes: dict[str, Any] = {}
    computer, encoder = Computer(), Encoder()
    steps = []
    assignment: dict[str, Any] = {}
    for _ in range(30):
        name = f"r{rng.randrange(12)}"
        if name in routes and rng.random() < 0.3:
            del routes[name]
        else:
            path = rng.choice(("/a", "/b", "/c"))
            routes[name] = route(
                name, [prefix_rule(path, [to("shop")])], hostnames=(f"{name}.example",)
            )
        cluster_state = state(gateway("web", port=8080, allowed={"from": "All"}), *routes.values())
        result = computer.compute(cluster_state, assignment)
        assignment = dict(result.assignment)
        steps.append(encoder.encode(result.workloads))
    return steps


def test_following_the_encoders_regrouped_hosts_keeps_the_bookkeeping_unchanged() -> None:
    """The store and the delta compare only the route groups the encoder said it grouped
    again (`Derived.groups`), whose dicts hold a new host's key last: the retained bytes,
    bases and deltas are what comparing every group gives, step by step."""
    told, compared = SnapshotStore(retained_bytes=4096), SnapshotStore(retained_bytes=4096)
    steps = _route_changes()
    said = [c.derived for s in steps for c in s.values() if c.derived is not None]
    assert sum(d.groups is not None and len(d.groups) > 0 for d in said) >= 10
    assert any(c.parts.group_order is not None for s in steps for c in s.values())
    for contents in steps:
        told.publish(contents)
        for content in contents.values():
            content.derived = None  # as a content the encoder said nothing about
        compared.publish(contents)
        assert _held(told) == _held(compared)


def test_a_one_endpoint_change_compares_no_backend_it_did_not_touch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 8,000 Services comparing every backend by identity was 2.3 ms of a change."""
    steps = _changes_of_a_cluster()
    store = SnapshotStore()
    store.publish(steps[0])

    def whole(*_: object) -> None:
        raise AssertionError("compared every backend")

    monkeypatch.setattr("controlplane.publish.store.unshared", whole)
    for contents in steps[1:4]:
        assert store.publish(contents)


def test_a_delta_from_the_version_before_compares_only_the_backends_re_encoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The delta both agents ask for after a one-endpoint change (from the version just
    before) compared every backend by identity: O(Services) per change in `serve`. It
    compares the ones the encoder re-encoded; from an older base, all of them."""
    steps = _changes_of_a_cluster()
    store = SnapshotStore()
    store.publish(steps[0])
    compared: list[int] = []

    def whole(old: ContentParts, new: ContentParts) -> tuple[dict[str, bytes], list[str]]:
        compared.append(len(new.backends))
        return backend_changes(old, new)

    monkeypatch.setattr("controlplane.publish.delta.backend_changes", whole)
    for before, contents in itertools.pairwise(steps[:4]):
        base = store.get(WORKLOAD)
        assert base is not None and store.publish(contents)
        current = store.get(WORKLOAD)
        assert current is not None
        message = store.delta_message(WORKLOAD, current.content_hash, base.content_hash)
        assert message is not None and compared == []
        sent = pb.ServerMessage.FromString(message).delta
        parts = contents[WORKLOAD].parts
        assert [b.name for b in sent.backends] == [
            name
            for name in parts.backend_order or parts.backends
            if before[WORKLOAD].parts.backends.get(name) != parts.backends[name]
        ]
    first = steps[0][WORKLOAD].content_hash
    assert store.delta_message(WORKLOAD, current.content_hash, first) is not None
    assert compared == [len(current.content.parts.backends)]


def test_a_version_sent_only_as_deltas_never_builds_its_snapshot_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The 8 MB `ServerMessage(snapshot=...)` of 8,000 Services was built on every publish;
    it is built on the first full snapshot sent of a version, once."""
    from controlplane.publish import wire

    built: list[int] = []
    real = wire.snapshot_message

    def counted(payload: bytes, version: int, content_hash: str) -> bytes:
        built.append(version)
        return real(payload, version, content_hash)

    monkeypatch.setattr(wire, "snapshot_message", counted)
    steps = _changes_of_a_cluster()
    store = SnapshotStore()
    store.publish(steps[0])
    base = store.get(WORKLOAD)
    store.publish(steps[1])
    current = store.get(WORKLOAD)
    assert base is not None and current is not None
    assert store.delta_message(WORKLOAD, current.content_hash, base.content_hash) is not None
    assert built == []
    message = current.message_bytes
    assert built == [current.version] and current.message_bytes is message
    sent = pb.ServerMessage.FromString(message).snapshot
    assert sent.version == current.version and sent.content_hash == current.content_hash
    assert current.content.payload == steps[1][WORKLOAD].parts.join()
