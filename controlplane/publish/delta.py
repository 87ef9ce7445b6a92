"""Deltas: the change from one version's encoded parts to another's, as `SnapshotDelta`
bytes (docs/design.md, "The agent stream").

`SnapshotDelta` shares its field numbers 1 to 8, 14 to 16 and 18 with `Snapshot`, so a
delta is built from the very bytes the encoder made for the snapshot: the framed
backends, certificates and route groups that differ are concatenated unchanged (a route
change: the groups of the hosts it touches), and the peers, frontends (with the
listeners, without their rules) and warnings parts are copied only when they differ
(with their flag). Backends are compared
by identity first (the encoder shares an unchanged backend's bytes object between
versions), then by equality, so building a delta is O(backends) in C at worst and copies
only what changed; when the encoder said which backends and route groups can differ
(`names`, `group_keys`: a delta from the version just before) only those are compared,
O(changed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from controlplane.publish import wire
from peerplane import protowire
from peerplane.parts import (
    ContentParts,
    backend_changes,
    certificate_changes,
    route_group_changes,
)
from peerplane.v1 import peerplane_pb2 as pb

DELTA_VERSION = wire.number(pb.SnapshotDelta, "version")
DELTA_TO_HASH = wire.number(pb.SnapshotDelta, "to_content_hash")
DELTA_FROM_HASH = wire.number(pb.SnapshotDelta, "from_content_hash")
DELTA_REMOVED = wire.number(pb.SnapshotDelta, "removed_backends")
DELTA_REMOVED_CERTIFICATES = wire.number(pb.SnapshotDelta, "removed_certificates")
DELTA_REMOVED_ROUTE_GROUPS = wire.number(pb.SnapshotDelta, "removed_route_groups")
DELTA_PEERS_CHANGED = wire.number(pb.SnapshotDelta, "peers_changed")
DELTA_FRONTENDS_CHANGED = wire.number(pb.SnapshotDelta, "frontends_changed")
DELTA_WARNINGS_CHANGED = wire.number(pb.SnapshotDelta, "warnings_changed")
SERVER_MESSAGE_DELTA = wire.number(pb.ServerMessage, "delta")

# Fields 1, 4 to 8, 14 to 16 and 18 must mean the same in both messages for the parts to
# be reused.
_SHARED = ("workload", "peers", "backends", "http_frontend", "tcp_frontends", "warnings")
for _name in (*_SHARED, "http_listeners", "certificates", "tls_listeners", "route_groups"):
    if wire.number(pb.SnapshotDelta, _name) != wire.number(pb.Snapshot, _name):
        raise ImportError(f"SnapshotDelta.{_name} and Snapshot.{_name} have different numbers")


def changed_backends(
    old: ContentParts, new: ContentParts, names: Sequence[str] | None = None
) -> tuple[list[bytes], list[str]]:
    """The framed backends of `new` that `old` lacks or holds differently (name order),
    and the names `old` has and `new` has not (sorted): `peerplane.parts.backend_changes`,
    as the delta sends them. `names`: the only backends that can differ between the two,
    in `new`'s order (`SnapshotContent.derived`), so only those are compared."""
    if names is None:
        changed, removed = backend_changes(old, new)
        return list(changed.values()), removed
    before, after = old.backends, new.backends
    return _differing(before, after, names), sorted(_gone(before, after, names))


def changed_route_groups(
    old: ContentParts, new: ContentParts, keys: Iterable[str] | None = None
) -> tuple[list[bytes], list[str]]:
    """The framed route groups of `new` that `old` lacks or holds differently, and the
    keys `old` has and `new` has not, both in key order (`peerplane.parts
    .route_group_changes`, whatever order the dicts hold them in). `keys`: the only groups
    that can differ between the two (`Derived.groups`), so only those are compared."""
    before, after = old.route_groups, new.route_groups
    if keys is None:
        found, removed = route_group_changes(old, new)
        if new.group_order is not None:  # the dicts hold new keys last
            return [found[key] for key in sorted(found)], removed
        return list(found.values()), removed
    ordered = sorted(set(keys))
    return _differing(before, after, ordered), _gone(before, after, ordered)


def _differing(
    before: Mapping[str, bytes], after: Mapping[str, bytes], keys: Sequence[str]
) -> list[bytes]:
    """The framed parts of `after` under `keys` (in their order) that `before` lacks or
    holds differently: the very same bytes object is the same part, no comparison."""
    return [
        framed
        for key in keys
        if (framed := after.get(key)) is not None
        and (held := before.get(key)) is not framed
        and held != framed
    ]


def _gone(
    before: Mapping[str, bytes], after: Mapping[str, bytes], keys: Sequence[str]
) -> list[str]:
    """The `keys` (in their order) `before` has and `after` has not."""
    return [key for key in keys if key in before and key not in after]


def delta_bytes(
    old: ContentParts,
    new: ContentParts,
    from_hash: str,
    to_hash: str,
    version: int,
    names: Sequence[str] | None = None,
    group_keys: Sequence[str] | None = None,
) -> bytes:
    """The serialized `SnapshotDelta` that turns content `old` into `new` (version set);
    `names` as `changed_backends` takes them, `group_keys` as `changed_route_groups`."""
    changed, removed = changed_backends(old, new, names)
    certificates, removed_certificates = certificate_changes(old, new)
    groups, removed_groups = changed_route_groups(old, new, group_keys)
    peers = new.peers != old.peers
    # The listeners (fields 14 and 16) travel with the frontends: one flag, all parts.
    frontends = new.frontends_differ(old)
    warnings = new.warnings != old.warnings
    parts = [
        new.workload,
        wire.varint_field(DELTA_VERSION, version),
        wire.string_field(DELTA_TO_HASH, to_hash),
        new.peers if peers else b"",
        *changed,
        new.frontends if frontends else b"",
        new.warnings if warnings else b"",
        wire.string_field(DELTA_FROM_HASH, from_hash),
        *(protowire.length_delimited(DELTA_REMOVED, name.encode()) for name in removed),
        wire.varint_field(DELTA_PEERS_CHANGED, int(peers)),
        wire.varint_field(DELTA_FRONTENDS_CHANGED, int(frontends)),
        wire.varint_field(DELTA_WARNINGS_CHANGED, int(warnings)),
        new.listeners if frontends else b"",
        *certificates.values(),
        new.tls_listeners if frontends else b"",
        *(
            protowire.length_delimited(DELTA_REMOVED_CERTIFICATES, name.encode())
            for name in removed_certificates
        ),
        *groups,
        *(
            protowire.length_delimited(DELTA_REMOVED_ROUTE_GROUPS, key.encode())
            for key in removed_groups
        ),
    ]
    return b"".join(parts)


def server_message_with_delta(delta: bytes) -> bytes:
    """`ServerMessage(delta=...)` around serialized delta bytes (a stream prepends its
    nonce, as for a snapshot)."""
    return protowire.length_delimited(SERVER_MESSAGE_DELTA, delta)
