"""The snapshot store: versions computed snapshots and serializes each version once.

Compute returns unversioned snapshots on every run and the encoder
(`controlplane/publish/encode.py`) makes their bytes; the store turns them into published
versions. A workload's generation increases only when its content hash changes, so an
unchanged recompute publishes nothing and wakes no stream. The bytes of
`ServerMessage(snapshot=...)` are built once per version and shared by every stream of
that workload: a stream prepends its own `ServerMessage(nonce=...)` bytes, which protobuf
parses as one merged message.

For agents that accept deltas the store keeps, per workload, the encoded parts of the
last `retained_versions` contents (a dict of references to backend bytes mostly shared
with the current version) and builds the delta from one of them to the current version
once, on first request; every stream at that base shares the bytes. The cache is
emptied when the workload's content changes, so it never holds more than one delta per
retained base.

The store does no I/O and is used from the event-loop thread only.
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from controlplane.publish import delta, wire
from controlplane.publish.content import ContentParts, SnapshotContent
from peerplane.v1 import peerplane_pb2 as pb

Subscriber = Callable[[], None]


@dataclass(frozen=True, slots=True)
class Published:
    """One published version of a workload's snapshot."""

    workload: str
    version: int
    content: SnapshotContent
    # ServerMessage(snapshot=...), built once per version for every stream by appending
    # the version to the computed bytes: the snapshot is never serialized again.
    message_bytes: bytes
    # time.monotonic() at publication (push-latency metric); not part of the content.
    published_at: float = field(default=0.0, compare=False)
    # Content hashes a delta to this version can start from (retained, this one excluded).
    bases: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def content_hash(self) -> str:
        return self.content.content_hash

    def snapshot(self) -> pb.Snapshot:
        """The versioned message (parsed on demand: inspection only)."""
        return self.content.message(version=self.version)


@dataclass(frozen=True, slots=True)
class PublishResult:
    """What one `publish` call changed."""

    changed: tuple[str, ...]  # workloads with a new version, sorted
    removed: tuple[str, ...]  # workloads that no longer exist, sorted
    pods_changed: bool  # the pod -> workload mapping changed


DEFAULT_RETAINED_VERSIONS = 16


@dataclass(slots=True)
class _Retained:
    """One retained content of a workload: its parts, and the bytes only it holds (not
    shared with the version that replaced it; 0 while current)."""

    parts: ContentParts
    own_bytes: int = 0


def _own_bytes(old: ContentParts, new: ContentParts) -> int:
    """Bytes `old` keeps alive that `new` does not share (an estimate: the parts, the
    changed backends' bytes, the backends dict)."""
    after = new.backends
    changed = sum(len(b) for name, b in old.backends.items() if after.get(name) is not b)
    fixed = len(old.workload) + len(old.peers) + len(old.frontends) + len(old.warnings)
    return changed + fixed + sys.getsizeof(old.backends)


