"""The parts of a snapshot, their join (the payload), the content hash over the parts'
digests, and which backends, certificates and route groups changed between two versions'
parts.

The content hash is defined here, once (contract 2): the deterministic serialization of a
`Snapshot` with `version` and `content_hash` unset is the join of its parts in field order
(workload, peers, each backend's framed entry, frontends, warnings, listeners, each
certificate's framed entry, TLS listeners, each route group's framed entry); the hash is
SHA-256 over the join of each part's SHA-256 digest, in that order. Each part starts with
its own field's tag (or is empty), so the list of parts, and with it the payload, is
determined by the list of digests. Both sides keep each backend's, certificate's and
group's digest with its bytes, so a delta is verified by hashing its changed parts and
one join of 32-byte digests. The control plane's encoder builds `ContentParts` from the
bytes it encodes (and deltas from two of them); the agent holds one per snapshot and moves
it with deltas (docs/design.md, "Deltas").
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter

from peerplane.protowire import framed_backend, length_delimited
from peerplane.v1 import peerplane_pb2 as pb

SNAPSHOT_CERTIFICATES = int(pb.Snapshot.DESCRIPTOR.fields_by_name["certificates"].number)
SNAPSHOT_ROUTE_GROUPS = int(pb.Snapshot.DESCRIPTOR.fields_by_name["route_groups"].number)

CONTRACT = 2
"""The snapshot contract both sides of this build speak (`Hello.contract`): route rules in
`route_groups`, the content hash over the parts' digests. An agent reporting less is
refused by the control plane."""

Digests = Mapping[str, bytes]


def digest(part: bytes) -> bytes:
    """One part's SHA-256 digest (32 bytes)."""
    return hashlib.sha256(part).digest()


# id(part) -> (part, digest) of the single parts (peers, frontends, ...) of at least
# _CACHED_FROM bytes: versions share an unchanged part's bytes object, so its digest is
# computed once. The part is held, so its id stays unique while cached; and so the cache
# also keeps parts no version holds any more: at most _SINGLE_MAX of them and, beyond the
# last one cached, _SINGLE_MAX_BYTES (256 replaced listener parts of 585 KB were 146 MB).
_SINGLE: dict[int, tuple[bytes, bytes]] = {}
_CACHED_FROM = 1024
_SINGLE_MAX = 256
_SINGLE_MAX_BYTES = 16 << 20
_single_bytes = 0  # the length of the parts in _SINGLE


def single_digest(part: bytes) -> bytes:
    """`digest(part)`, remembered by the identity of large parts."""
    global _single_bytes
    if len(part) < _CACHED_FROM:
        return digest(part)
    hit = _SINGLE.get(id(part))
    if hit is not None and hit[0] is part:
        return hit[1]
    found = digest(part)
    if len(_SINGLE) >= _SINGLE_MAX or _single_bytes + len(part) > _SINGLE_MAX_BYTES:
        _SINGLE.clear()
        _single_bytes = 0
    _SINGLE[id(part)] = (part, found)
    _single_bytes += len(part)
    return found


def in_order(by_key: Mapping[str, bytes], order: Sequence[str] | None) -> Iterable[bytes]:
    """`by_key`'s values in `order` (None: the mapping's own), at C speed: one
    `itemgetter` call looks up every key (half the time of a `map` over `__getitem__`,
    which calls back per key: ~0.7 ms of each content hash at 10,000 groups, on both
    sides)."""
    if order is None:
        return by_key.values()
    if len(order) < 2:  # itemgetter of one key returns the value, not a tuple
        return [by_key[key] for key in order]
    found: tuple[bytes, ...] = itemgetter(*order)(by_key)
    return found


def digests_of(framed: Mapping[str, bytes]) -> dict[str, bytes]:
    """Each framed entry's digest, in the same order."""
    return {name: digest(data) for name, data in framed.items()}


