"""The snapshot the agent holds, kept in parts, and the deltas that move it.

Pure. A `Held` snapshot keeps its `ContentParts` (the shared `peerplane.parts`: each
backend's framed bytes, its `Snapshot.backends` entry, and the other fields' bytes) beside
the message, each with its digest, so a `SnapshotDelta` is applied and its content hash
verified in O(changed parts): the changed backends, certificates and route groups are
hashed, then one join of 32-byte digests; the serialization of the whole snapshot is
never rebuilt nor hashed (docs/design.md, "The agent stream":
deltas on the agent side).

Every message held owns its memory (`owned`): protobuf (upb) parses a message and all its
submessages into one arena, freed only when none of them is referenced any more, so a
backend taken as is from a delta would keep that whole delta alive until the backend is
replaced, and one from the first full snapshot the whole snapshot (docs/design.md, "What
the agent holds").
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from google.protobuf.message import Message
from immutables import Map

from peerplane.parts import (
    ContentParts,
    backend_changes,
    certificate_changes,
    contract_1_hash,
    digest,
    framed_certificate,
    framed_route_group,
    frontends_part,
    listeners_part,
    moved_digests,
    peers_part,
    replaced_digests,
    route_group_changes,
    route_group_key,
    spliced_group_digests,
    tls_listeners_part,
    warnings_part,
)
from peerplane.persistent import persistent
from peerplane.protowire import framed_backend as framed
from peerplane.v1 import peerplane_pb2 as pb

P = TypeVar("P", bound=Message)


def owned(message: P) -> P:
    """`message` copied into memory of its own: what it was parsed with (the rest of a
    snapshot or delta) is freed when that is dropped, not when this is (module docstring)."""
    return type(message).FromString(message.SerializeToString())


def _owned_all(messages: Iterable[P]) -> tuple[P, ...]:
    return tuple(owned(m) for m in messages)


def _unframed(framed: bytes) -> pb.Snapshot:
    """A framed part (a Snapshot field's entry) parsed alone: its one message owns the
    arena with nothing else in it."""
    return pb.Snapshot.FromString(framed)


class DeltaError(ValueError):
    """A snapshot or delta the agent cannot hold; the text says why."""


@dataclass(frozen=True)
class ChangeSet:
    """What differs between the snapshot whose hash is `base` and the next one."""

    base: str
    backends: frozenset[str]  # added or changed
    removed: frozenset[str]
    peers: bool
    frontends: bool  # HTTP and TCP frontends or the HTTP / TLS listeners (one delta part)
    warnings: bool
    certificates: frozenset[str] = frozenset()  # added or changed
    removed_certificates: frozenset[str] = frozenset()
    route_groups: frozenset[str] = frozenset()  # keys of route groups added or changed
    removed_route_groups: frozenset[str] = frozenset()

    @property
    def routes(self) -> bool:
        """Whether the HTTP listeners' frontends may render differently: the listeners
        (with the frontends) or any route group changed."""
        return self.frontends or bool(self.route_groups or self.removed_route_groups)


@dataclass(frozen=True)
class Held:
    """A full snapshot, immutable by convention: messages and bytes are shared between
    versions, never mutated. `names` is sorted and `parts.backends` in that order, so the
    parts' join is the hashed payload."""

    workload: str
    version: int
    content_hash: str
    peers: pb.PeerSection | None
    http_frontend: pb.HttpFrontend | None
    tcp_frontends: Sequence[pb.TcpFrontend]
    warnings: Sequence[pb.RejectedInput]
    names: tuple[str, ...]
    backends: Mapping[str, pb.Backend]
    parts: ContentParts
    # The route model's HTTP listeners (field 14): they change with the frontends.
    http_listeners: Sequence[pb.HttpListener] = ()
    # TLS certificates by name (field 15) and passthrough listeners (field 16).
    certificates: Mapping[str, pb.Certificate] = field(default_factory=dict, repr=False)
    tls_listeners: Sequence[pb.TlsPassthroughListener] = ()
    # The listeners' rules (field 18, contract 2): each route group by key
    # (`parts.route_groups` holds their framed bytes, the render cache's keys), in key
    # order or, after a delta added groups, in `parts.group_order` (`group_keys`).
    route_groups: Mapping[str, pb.RouteGroup] = field(default_factory=dict)

    @property
    def framed(self) -> Mapping[str, bytes]:
        """Each backend's framed bytes by name (the render cache's keys)."""
        return self.parts.backends

    @property
    def peers_part(self) -> bytes:
        return self.parts.peers

    @property
    def frontends_part(self) -> bytes:
        return self.parts.frontends

    @property
    def listeners_part(self) -> bytes:
        return self.parts.listeners

    def route_rules(self) -> Iterator[pb.RouteRule]:
        """Every route rule held: the listeners' own (a contract-1 control plane's), then
        the route groups'."""
        for listener in self.http_listeners:
            yield from listener.rules
        for key in self.group_keys():
            yield from self.route_groups[key].rules

    def group_keys(self) -> Iterable[str]:
        """The route groups' keys in key order (the listeners' rule order)."""
        order = self.parts.group_order
        return order if order is not None else self.route_groups.keys()

    @classmethod
    def from_snapshot(cls, snapshot: pb.Snapshot) -> Held:
        """Hold a full snapshot (its claimed hash is kept as is); backends by name. Each
        backend, certificate and route group is parsed again from its framed part, on its
        own (`owned`, without serializing it twice)."""
        for what, listed in (
            ("backend", [b.name for b in snapshot.backends]),
            ("certificate", [c.name for c in snapshot.certificates]),
            ("route group", [route_group_key(g) for g in snapshot.route_groups]),
        ):
            seen: set[str] = set()
            for name in listed:
                if name in seen:
                    raise DeltaError(f"duplicate {what} {name!r}")
                seen.add(name)
        parts = ContentParts.of_message(snapshot, sort_backends=True)
        backends = {name: _unframed(data).backends[0] for name, data in parts.backends.items()}
        certificates = {
            name: _unframed(data).certificates[0] for name, data in parts.certificates.items()
        }
        groups = {key: _unframed(data).route_groups[0] for key, data in parts.route_groups.items()}
        peers = owned(snapshot.peers) if snapshot.HasField("peers") else None
        http = owned(snapshot.http_frontend) if snapshot.HasField("http_frontend") else None
        return cls(
            workload=snapshot.workload,
            version=snapshot.version,
            content_hash=snapshot.content_hash,
            peers=peers,
            http_frontend=http,
            tcp_frontends=_owned_all(snapshot.tcp_frontends),
            warnings=_owned_all(snapshot.warnings),
            names=tuple(backends),
            backends=backends,
            parts=parts,
            http_listeners=_owned_all(snapshot.http_listeners),
            certificates=certificates,
            tls_listeners=_owned_all(snapshot.tls_listeners),
            route_groups=groups,
        )

    def payload(self) -> bytes:
        """The deterministic serialization with version and content_hash unset."""
        return self.parts.join()

    def computed_hash(self) -> str:
        """The content hash exactly as the control plane computes it."""
        return self.parts.content_hash()

    def serialized(self) -> bytes:
        """The deterministic serialization with version and content_hash (the saved file)."""
        return b"".join(self.serialized_pieces())

    def serialized_pieces(self) -> tuple[bytes, ...]:
        """`serialized()` in the pieces it is joined from: written in order, they are the
        saved file without a second copy of it (9 MB at 8,000 Services) made first."""
        parts = self.parts
        head = pb.Snapshot(version=self.version, content_hash=self.content_hash)
        return (
            parts.workload,
            head.SerializeToString(deterministic=True),
            parts.peers,
            *parts.in_backend_order(parts.backends),
            parts.frontends,
            parts.warnings,
            parts.listeners,
            *parts.certificates.values(),
            parts.tls_listeners,
            *parts.in_key_order(parts.route_groups),
        )

    def message(self) -> pb.Snapshot:
        """A fresh pb.Snapshot of it (tools and tests; costs a whole parse)."""
        return pb.Snapshot.FromString(self.serialized())

    def apply(self, delta: pb.SnapshotDelta, verify: bool = True) -> tuple[Held, ChangeSet]:
        """The snapshot `delta` leads to from this one, verified against its hash, and what
        changed; DeltaError (nothing held changes) when it does not apply. `verify=False`:
        the result's hash is not computed (the saved journal's records, written by this
        agent from held parts and checked by their CRC, replayed onto a base whose hash
        was taken as sent)."""
        if delta.from_content_hash != self.content_hash:
            raise DeltaError(f"it applies to {delta.from_content_hash[:12] or 'nothing'}")
        if delta.workload != self.workload:
            raise DeltaError(f"workload {delta.workload!r} is not {self.workload!r}")
        backends, framed_by_name, changed, removed = _named_changes(
            "backend", self.backends, self.parts.backends, delta.backends,
            delta.removed_backends, framed, _name,
        )  # fmt: skip
        added = any(name not in self.backends for name in changed)
        if added:  # back into name order
            framed_by_name = {name: framed_by_name[name] for name in sorted(framed_by_name)}
        names = tuple(framed_by_name) if added or removed else self.names
        certificates, framed_certificates, certs_changed, certs_removed = self._certificates(delta)
        groups, framed_groups, groups_changed, groups_removed, order = self._route_groups(delta)
        old = self.parts
        group_digests = _group_digests(
            old.group_digests, framed_groups, groups_changed, groups_removed
        )
        peers, peers_bytes = self.peers, old.peers
        if delta.peers_changed:
            peers = owned(delta.peers) if delta.HasField("peers") else None
            peers_bytes = peers_part(peers)
        http, tcp, frontends_bytes = self.http_frontend, self.tcp_frontends, old.frontends
        listeners, listeners_bytes = self.http_listeners, old.listeners
        tls, tls_bytes = self.tls_listeners, old.tls_listeners
        if delta.frontends_changed:  # HTTP and TCP frontends and the listeners, together
            http = owned(delta.http_frontend) if delta.HasField("http_frontend") else None
            tcp = _owned_all(delta.tcp_frontends)
            frontends_bytes = frontends_part(http, tcp)
            listeners = _owned_all(delta.http_listeners)
            listeners_bytes = listeners_part(listeners)
            tls = _owned_all(delta.tls_listeners)
            tls_bytes = tls_listeners_part(tls)
        warnings, warnings_bytes = self.warnings, old.warnings
        if delta.warnings_changed:
            warnings = _owned_all(delta.warnings)
            warnings_bytes = warnings_part(warnings)
        backend_digests = moved_digests(old.backend_digests, framed_by_name, changed, removed)
        backend_joined = None
        if not added and not removed:  # replaced in place: splice their digests
            backend_joined = replaced_digests(
                old.backend_joined,  # joined when it was verified; else joined on use
                _positions(names, changed, backend_digests),
                len(names),
            )
        parts = ContentParts(
            workload=old.workload,
            peers=peers_bytes,
            backends=framed_by_name,
            frontends=frontends_bytes,
            warnings=warnings_bytes,
            listeners=listeners_bytes,
            certificates=framed_certificates,
            tls_listeners=tls_bytes,
            route_groups=framed_groups,
            backend_digests=backend_digests,
            certificate_digests=moved_digests(
                old.certificate_digests, framed_certificates, certs_changed, certs_removed
            ),
            group_digests=group_digests,
            group_order=order,
            group_joined=spliced_group_digests(
                old, group_digests, order, groups_changed | groups_removed
            ),
            backend_joined=backend_joined,
        )
        result = Held(
            workload=self.workload,
            version=delta.version,
            content_hash=delta.to_content_hash,
            peers=peers,
            http_frontend=http,
            tcp_frontends=tcp,
            warnings=warnings,
            names=names,
            backends=backends,
            parts=parts,
            http_listeners=listeners,
            certificates=certificates,
            tls_listeners=tls,
            route_groups=groups,
        )
        got = result.computed_hash() if verify else delta.to_content_hash
        if got != delta.to_content_hash and contract_1_hash(parts) != delta.to_content_hash:
            raise DeltaError(f"the result's content hash is {got[:12]}")
        change = ChangeSet(
            base=self.content_hash,
            backends=frozenset(n for n in changed if old.backends.get(n) != framed_by_name[n]),
            removed=frozenset(removed),
            peers=peers_bytes != old.peers,
            frontends=parts.frontends_differ(old),
            warnings=warnings_bytes != old.warnings,
            certificates=frozenset(
                n for n in certs_changed if old.certificates.get(n) != framed_certificates[n]
            ),
            removed_certificates=certs_removed,
            route_groups=frozenset(
                k for k in groups_changed if old.route_groups.get(k) != framed_groups[k]
            ),
            removed_route_groups=groups_removed,
        )
        return result, change

    def _certificates(
        self, delta: pb.SnapshotDelta
    ) -> tuple[dict[str, pb.Certificate], dict[str, bytes], set[str], frozenset[str]]:
        """The certificates and their framed bytes (name order) after `delta`, the names
        it sent and the names it removed."""
        if not delta.certificates and not delta.removed_certificates:
            return dict(self.certificates), dict(self.parts.certificates), set(), frozenset()
        certificates, framed_by_name, changed, removed = _named_changes(
            "certificate", self.certificates, self.parts.certificates, delta.certificates,
            delta.removed_certificates, framed_certificate, _name,
        )  # fmt: skip
        ordered = {name: framed_by_name[name] for name in sorted(framed_by_name)}
        return certificates, ordered, changed, removed

    def _route_groups(
        self, delta: pb.SnapshotDelta
    ) -> tuple[
        Mapping[str, pb.RouteGroup],
        Mapping[str, bytes],
        set[str],
        frozenset[str],
        Sequence[str] | None,
    ]:
        """The route groups and their framed bytes after `delta`, the keys it sent, the
        keys it removed, and the key order (`group_order`; None: the dicts of a full
        snapshot, in key order): O(changed) but for the key order's copy when a key comes
        or goes. The groups and their bytes are persistent maps (`immutables.Map`) once a
        delta changed them: the last version's stay as they were (the applier's applied
        snapshot reads them) and a delta sets its keys, no copy of 10,000 entries each.
        A group added has its key inserted into the order by bisection: a new route at
        10,000 routes spent milliseconds putting three dicts back in key order, before
        HAProxy heard of it."""
        held_order = self.parts.group_order
        if not delta.route_groups and not delta.removed_route_groups:  # shared: never changed
            return self.route_groups, self.parts.route_groups, set(), frozenset(), held_order
        groups, framed_by_key, changed, removed = _mapped_changes(
            self.route_groups, self.parts.route_groups, delta.route_groups,
            delta.removed_route_groups,
        )  # fmt: skip
        # The maps hold no order: the keys sorted beside them, taken once from a full
        # snapshot's dicts (in key order), then copied only when a key comes or goes.
        keys = held_order if held_order is not None else tuple(self.parts.route_groups)
        added = [key for key in changed if key not in self.route_groups]
        if not added and not removed:
            return groups, framed_by_key, changed, removed, keys
        return groups, framed_by_key, changed, removed, key_order(keys, added, removed)


M = TypeVar("M", bound=Message)
# More keys added or removed than this at once: one sort instead of bisections.
_BISECTED = 16


def key_order(keys: Sequence[str], added: Collection[str], removed: Collection[str]) -> list[str]:
    """`keys` (sorted) without `removed` and with `added` (neither in `keys`), sorted, a
    new list (never changed once held): by bisection and list moves (C speed) for a few,
    one sort for many."""
    if len(added) + len(removed) > _BISECTED:
        return sorted((set(keys) - set(removed)) | set(added))
    out = list(keys)
    for key in removed:
        del out[bisect_left(out, key)]
    for key in added:
        insort(out, key)
    return out


def _group_digests(
    before: Mapping[str, bytes],
    framed: Mapping[str, bytes],
    changed: Iterable[str],
    removed: Iterable[str],
) -> Mapping[str, bytes]:
    """`moved_digests` into a persistent map, its key order `group_order`: the changed
    keys set, no copy of the others (`before` itself when nothing changed)."""
    if not changed and not removed:
        return before
    kept = persistent(before).mutate()
    for key in removed:
        del kept[key]
    for key in changed:
        kept[key] = digest(framed[key])
    return kept.finish()


def _mapped_changes(
    held: Mapping[str, pb.RouteGroup],
    held_framed: Mapping[str, bytes],
    sent: Iterable[pb.RouteGroup],
    removed_keys: Sequence[str],
) -> tuple[Map[str, pb.RouteGroup], Map[str, bytes], set[str], frozenset[str]]:
    """`_named_changes` of the route groups into persistent maps: the groups sent set,
    the removed taken out, the others shared with the held version."""
    changed: set[str] = set()
    messages, framed = persistent(held).mutate(), persistent(held_framed).mutate()
    for group in sent:
        key = _sent_name("route group", route_group_key(group), changed)
        messages[key] = owned(group)
        framed[key] = framed_route_group(group)
    removed = _removed_names("route group", removed_keys, changed, held)
    for key in removed:
        del messages[key]
        del framed[key]
    return messages.finish(), framed.finish(), changed, removed


def _sent_name(what: str, name: str, changed: set[str]) -> str:
    """A sent message's name, added to `changed`; DeltaError if it has none or was sent
    twice in the delta."""
    if not name:
        raise DeltaError(f"a {what} without a name")
    if name in changed:
        raise DeltaError(f"{what} {name!r} listed twice")
    changed.add(name)
    return name


def _removed_names(
    what: str, removed_names: Sequence[str], changed: set[str], held: Mapping[str, object]
) -> frozenset[str]:
    """The names a delta removes; DeltaError if one is named twice, also sent, or not
    held."""
    removed = frozenset(removed_names)
    if len(removed) != len(removed_names):
        raise DeltaError(f"a removed {what} is named twice")
    for name in removed:
        if name in changed:
            raise DeltaError(f"{what} {name!r} both changed and removed")
        if name not in held:
            raise DeltaError(f"removed {what} {name!r} is not held")
    return removed


def _name(message: pb.Backend | pb.Certificate) -> str:
    return message.name


def _positions(
    names: Sequence[str], changed: Iterable[str], digests: Mapping[str, bytes]
) -> Iterator[tuple[int, bytes]]:
    """Each changed name's position in `names` (name order) with its digest; position -1
    (refused by `replaced_digests`) for a name not found there."""
    for name in changed:
        at = bisect_left(names, name)
        yield (at if at < len(names) and names[at] == name else -1), digests[name]


def _named_changes(
    what: str,
    held: Mapping[str, M],
    held_framed: Mapping[str, bytes],
    sent: Iterable[M],
    removed_names: Sequence[str],
    frame: Callable[[M], bytes],
    key: Callable[[M], str],
) -> tuple[dict[str, M], dict[str, bytes], set[str], frozenset[str]]:
    """Messages kept by name (backends, certificates; route groups by key) after a delta
    replaced the `sent` ones whole and dropped `removed_names`: the messages, their framed
    bytes (held order, additions last), the names sent and the names removed; DeltaError
    on a contradiction."""
    messages = dict(held)
    framed_by_name = dict(held_framed)  # replaced and removed keep the order
    changed: set[str] = set()
    for message in sent:
        name = _sent_name(what, key(message), changed)
        messages[name] = owned(message)
        framed_by_name[name] = frame(message)
    removed = _removed_names(what, removed_names, changed, held)
    for name in removed:
        del messages[name]
        del framed_by_name[name]
    return messages, framed_by_name, changed, removed


def diff(old: Held, new: Held) -> ChangeSet:
    """What changed from `old` to `new`, by comparing parts (`peerplane.parts`): shared
    bytes compare by identity, so after a delta this costs one dict lookup per backend."""
    before, after = old.parts, new.parts
    changed, removed = backend_changes(before, after)
    certs, certs_removed = certificate_changes(before, after)
    groups, groups_removed = route_group_changes(before, after)
    return ChangeSet(
        base=old.content_hash,
        backends=frozenset(changed),
        removed=frozenset(removed),
        peers=before.peers != after.peers,
        frontends=after.frontends_differ(before),
        warnings=before.warnings != after.warnings,
        certificates=frozenset(certs),
        removed_certificates=frozenset(certs_removed),
        route_groups=frozenset(groups),
        removed_route_groups=frozenset(groups_removed),
    )


def describe(delta: pb.SnapshotDelta, why: str) -> str:
    """The resync NACK text."""
    return (
        f"delta from {delta.from_content_hash[:12] or '(none)'} to "
        f"{delta.to_content_hash[:12]} (version {delta.version}): {why}"
    )
