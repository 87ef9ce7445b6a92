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
once, on first request; every stream at that base shares the bytes (from the version
just before, comparing only the backends the encoder re-encoded). Both are bounded in
bytes over all workloads, because a change of every backend (a settings edit) makes each
retained content and each delta as large as the snapshot: `retained_bytes` bounds what
the retained contents hold that their successors do not share (the oldest replaced
content is evicted first, the current one never: an agent on an evicted base gets the
full snapshot), `delta_cache_bytes` bounds the cached deltas (least recently used first;
a workload's deltas are dropped when its content changes).

The store does no I/O and is used from the event-loop thread only.
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from controlplane.publish import delta, wire
from controlplane.publish.content import SnapshotContent, without_keys
from controlplane.publish.retention import (
    CURRENT,
    REPLACED,
    BackendRefs,
    Retained,
    fixed_bytes,
    unshared,
    unshared_named,
)
from peerplane.v1 import peerplane_pb2 as pb

Subscriber = Callable[[], None]


@dataclass(frozen=True, slots=True)
class Published:
    """One published version of a workload's snapshot."""

    workload: str
    version: int
    content: SnapshotContent
    # time.monotonic() at publication (push-latency metric); not part of the content.
    published_at: float = field(default=0.0, compare=False)
    # Content hashes a delta to this version can start from (retained, this one excluded).
    bases: frozenset[str] = field(default=frozenset(), compare=False)
    # `message_bytes` once built (shared by the copies `replace` makes of this version).
    _message: list[bytes] = field(default_factory=list, compare=False, repr=False)

    @property
    def content_hash(self) -> str:
        return self.content.content_hash

    @property
    def message_bytes(self) -> bytes:
        """ServerMessage(snapshot=...), built on the first full snapshot sent of this
        version and shared by every stream, by appending the version to the computed
        bytes: the snapshot is never serialized again, and a version that only deltas
        carry never joins its 8 MB. It holds the certificates' private keys."""
        if not self._message:
            content = self.content
            self._message.append(
                wire.snapshot_message(content.payload, self.version, content.content_hash)
            )
        return self._message[0]

    def snapshot(self) -> pb.Snapshot:
        """The versioned message as inspection shows it: every certificate's pem cleared,
        the content hash the real one's (parsed on demand: inspection only; the streams
        send `message_bytes`)."""
        return without_keys(self.content.message(version=self.version))


@dataclass(frozen=True, slots=True)
class PublishResult:
    """What one `publish` call changed."""

    changed: tuple[str, ...]  # workloads with a new version, sorted
    removed: tuple[str, ...]  # workloads that no longer exist, sorted
    pods_changed: bool  # the pod -> workload mapping changed


DEFAULT_RETAINED_VERSIONS = 16
DEFAULT_RETAINED_BYTES = 64 * 1024 * 1024
"""Retained contents' own bytes, all workloads: 16 one-endpoint changes of 8 workloads of
2,000 Services take about 7 MiB, 17 settings edits of them 41 MiB (tests/bench/retention.py)."""
DEFAULT_DELTA_CACHE_BYTES = 32 * 1024 * 1024
"""Cached delta messages, all workloads: thousands of small deltas, or about 17 deltas
that replace every backend of a 2,000-Service snapshot."""


class SnapshotStore:
    """Current published version of every workload, plus the pod -> workload mapping.

    `retained_bytes` and `delta_cache_bytes` are byte budgets over all workloads (0 =
    unbounded); `retained_versions` bounds the count per workload.
    """

    def __init__(
        self,
        retained_versions: int = DEFAULT_RETAINED_VERSIONS,
        retained_bytes: int = DEFAULT_RETAINED_BYTES,
        delta_cache_bytes: int = DEFAULT_DELTA_CACHE_BYTES,
    ) -> None:
        if retained_versions < 1:
            raise ValueError(f"retained_versions must be at least 1, not {retained_versions}")
        if retained_bytes < 0 or delta_cache_bytes < 0:
            raise ValueError("byte budgets must be at least 0 (0 = unbounded)")
        self.retained_versions = retained_versions
        self.retained_budget = retained_bytes
        self.delta_cache_budget = delta_cache_bytes
        # Per workload: content hash -> parts of the last `retained_versions` contents,
        # oldest first, the current one last.
        self._retained: dict[str, OrderedDict[str, Retained]] = {}
        # Replaced (non-current) retained contents of every workload, replaced longest ago
        # first: the eviction order of the byte budget.
        self._replaced: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._refs = BackendRefs()
        self._fixed_total = 0  # replaced contents' `fixed` bytes
        # Per workload: base content hash -> ServerMessage(delta=...) to the current version;
        # every cached (workload, base) least recently used first, their bytes summed.
        self._deltas: dict[str, dict[str, bytes]] = {}
        self._delta_lru: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._delta_total = 0
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
            gone = self._current.pop(workload)
            self._refs.count(gone.content.parts.backends.values(), CURRENT, -1)
            self._drop_deltas(workload)
            for content_hash in list(self._retained.get(workload, ())):
                self._forget(workload, content_hash)
            self._retained.pop(workload, None)
        self._evict_over_budget()  # once all moved: sharing between workloads is known
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
        self._drop_deltas(workload)
        self._retain(workload, content, current, version)
        self._current[workload] = Published(
            workload,
            version,
            content,
            published_at=time.monotonic(),
            bases=self._bases(workload),
        )
        return True

    def _retain(
        self,
        workload: str,
        content: SnapshotContent,
        replaced: Published | None,
        version: int = 0,
    ) -> None:
        """Keep `content`'s parts as the newest of its workload, within the count, and
        count who holds which backend."""
        retained = self._retained.setdefault(workload, OrderedDict())
        self._forget(workload, content.content_hash)  # content going back: current again
        moved: tuple[str, tuple[str, ...] | None, tuple[str, ...] | None] | None = None
        if replaced is None:
            self._refs.count(content.parts.backends.values(), CURRENT, 1)
        else:
            before = replaced.content.parts
            derived, content.derived = content.derived, None  # read once, then let go
            if derived is not None and derived.parts is not before:
                derived = None  # said of another content than the one it replaces
            if derived is not None:  # the encoder said what moved (not kept: its parts)
                moved = (replaced.content_hash, derived.backends, derived.groups)
            if derived is not None and derived.backends is not None:
                gone, added = unshared_named(before, content.parts, derived.backends)
            else:
                gone, added = unshared(before, content.parts)
            self._refs.count(added, CURRENT, 1)
            self._refs.count(gone, CURRENT, -1)
            previous = retained.get(replaced.content_hash)
            if previous is not None:
                previous.own = tuple(gone)
                groups = derived.groups if derived is not None else None
                previous.fixed = fixed_bytes(
                    before, content.parts, groups, len(gone)
                ) + sys.getsizeof(previous.own)
                self._refs.count(previous.own, REPLACED, 1)
                self._fixed_total += previous.fixed
                self._replaced[(workload, replaced.content_hash)] = None
        retained[content.content_hash] = Retained(content.parts, version=version, moved=moved)
        while len(retained) > self.retained_versions:
            self._forget(workload, next(iter(retained)))

    def _forget(self, workload: str, content_hash: str) -> None:
        """Stop retaining one content (absent: nothing), and its cached delta."""
        retained = self._retained.get(workload)
        gone = retained.pop(content_hash, None) if retained is not None else None
        if gone is None:
            return
        self._refs.count(gone.own, REPLACED, -1)
        self._fixed_total -= gone.fixed
        self._replaced.pop((workload, content_hash), None)
        cache = self._deltas.get(workload)
        if cache is not None and content_hash in cache:
            self._delta_total -= len(cache.pop(content_hash))
            self._delta_lru.pop((workload, content_hash), None)

    def _evict_over_budget(self) -> None:
        """Forget the contents replaced longest ago until the retained ones fit the
        budget; the current versions (never in `_replaced`) stay. A current version whose
        base went is republished with the bases left, so no stream is promised a delta
        the store cannot build."""
        if not self.retained_budget:
            return
        touched: set[str] = set()
        while self.retained_bytes > self.retained_budget and self._replaced:
            workload, content_hash = next(iter(self._replaced))
            self._forget(workload, content_hash)
            touched.add(workload)
        for workload in touched:
            current = self._current.get(workload)
            if current is not None:
                self._current[workload] = replace(current, bases=self._bases(workload))

    def _bases(self, workload: str) -> frozenset[str]:
        """The retained contents a delta to the current version (the newest) can start
        from."""
        retained = self._retained.get(workload)
        if not retained:
            return frozenset()
        return frozenset(retained) - {next(reversed(retained))}

    def _drop_deltas(self, workload: str) -> None:
        """Forget the cached deltas to `workload`'s current version (its content changed
        or it was removed)."""
        for base, message in self._deltas.pop(workload, {}).items():
            self._delta_total -= len(message)
            self._delta_lru.pop((workload, base), None)

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

    def snapshot_at(self, workload: str, version: int) -> pb.Snapshot | None:
        """Version `version` of `workload` while it is retained (inspection: `controlplane
        status --diff`), else None; parsed on demand, certificates without pem as
        `Published.snapshot` shows them."""
        for content_hash, kept in self._retained.get(workload, {}).items():
            if kept.version == version:
                snapshot = pb.Snapshot.FromString(kept.parts.join())
                snapshot.version, snapshot.content_hash = version, content_hash
                return without_keys(snapshot)
        return None

    def versions_held(self, workload: str) -> list[int]:
        """The versions of `workload` that `snapshot_at` can still give, ascending."""
        return sorted(k.version for k in self._retained.get(workload, {}).values())

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
        key = (workload, base_hash)
        cache = self._deltas.setdefault(workload, {})
        message = cache.get(base_hash)
        if message is not None:
            self._delta_lru.move_to_end(key)
            return message
        retained = self._retained[workload]
        # From the version just before: only the backends the encoder re-encoded.
        current = retained.get(published.content_hash)
        moved = current.moved if current is not None else None
        body = delta.delta_bytes(
            retained[base_hash].parts,
            published.content.parts,
            base_hash,
            published.content_hash,
            published.version,
            *(moved[1:] if moved is not None and moved[0] == base_hash else (None, None)),
        )
        message = delta.server_message_with_delta(body)
        budget = self.delta_cache_budget
        if budget and len(message) > budget:
            return message  # larger than the whole cache: built for this stream only
        cache[base_hash] = message
        self._delta_lru[key] = None
        self._delta_total += len(message)
        while budget and self._delta_total > budget:
            (lru_workload, lru_base), _ = self._delta_lru.popitem(last=False)
            self._delta_total -= len(self._deltas[lru_workload].pop(lru_base))
        return message

    @property
    def retained_count(self) -> int:
        """Contents retained over all workloads (the current ones included)."""
        return sum(len(r) for r in self._retained.values())

    @property
    def retained_bytes(self) -> int:
        """Bytes held only as delta bases: the backends that replaced contents hold and
        no current version does (each object once, however many workloads share it),
        their other unshared parts and backends dicts. At most the budget after each
        publish."""
        return self._refs.only_replaced + self._fixed_total

    @property
    def delta_cache_bytes(self) -> int:
        """Bytes of the cached delta messages (at most the budget)."""
        return self._delta_total

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