def moved_digests(
    before: Digests, framed: Mapping[str, bytes], changed: Iterable[str], removed: Iterable[str]
) -> dict[str, bytes]:
    """The digests of `framed` from `before`'s (the previous version's), hashing only the
    `changed` entries (added or replaced) and dropping the `removed`: O(changed) hashing,
    one dict copy at C speed (a Python pass in `framed`'s order only when one was added)."""
    kept = dict(before)
    for name in removed:
        del kept[name]
    added = False
    for name in changed:
        added = added or name not in kept
        kept[name] = digest(framed[name])
    if added:
        return {name: kept[name] for name in framed}
    return kept


DIGEST_SIZE = 32  # bytes of a SHA-256 digest
# More route groups added, changed or removed than this at once: joined again, not spliced.
SPLICED_MAX = 64


def spliced_group_digests(
    before: ContentParts,
    digests: Mapping[str, bytes],
    order: Sequence[str] | None,
    touched: Collection[str],
) -> bytes | None:
    """The joined group digests (`ContentParts.joined_group_digests`) of the version whose
    digests are `digests` (its keys sorted in `order`, or `digests` in key order when
    None), from those of `before`, when the keys whose digest may differ are `touched`
    (added, changed or removed; every other key's digest is `before`'s): the removed
    digests cut out, the added put in and the changed replaced, each at its key's place
    found by bisection, a memory move of the joined bytes each. None for more than
    `SPLICED_MAX` keys (or a count that does not add up): joined on first use instead."""
    if len(touched) > SPLICED_MAX:
        return None
    joined = before.joined_group_digests()
    if not touched:
        return joined
    held = before.group_digests
    old_keys = before.group_order if before.group_order is not None else list(held)
    keys = order if order is not None else list(digests)
    out = bytearray(joined)
    gone = {bisect_left(old_keys, k) for k in touched if k not in digests and k in held}
    for at in sorted(gone, reverse=True):
        del out[at * DIGEST_SIZE : (at + 1) * DIGEST_SIZE]
    for key in sorted({k for k in touched if k in digests and k not in held}):
        at = bisect_left(keys, key) * DIGEST_SIZE
        out[at:at] = digests[key]
    for key in touched:
        if key in digests and key in held:
            at = bisect_left(keys, key) * DIGEST_SIZE
            out[at : at + DIGEST_SIZE] = digests[key]
    if len(out) != DIGEST_SIZE * len(keys):
        return None
    return bytes(out)


def replaced_digests(
    joined: bytes | None, replaced: Iterable[tuple[int, bytes]], count: int
) -> bytes | None:
    """`joined` (the digests of `count` entries, joined in order) with the digest at each
    position of `replaced` put in: one copy and a memory move per digest instead of a
    join of `count` digests, which reads every digest object (at 8,000 backends, out of
    the caches by the next change). None when `joined` is None or does not hold `count`
    digests, or for more than `SPLICED_MAX` replaced: joined on first use instead."""
    if joined is None or len(joined) != count * DIGEST_SIZE:
        return None
    out: bytearray | None = None
    for moved, (position, found) in enumerate(replaced):
        if moved >= SPLICED_MAX or not 0 <= position < count or len(found) != DIGEST_SIZE:
            return None
        if out is None:
            out = bytearray(joined)
        out[position * DIGEST_SIZE : (position + 1) * DIGEST_SIZE] = found
    return joined if out is None else bytes(out)


def group_key(listener: str, host: str) -> str:
    """A route group's key: "<listener>/<host>" (neither holds a "/")."""
    return f"{listener}/{host}"


def listener_name(port: int, address: str = "") -> str:
    """A listener as a route group names it: its port, or "<address>:<port>"."""
    return f"{address}:{port}" if address else str(port)


def route_group_key(group: pb.RouteGroup) -> str:
    return group_key(group.listener, group.host)


