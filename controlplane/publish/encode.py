"""The encoder: a workload's typed snapshot -> snapshot bytes and content hash.

The computation returns `WorkloadSnapshot`s and knows no protobuf; this is the one place
they become the wire form (docs/design.md, "Architecture"), each part written by
encode_parts.py. A snapshot is its
`ContentParts`: workload, peers, each backend's framed bytes in name order, frontends,
warnings, the route model's listeners, each certificate's framed bytes in name order, the
TLS passthrough listeners: the fields in number order, so the bytes equal protobuf's
deterministic serialization; each listener's rules travel as route groups (one per
listener and host, field 18). Encoding 84,000 slots is most of a full computation, so an
`Encoder` keeps each backend's bytes by the identity of its `BackendSpec`: the incremental
`Computer` hands back the same spec objects for unchanged Services, and only changed
backends are encoded again. Certificates are kept the same way, by the identity of their
`Certificate`: a rotated one is encoded alone, so a delta carries it alone.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, count
from operator import is_not
from typing import TypeVar

from immutables import Map

from controlplane.publish import wire
from controlplane.publish.content import Derived, SnapshotContent
from controlplane.publish.encode_parts import (
    backend_bytes,
    certificate_bytes,
    frontends_bytes,
    listener_tail,
    peers_bytes,
    route_rule,
    snapshot_warnings_bytes,
    tls_listeners_bytes,
)
from controlplane.publish.route_groups import Group, ListenerGroups, regroup, replaced_rules
from controlplane.snapshot import (
    BackendSpec,
    Certificate,
    EditedBackends,
    RouteRule,
    WorkloadSnapshot,
)
from peerplane import protowire
from peerplane.parts import (
    SNAPSHOT_ROUTE_GROUPS,
    ContentParts,
    digest,
    listener_name,
    replaced_digests,
    spliced_group_digests,
)
from peerplane.persistent import persistent
from peerplane.v1 import peerplane_pb2 as pb

GROUP_RULES = wire.number(pb.RouteGroup, "rules")
SNAPSHOT_LISTENERS = wire.number(pb.Snapshot, "http_listeners")

Entry = TypeVar("Entry", bound=tuple[object, ...])

# id(spec) -> (spec, its Snapshot.backends entry, the entry's digest); the spec is held so
# its id stays unique.
_BackendCache = dict[int, tuple[BackendSpec, bytes, bytes]]
# id(certificate) -> (certificate, its Snapshot.certificates entry), likewise.
_CertificateCache = dict[int, tuple[Certificate, bytes]]


@dataclass(frozen=True, slots=True)
class _Encoded:
    """One workload's last encoding: what the next one can reuse without a pass over
    every backend."""

    snapshot: WorkloadSnapshot
    parts: ContentParts
    backend_warnings: int  # sum of the backends' warnings
    # each listener's route groups (`route_groups.ListenerGroups`), by listener name
    groups: Mapping[str, ListenerGroups]


@dataclass(frozen=True, slots=True)
class _Replaced:
    """The backends of a version whose specs were replaced in place (`Encoder._replaced`)."""

    backends: Map[str, bytes]  # persistent: the last version's, patched
    digests: Map[str, bytes]
    order: Sequence[str]  # the backends' names in payload order (the last version's)
    joined: bytes | None  # the digests joined, spliced from the last version's
    warnings: int
    names: tuple[str, ...]  # the backends replaced


def _slashed(name: str) -> str:
    return f"{name}/"


class Encoder:
    """Encodes computations one after the other, reusing unchanged backends' bytes.

    Backend bytes are kept by the identity of their spec; a workload whose backends are
    the last call's in the same names and order but for a few replaced specs is encoded
    from its last parts in O(replaced) (the specs compared by identity in C), and its
    peers, frontends, warnings, listeners and certificates bytes are reused when their
    objects are the same (the incremental assembly keeps them); certificates, like
    backends, are kept by the identity of each `Certificate`. A spec or route rule another
    one replaced leaves its cache as its successor is encoded (`_retire`), so the caches
    hold what the last call served: kept until a sweep, the replaced ones made the
    control plane's memory rise for hours of changes at 8,000 Services (issue 33,
    docs/findings.md). The sweep stays for what a retirement does not see (a Service or
    a listener gone with its workload), at most twice the current entries.
    """

    def __init__(self) -> None:
        self._backends: _BackendCache = {}
        self._certificates: _CertificateCache = {}
        self._workloads: dict[str, _Encoded] = {}
        # id(RouteRule) -> the rule and its framed bytes (a `RouteGroup.rules` entry): a
        # route change encodes its rules only; a group is the join of its rules' bytes.
        self._rules: dict[int, tuple[RouteRule, bytes]] = {}
        self.encoded_groups = 0  # route groups encoded (not reused) by the last call
        self.encoded_rules = 0  # route rules encoded (not reused) by the last call
        self.encoded = 0  # backends encoded (not reused) by the last call
        self.encoded_certificates = 0  # certificates encoded (not reused) by the last call

    @property
    def cached_backends(self) -> int:
        """Backends whose bytes are kept for the next call."""
        return len(self._backends)

    @property
    def cached_rules(self) -> int:
        """Route rules whose bytes are kept for the next call."""
        return len(self._rules)

    def encode(self, snapshots: Mapping[str, WorkloadSnapshot]) -> dict[str, SnapshotContent]:
        """Every workload's content, in the order given."""
        self.encoded = self.encoded_certificates = 0
        self.encoded_rules = self.encoded_groups = 0
        cache = self._backends
        current = {
            key: self._content(s, self._workloads.get(key), cache) for key, s in snapshots.items()
        }
        self._workloads = {key: encoded for key, (_, encoded) in current.items()}
        workloads = snapshots.values()
        self._backends = _swept(
            cache,
            sum(len(s.backends) for s in workloads),
            (spec for s in workloads for spec in s.backends),
            64,
        )
        self._certificates = _swept(
            self._certificates,
            sum(len(s.certificates) for s in workloads),
            (certificate for s in workloads for certificate in s.certificates),
            16,
        )
        listeners = [listener for s in workloads for listener in s.http_listeners]
        self._rules = _swept(
            self._rules,
            sum(len(listener.rules) for listener in listeners),
            (rule for listener in listeners for rule in listener.rules),
            64,
        )
        return {key: content for key, (content, _) in current.items()}

    def _certificate_bytes(self, certificate: Certificate) -> bytes:
        hit = self._certificates.get(id(certificate))
        if hit is None or hit[0] is not certificate:
            hit = (certificate, certificate_bytes(certificate))
            self._certificates[id(certificate)] = hit
            self.encoded_certificates += 1
        return hit[1]

    def _hit(self, spec: BackendSpec, cache: _BackendCache) -> tuple[BackendSpec, bytes, bytes]:
        hit = cache.get(id(spec))
        if hit is None or hit[0] is not spec:
            framed = backend_bytes(spec)
            hit = (spec, framed, digest(framed))
            cache[id(spec)] = hit
            self.encoded += 1
        return hit

    def _listeners_bytes(self, snapshot: WorkloadSnapshot) -> bytes:
        """Field 14 (`peerplane.parts.listeners_part` of the listeners): each listener's
        port and its fields after its rules (contract 2: the rules travel in groups)."""
        out = [
            protowire.length_delimited(
                SNAPSHOT_LISTENERS,
                pb.HttpListener(port=listener.port).SerializeToString() + listener_tail(listener),
            )
            for listener in snapshot.http_listeners
        ]
        return b"".join(out)

    def _frame_group(self, name: str, host: str, held: tuple[RouteRule, ...]) -> Group:
        """One route group framed and digested, from its rules' cached bytes."""
        rules_cache = self._rules
        framed_rules: list[bytes] = []
        for rule in held:
            hit = rules_cache.get(id(rule))
            if hit is None or hit[0] is not rule:
                body = route_rule(rule).SerializeToString(deterministic=True)
                hit = (rule, protowire.length_delimited(GROUP_RULES, body))
                rules_cache[id(rule)] = hit
                self.encoded_rules += 1
            framed_rules.append(hit[1])
        head = pb.RouteGroup(listener=name, host=host).SerializeToString()
        framed = protowire.length_delimited(SNAPSHOT_ROUTE_GROUPS, b"".join((head, *framed_rules)))
        self.encoded_groups += 1
        return Group(held, framed, digest(framed))

    def _route_groups(
        self, snapshot: WorkloadSnapshot, last: Mapping[str, ListenerGroups]
    ) -> dict[str, ListenerGroups]:
        """Field 18: each listener's rules grouped by host, framed and digested
        (`route_groups.regroup`: only the hosts of the rules added or removed since the
        listener's last grouping are grouped and framed again)."""
        return {
            name: regroup(name, listener.rules, last.get(name), self._frame_group)
            for listener in snapshot.http_listeners
            for name in (listener_name(listener.port, listener.address),)
        }

    def _content(
        self, snapshot: WorkloadSnapshot, last: _Encoded | None, cache: _BackendCache
    ) -> tuple[SnapshotContent, _Encoded]:
        found = self._replaced(snapshot, last, cache) if last is not None else None
        touched: tuple[str, ...] | None = None
        backend_joined: bytes | None = None
        backend_order: Sequence[str] | None = None
        backends: Mapping[str, bytes]
        backend_digests: Mapping[str, bytes]
        if found is None:
            hits = [self._hit(spec, cache) for spec in snapshot.backends]
            if last is not None:
                served = set(map(id, snapshot.backends))
                _retire(cache, (b for b in last.snapshot.backends if id(b) not in served))
            backends = {hit[0].name: hit[1] for hit in hits}
            backend_digests = {hit[0].name: hit[2] for hit in hits}
            backend_warnings = sum(len(spec.warnings) for spec in snapshot.backends)
        else:
            assert last is not None
            backends, backend_digests, backend_order = found.backends, found.digests, found.order
            backend_joined, backend_warnings, touched = found.joined, found.warnings, found.names
        peers = frontends = warnings = listeners = tls_listeners = None
        groups: Mapping[str, ListenerGroups] | None = None
        touched_groups: tuple[str, ...] | None = None
        certificates: Mapping[str, bytes] | None = None
        if last is not None:
            before = last.snapshot
            if snapshot.peers is before.peers or snapshot.peers == before.peers:
                peers = last.parts.peers
            if (
                snapshot.http_frontend is before.http_frontend
                and snapshot.tcp_frontends is before.tcp_frontends
            ):
                frontends = last.parts.frontends
            if snapshot.warnings == before.warnings:
                warnings = last.parts.warnings
            if snapshot.http_listeners is before.http_listeners:
                listeners = last.parts.listeners
                groups = last.groups
                touched_groups = ()
            if snapshot.certificates is before.certificates:
                certificates = last.parts.certificates
            if snapshot.tls_listeners is before.tls_listeners:
                tls_listeners = last.parts.tls_listeners
        if certificates is None:
            certificates = {
                c.name: self._certificate_bytes(c) for c in sorted(snapshot.certificates, key=_name)
            }
        if groups is None:
            last_groups = last.groups if last is not None else {}
            groups = self._route_groups(snapshot, last_groups)
            touched_groups = _touched(groups, last_groups)
            if last is not None:
                _retire(self._rules, replaced_rules(last.groups, groups))
        route_groups, order = _joined(groups, "framed")
        group_digests = _joined(groups, "digests")[0]
        joined = None
        if last is not None and touched_groups is not None:
            joined = spliced_group_digests(last.parts, group_digests, order, touched_groups)
        parts = ContentParts(
            workload=pb.Snapshot(workload=snapshot.workload).SerializeToString(),
            peers=peers_bytes(snapshot) if peers is None else peers,
            backends=backends,
            frontends=frontends_bytes(snapshot) if frontends is None else frontends,
            warnings=snapshot_warnings_bytes(snapshot) if warnings is None else warnings,
            listeners=self._listeners_bytes(snapshot) if listeners is None else listeners,
            certificates=certificates,
            tls_listeners=tls_listeners_bytes(snapshot) if tls_listeners is None else tls_listeners,
            route_groups=route_groups,
            backend_digests=backend_digests,
            group_digests=group_digests,
            group_order=order,
            group_joined=joined,
            backend_joined=backend_joined,
            backend_order=backend_order,
        )
        if last is not None:
            last.parts.release_joined()
        content = SnapshotContent.of_parts(
            snapshot.workload,
            parts,
            peers=len(snapshot.peers.peers),
            backends=len(snapshot.backends),
            warnings=len(snapshot.warnings) + backend_warnings,
            derived=Derived(last.parts, touched, touched_groups) if last is not None else None,
        )
        return content, _Encoded(snapshot, parts, backend_warnings, groups)

    def _replaced(
        self, snapshot: WorkloadSnapshot, last: _Encoded, cache: _BackendCache
    ) -> _Replaced | None:
        """The backends' bytes, digests (and those joined) and warnings from `last`'s when
        only some specs were replaced in place (same count, same names in the same
        order), with the names of those replaced; else None."""
        old, new = last.snapshot.backends, snapshot.backends
        if len(old) != len(new):
            return None
        # Persistent maps patched for the replaced specs: copying two dicts of 8,000
        # entries per endpoint change (and freeing them with the version) was O(backends).
        parts = last.parts
        backends = persistent(parts.backends).mutate()
        digests = persistent(parts.backend_digests).mutate()
        order = parts.backend_order
        if order is None:  # the last version's dicts are in payload order
            order = tuple(parts.backends)
        warnings = last.backend_warnings
        touched: list[str] = []
        replaced: list[BackendSpec] = []
        positions: list[tuple[int, bytes]] = []
        for index in _differing(old, new):
            before, spec = old[index], new[index]
            if before.name != spec.name:
                return None
            _, backends[spec.name], found = self._hit(spec, cache)
            digests[spec.name] = found
            positions.append((index, found))
            touched.append(spec.name)
            replaced.append(before)
            warnings += len(spec.warnings) - len(before.warnings)
        _retire(cache, replaced)
        # `last`'s digests were joined for its content hash; never joined here only to splice
        joined = replaced_digests(parts.backend_joined, positions, len(new))
        return _Replaced(
            backends.finish(), digests.finish(), order, joined, warnings, tuple(touched)
        )


