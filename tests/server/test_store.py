"""SnapshotStore: versions follow content, bytes are built once, subscribers are told."""

from __future__ import annotations

from controlplane.publish.content import content_hash
from controlplane.store import SnapshotStore
from peerplane.v1 import peerplane_pb2 as pb
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