def framed_route_group(group: pb.RouteGroup) -> bytes:
    """The group's entry in a serialized Snapshot: tag, length, deterministic bytes."""
    return length_delimited(SNAPSHOT_ROUTE_GROUPS, group.SerializeToString(deterministic=True))


def payload_hash(parts: ContentParts) -> str:
    """The content hash of a snapshot's parts (the module's docstring)."""
    return parts.content_hash()


def contract_1_hash(parts: ContentParts) -> str:
    """The content hash a control plane of contract 1 sends: SHA-256 of the whole payload.
    An agent accepts it too, so agents upgrade before the control plane (O(snapshot),
    only while that control plane runs)."""
    return hashlib.sha256(parts.join()).hexdigest()


@dataclass(frozen=True, slots=True, eq=False)
class ContentParts:
    """A snapshot's encoded fields, in field-number order; their concatenation is the
    payload. `backends` holds each backend's framed bytes (its `Snapshot.backends` entry:
    tag, length, deterministic serialization) by name, in the payload's order. Bytes
    objects are shared between versions whose part did not change (compared by identity
    first), never mutated."""

    workload: bytes  # field 1
    peers: bytes  # field 4
    backends: Mapping[str, bytes]  # field 5 entries, by name, in payload order
    frontends: bytes  # fields 6 and 7
    warnings: bytes  # field 8
    # Field 14 (the route model's HTTP listeners): changes with `frontends` as one part of a
    # delta (`frontends_changed`), kept apart so the join stays in field order.
    listeners: bytes = b""
    # Field 15 entries (each certificate's framed bytes) by name, in name order: like the
    # backends, a delta carries only those that changed.
    # repr=False: they hold the private keys.
    certificates: Mapping[str, bytes] = field(default_factory=dict, repr=False)
    # Field 16 (TLS passthrough listeners): changes with `frontends`, like `listeners`.
    tls_listeners: bytes = b""
    # Field 18 entries (each route group's framed bytes) by key, in key order: a delta
    # carries only those that changed.
    route_groups: Mapping[str, bytes] = field(default_factory=dict)
    # Each backend's, certificate's and route group's digest, in the same order: given
    # by who builds the parts from others' (hashing only what changed), else computed.
    backend_digests: Digests = field(default_factory=dict, repr=False)
    certificate_digests: Digests = field(default_factory=dict, repr=False)
    group_digests: Digests = field(default_factory=dict, repr=False)
    # The route groups' keys in key order when `route_groups` and `group_digests` are not
    # in it (an agent appends the groups a delta adds: putting three dicts of 10,000
    # entries back in key order per new route cost milliseconds); None: they are.
    group_order: Sequence[str] | None = field(default=None, repr=False)
    # The group digests joined in key order (the content hash's last bytes): given by who
    # spliced them from the previous version's (`spliced_group_digests`: a few memory
    # moves instead of a look-up and a join of 10,000 digests per route change, on both
    # sides), else joined on first use and kept for the next version to splice.
    group_joined: bytes | None = field(default=None, repr=False)
    # The backend digests joined in payload order (the content hash's bytes after the
    # peers'): given by who replaced some backends in place from the previous version's
    # (`replaced_digests`), else joined on first use and kept for the next version.
    backend_joined: bytes | None = field(default=None, repr=False)
    # The backends' names in payload order when `backends` and `backend_digests` are not
    # in it: persistent maps (`immutables.Map`) the encoder patches for the backends an
    # endpoint change replaced in place, instead of copying two dicts of 8,000 entries
    # per change (and freeing them with the version); None: the dicts are in it.
    backend_order: Sequence[str] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for framed, name in (
            (self.backends, "backend_digests"),
            (self.certificates, "certificate_digests"),
            (self.route_groups, "group_digests"),
        ):
            held = getattr(self, name)
            if len(held) != len(framed):
                object.__setattr__(self, name, digests_of(framed))
                if name == "backend_digests":
                    object.__setattr__(self, "backend_joined", None)
        joined = self.backend_joined
        if joined is not None and len(joined) != DIGEST_SIZE * len(self.backend_digests):
            object.__setattr__(self, "backend_joined", None)

    def join(self) -> bytes:
        """The payload: the deterministic serialization without version and hash."""
        return b"".join(
            (
                self.workload,
                self.peers,
                *self.in_backend_order(self.backends),
                self.frontends,
                self.warnings,
                self.listeners,
                *self.certificates.values(),
                self.tls_listeners,
                *self.in_key_order(self.route_groups),
            )
        )

    def digests(self) -> bytes:
        """The join of the parts' digests in field order (what the content hash hashes)."""
        return b"".join(
            (
                digest(self.workload),
                single_digest(self.peers),
                self.joined_backend_digests(),
                single_digest(self.frontends),
                single_digest(self.warnings),
                single_digest(self.listeners),
                *self.certificate_digests.values(),
                single_digest(self.tls_listeners),
                self.joined_group_digests(),
            )
        )

    def joined_backend_digests(self) -> bytes:
        """The backends' digests joined in payload order (kept once joined)."""
        joined = self.backend_joined
        if joined is None:
            joined = b"".join(self.in_backend_order(self.backend_digests))
            object.__setattr__(self, "backend_joined", joined)
        return joined

    def release_joined(self) -> None:
        """Let go of the joined digests once the next version was derived from them: only
        the newest version splices (256 KiB at 8,000 backends, 320 KiB at 10,000 route
        groups, else kept by each retained version); joined again if ever needed."""
        object.__setattr__(self, "backend_joined", None)
        object.__setattr__(self, "group_joined", None)

    def joined_group_digests(self) -> bytes:
        """The route groups' digests joined in key order (kept once joined)."""
        joined = self.group_joined
        if joined is None:
            joined = b"".join(self.in_key_order(self.group_digests))
            object.__setattr__(self, "group_joined", joined)
        return joined

    def in_key_order(self, by_key: Mapping[str, bytes]) -> Iterable[bytes]:
        """The route groups' bytes or digests (`by_key`) in key order (`in_order`)."""
        return in_order(by_key, self.group_order)

    def in_backend_order(self, by_name: Mapping[str, bytes]) -> Iterable[bytes]:
        """The backends' bytes or digests (`by_name`) in payload order (`in_order`)."""
        return in_order(by_name, self.backend_order)

    def frontends_differ(self, other: ContentParts) -> bool:
        """Whether the delta part "frontends" (fields 6, 7, 14 and 16) differs."""
        return (
            self.frontends != other.frontends
            or self.listeners != other.listeners
            or self.tls_listeners != other.tls_listeners
        )

    def content_hash(self) -> str:
        """SHA-256 (hex) over the parts' digests: O(parts) bytes of 32, plus the parts
        whose digest is not known yet."""
        return hashlib.sha256(self.digests()).hexdigest()

    @classmethod
    def of_message(cls, snapshot: pb.Snapshot, sort_backends: bool = False) -> ContentParts:
        """The parts of a message; version and content hash are ignored. The backends
        follow the message's order, or their names' with `sort_backends`; ValueError when
        one name is listed twice."""
        listed: Iterable[pb.Backend] = snapshot.backends
        if sort_backends:
            listed = sorted(snapshot.backends, key=lambda b: b.name)
        backends: dict[str, bytes] = {}
        for backend in listed:
            if backend.name in backends:
                raise ValueError(f"snapshot lists backend {backend.name!r} twice")
            backends[backend.name] = framed_backend(backend)
        certificates: dict[str, bytes] = {}
        for certificate in sorted(snapshot.certificates, key=lambda c: c.name):
            if certificate.name in certificates:
                raise ValueError(f"snapshot lists certificate {certificate.name!r} twice")
            certificates[certificate.name] = framed_certificate(certificate)
        groups: dict[str, bytes] = {}
        for group in sorted(snapshot.route_groups, key=route_group_key):
            key = route_group_key(group)
            if key in groups:
                raise ValueError(f"snapshot lists route group {key!r} twice")
            groups[key] = framed_route_group(group)
        return cls(
            workload=workload_part(snapshot.workload),
            peers=peers_part(snapshot.peers if snapshot.HasField("peers") else None),
            backends=backends,
            frontends=frontends_part(
                snapshot.http_frontend if snapshot.HasField("http_frontend") else None,
                snapshot.tcp_frontends,
            ),
            warnings=warnings_part(snapshot.warnings),
            listeners=listeners_part(snapshot.http_listeners),
            certificates=certificates,
            tls_listeners=tls_listeners_part(snapshot.tls_listeners),
            route_groups=groups,
        )