def _differing(old: tuple[BackendSpec, ...], new: tuple[BackendSpec, ...]) -> Iterable[int]:
    """The indexes where `new` (as long as `old`) holds another spec than `old`: those the
    assembly says it replaced when `new` is an `EditedBackends` of `old` (found by name,
    O(replaced x log N)), else every index compared by identity (O(N), at C speed)."""
    if isinstance(new, EditedBackends) and new.edited_from == id(old):
        indexes = [bisect_left(new, name, key=_spec_name) for name in new.names]
        if all(
            index < len(new) and new[index].name == name == old[index].name
            for index, name in zip(indexes, new.names, strict=True)
        ):
            return [index for index in indexes if old[index] is not new[index]]
    return compress(count(), map(is_not, old, new))


def _spec_name(spec: BackendSpec) -> str:
    return spec.name


def _joined(
    groups: Mapping[str, ListenerGroups], field: str
) -> tuple[Mapping[str, bytes], list[str] | None]:
    """The listeners' `framed` or `digests` by group key, and the keys in key order when
    the dict does not hold them so (`ContentParts.group_order`): by listener name
    followed by "/" ("80.1.2.3:443/" sorts before "80/"), each listener's own in key
    order. One listener's dict itself (the common case: no copy)."""
    names = sorted(groups, key=_slashed)
    if len(names) == 1:
        one = groups[names[0]]
        found: Mapping[str, bytes] = getattr(one, field)
        return found, one.order
    joined: dict[str, bytes] = {}
    ordered = any(groups[name].order is not None for name in names)
    order: list[str] | None = [] if ordered else None
    for name in names:
        joined.update(getattr(groups[name], field))
        if order is not None:
            order.extend(groups[name].keys())
    return joined, order