class SnapshotStore:
    """Current published version of every workload, plus the pod -> workload mapping."""

    def __init__(self, retained_versions: int = DEFAULT_RETAINED_VERSIONS) -> None:
        if retained_versions < 1:
            raise ValueError(f"retained_versions must be at least 1, not {retained_versions}")
        self.retained_versions = retained_versions
        # Per workload: content hash -> parts of the last `retained_versions` contents,
        # oldest first, the current one last.
        self._retained: dict[str, OrderedDict[str, _Retained]] = {}
        # Per workload: base content hash -> ServerMessage(delta=...) to the current version.
        self._deltas: dict[str, dict[str, bytes]] = {}
        self._current: dict[str, Published] = {}
        # Last generation ever used per workload: a workload that vanishes and comes back
        # keeps counting upwards, so versions never repeat within one process.
        self._generations: dict[str, int] = {}
        self._pod_workloads: Mapping[str, str] = MappingProxyType({})
        self._subscribers: dict[int, Subscriber] = {}
        self._next_subscriber = 0
        self._published_once = False

    # ------------------------------------------------------------------ writes

    def publish(
        self,
        snapshots: Mapping[str, SnapshotContent],
        pod_workloads: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Publish one computation's snapshots; return the workloads with a new version.

        Workloads absent from `snapshots` are removed. `pod_workloads` ("namespace/pod" ->
        workload), when given, replaces the mapping used to place agents. Subscribers are
        notified when anything changed. `publish_result` gives the details.
        """
        return list(self.publish_result(snapshots, pod_workloads).changed)

    def publish_result(
        self,
        snapshots: Mapping[str, SnapshotContent],
        pod_workloads: Mapping[str, str] | None = None,
    ) -> PublishResult:
        """Like `publish`, also reporting removed workloads and mapping changes."""
        changed: list[str] = []
        for workload in sorted(snapshots):
            if self._publish_one(workload, snapshots[workload]):
                changed.append(workload)
        removed = sorted(set(self._current) - set(snapshots))
        for workload in removed:
            del self._current[workload]
            self._retained.pop(workload, None)
            self._deltas.pop(workload, None)
        pods_changed = False
        if pod_workloads is not None and dict(pod_workloads) != dict(self._pod_workloads):
            self._pod_workloads = MappingProxyType(dict(pod_workloads))
            pods_changed = True
        first = not self._published_once
        self._published_once = True
        if changed or removed or pods_changed or first:
            self._notify()
        return PublishResult(tuple(changed), tuple(removed), pods_changed)

    def _publish_one(self, workload: str, content: SnapshotContent) -> bool:
        current = self._current.get(workload)
        if current is not None and current.content_hash == content.content_hash:
            return False
        version = self._generations.get(workload, 0) + 1
        self._generations[workload] = version
        message = wire.snapshot_message(content.payload, version, content.content_hash)
        bases = self._retain(workload, content, current)
        self._deltas.pop(workload, None)
        self._current[workload] = Published(
            workload, version, content, message, published_at=time.monotonic(), bases=bases
        )
        return True

    def _retain(
        self, workload: str, content: SnapshotContent, replaced: Published | None
    ) -> frozenset[str]:
        """Keep `content`'s parts as the newest of its workload; the bases it can be
        reached from by a delta."""
        retained = self._retained.setdefault(workload, OrderedDict())
        if replaced is not None:
            previous = retained.get(replaced.content_hash)
            if previous is not None:
                previous.own_bytes = _own_bytes(previous.parts, content.parts)
        retained.pop(content.content_hash, None)
        retained[content.content_hash] = _Retained(content.parts)
        while len(retained) > self.retained_versions:
            retained.popitem(last=False)
        return frozenset(retained) - {content.content_hash}

    # ------------------------------------------------------------------ reads

    @property
    def has_published(self) -> bool:
        """True once the first computation was published (even an empty one)."""
        return self._published_once

    def get(self, workload: str) -> Published | None:
        return self._current.get(workload)

    def workloads(self) -> list[str]:
        """Known workloads, sorted."""
        return sorted(self._current)

    def workload_of(self, pod: str) -> str | None:
        """Workload of the HAProxy pod "namespace/name", None when unknown."""
        return self._pod_workloads.get(pod)

    def delta_message(self, workload: str, to_hash: str, base_hash: str) -> bytes | None:
        """`ServerMessage(delta=...)` from content `base_hash` to the current version of
        `workload`, built on the first request and shared by every stream at that base;
        None when `to_hash` is no longer current or the base is not retained (send the
        full snapshot)."""
        published = self._current.get(workload)
        if published is None or published.content_hash != to_hash:
            return None
        if base_hash not in published.bases:
            return None
        cache = self._deltas.setdefault(workload, {})
        message = cache.get(base_hash)
        if message is None:
            retained = self._retained[workload]
            body = delta.delta_bytes(
                retained[base_hash].parts,
                published.content.parts,
                base_hash,
                published.content_hash,
                published.version,
            )
            message = delta.server_message_with_delta(body)
            cache[base_hash] = message
        return message

    @property
    def retained_count(self) -> int:
        """Contents retained over all workloads (the current ones included)."""
        return sum(len(r) for r in self._retained.values())

    @property
    def retained_bytes(self) -> int:
        """Bytes held only for deltas: retained contents' parts that the version after
        each does not share, and the cached delta messages (an estimate)."""
        parts = sum(r.own_bytes for kept in self._retained.values() for r in kept.values())
        deltas = sum(len(m) for cache in self._deltas.values() for m in cache.values())
        return parts + deltas

    # ------------------------------------------------------------------ subscribers

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """Call `callback()` after every publish that changed something; returns unsubscribe.

        Callbacks run synchronously inside `publish` and must only schedule work (set an
        asyncio.Event), never block.
        """
        key = self._next_subscriber
        self._next_subscriber += 1
        self._subscribers[key] = callback

        def unsubscribe() -> None:
            self._subscribers.pop(key, None)

        return unsubscribe

    def _notify(self) -> None:
        for callback in list(self._subscribers.values()):
            callback()