def workload_part(workload: str) -> bytes:
    return pb.Snapshot(workload=workload).SerializeToString()


def peers_part(peers: pb.PeerSection | None) -> bytes:
    if peers is None:
        return b""
    return pb.Snapshot(peers=peers).SerializeToString(deterministic=True)


def frontends_part(http: pb.HttpFrontend | None, tcp: Sequence[pb.TcpFrontend]) -> bytes:
    if http is None:
        return pb.Snapshot(tcp_frontends=tcp).SerializeToString(deterministic=True)
    return pb.Snapshot(http_frontend=http, tcp_frontends=tcp).SerializeToString(deterministic=True)


def warnings_part(warnings: Sequence[pb.RejectedInput]) -> bytes:
    return pb.Snapshot(warnings=warnings).SerializeToString(deterministic=True)


def listeners_part(listeners: Sequence[pb.HttpListener]) -> bytes:
    if not listeners:
        return b""
    return pb.Snapshot(http_listeners=listeners).SerializeToString(deterministic=True)


def tls_listeners_part(listeners: Sequence[pb.TlsPassthroughListener]) -> bytes:
    if not listeners:
        return b""
    return pb.Snapshot(tls_listeners=listeners).SerializeToString(deterministic=True)


def framed_certificate(certificate: pb.Certificate) -> bytes:
    """The certificate's entry in a serialized Snapshot: tag, length, deterministic bytes."""
    return length_delimited(
        SNAPSHOT_CERTIFICATES, certificate.SerializeToString(deterministic=True)
    )