def _touched(
    groups: Mapping[str, ListenerGroups], last: Mapping[str, ListenerGroups]
) -> tuple[str, ...] | None:
    """The group keys that may differ from the listeners' `last` groupings (each patched
    from its own); None when not known: a listener came or went, or was grouped from
    scratch."""
    if not last or groups.keys() != last.keys():
        return None
    keys: list[str] = []
    for name, grouping in groups.items():
        if grouping is last[name]:
            continue
        if grouping.touched is None:
            return None
        keys.extend(grouping.touched)
    return tuple(keys)


def _retire(cache: dict[int, Entry], replaced: Iterable[object]) -> None:
    """Drop the entries of objects the last call served and this one replaced. Another
    workload may still serve one of them (a Service planned alike for two workloads, the
    other not yet changed): then it is encoded again if that workload ever needs its
    bytes from the cache, never served stale (entries are checked by identity)."""
    for item in replaced:
        hit = cache.get(id(item))
        if hit is not None and hit[0] is item:
            del cache[id(item)]


def _swept(
    cache: dict[int, Entry], live: int, in_use: Iterable[object], slack: int
) -> dict[int, Entry]:
    """`cache` (kept by object identity) itself while it holds at most twice the `live`
    objects (plus `slack`); past that, only the entries of the objects `in_use` (a lazy
    iterable: walked only then)."""
    if len(cache) <= 2 * live + slack:
        return cache
    return {id(item): hit for item in in_use if (hit := cache.get(id(item))) is not None}


def _name(certificate: Certificate) -> str:
    return certificate.name


def encode(snapshots: Mapping[str, WorkloadSnapshot]) -> dict[str, SnapshotContent]:
    """Every workload's content, encoded from scratch (one-shot callers: CLI, tests)."""
    return Encoder().encode(snapshots)


def encode_one(snapshot: WorkloadSnapshot) -> SnapshotContent:
    """One workload's content, encoded from scratch."""
    return Encoder().encode({snapshot.workload: snapshot})[snapshot.workload]
