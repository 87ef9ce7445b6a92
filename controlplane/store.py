"""The snapshot store: versions computed snapshots and serializes each version once.

Compute returns unversioned snapshots on every run and the encoder
(`controlplane/publish/encode.py`) makes their bytes; the store turns them into published
versions. A workload's generation increases only when its content hash changes, so an
unchanged recompute publishes nothing and wakes no stream. The bytes of
`ServerMessage(snapshot=...)` are built once per version and shared by every stream of
that workload: a stream prepends its own `ServerMessage(nonce=...)` bytes, which protobuf
parses as one merged message.

The store does no I/O and is used from the event-loop thread only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from controlplane.publish import wire
from controlplane.publish.content import SnapshotContent
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


class SnapshotStore:
    """Current published version of every workload, plus the pod -> workload mapping."""

    def __init__(self) -> None:
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
        message = wire.server_message_with_snapshot(
            wire.versioned(content.payload, version, content.content_hash)
        )
        self._current[workload] = Published(
            workload, version, content, message, published_at=time.monotonic()
        )
        return True

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