def changed_parts(
    before: Mapping[str, bytes], after: Mapping[str, bytes]
) -> tuple[dict[str, bytes], list[str]]:
    """The framed parts of `after` that `before` lacks or holds differently, by name in
    `after`'s order, and the names `before` has and `after` has not (sorted). Compared by
    identity first (shared bytes), then equality: one dict lookup per part."""
    changed = {
        name: framed
        for name, framed in after.items()
        if (held := before.get(name)) is not framed and held != framed
    }
    removed = sorted(name for name in before if name not in after)
    return changed, removed


def certificate_changes(old: ContentParts, new: ContentParts) -> tuple[dict[str, bytes], list[str]]:
    """`changed_parts` of the certificates (name order)."""
    return changed_parts(old.certificates, new.certificates)


def backend_changes(old: ContentParts, new: ContentParts) -> tuple[dict[str, bytes], list[str]]:
    """`changed_parts` of the backends (by name in `new`'s payload order)."""
    changed, removed = changed_parts(old.backends, new.backends)
    order = new.backend_order
    if order is not None and len(changed) > 1:  # persistent maps hold no order
        ranks = {name: rank for rank, name in enumerate(order)}
        changed = {name: changed[name] for name in sorted(changed, key=ranks.__getitem__)}
    return changed, removed


def route_group_changes(old: ContentParts, new: ContentParts) -> tuple[dict[str, bytes], list[str]]:
    """`changed_parts` of the route groups (key order)."""
    return changed_parts(old.route_groups, new.route_groups)
