"""What the store's retained contents cost: which backend bytes each holds that no current
version shares, and the bytes of its other parts it alone holds (the `retained_bytes`
budget of `store.py` counts these).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from immutables import Map

from peerplane.parts import ContentParts


@dataclass(slots=True)
class Retained:
    """One retained content of a workload: its parts and, once replaced, the backends its
    successor does not share (`own`) and the bytes of its other parts it alone holds."""

    parts: ContentParts
    own: tuple[bytes, ...] = ()
    fixed: int = 0
    version: int = 0  # the version it was published as (`snapshot_at`)
    # The content it replaced (its hash) and what can differ from it (the encoder's
    # `SnapshotContent.derived`: the backends' names and the route groups' keys, each None
    # when not known), without that content's parts: a delta from that one compares those
    # alone. None: not known.
    moved: tuple[str, tuple[str, ...] | None, tuple[str, ...] | None] | None = None


CURRENT, REPLACED = 0, 1
ENTRY_BYTES = 180
"""What `BackendRefs` spends per object it follows (dict slot, id, list: measured with
tracemalloc), counted with the object: a settings edit makes thousands of them."""


class BackendRefs:
    """Who holds each backend bytes object: how many current versions, how many replaced
    retained contents. The encoder shares one object between versions and between
    workloads that serve the same Service (a settings edit makes 8 workloads' retained
    contents hold the same new bytes), so memory held only for deltas is the objects that
    replaced contents hold and no current version does, each counted once (with what
    following it costs here)."""

    __slots__ = ("_counts", "only_replaced")

    def __init__(self) -> None:
        self._counts: dict[int, list[int]] = {}  # id -> [current, replaced, size]
        self.only_replaced = 0

    def count(self, backends: Iterable[bytes], holder: int, step: int) -> None:
        """Add `step` (+1 or -1) holders of kind `holder` to each object (callers hold the
        objects meanwhile, so their ids stay theirs)."""
        counts = self._counts
        for framed in backends:
            key = id(framed)
            entry = counts.get(key)
            if entry is None:
                entry = counts[key] = [0, 0, len(framed) + ENTRY_BYTES]
            was = entry[REPLACED] > 0 and not entry[CURRENT]
            entry[holder] += step
            now = entry[REPLACED] > 0 and not entry[CURRENT]
            if was != now:
                self.only_replaced += entry[2] if now else -entry[2]
            if not entry[CURRENT] and not entry[REPLACED]:
                del counts[key]


def unshared(old: ContentParts, new: ContentParts) -> tuple[list[bytes], list[bytes]]:
    """The backends of `old` that `new` does not hold (by identity), and those of `new`
    that `old` does not: O(backends), comparing references only."""
    # By identity, with C-speed set operations (a Python loop over 8,000 backends per
    # publish was an eighth of a step): ids of live objects are unique.
    before = dict(zip(map(id, old.backends.values()), old.backends.values(), strict=True))
    after = dict(zip(map(id, new.backends.values()), new.backends.values(), strict=True))
    gone = [before[i] for i in before.keys() - after.keys()]
    added = [after[i] for i in after.keys() - before.keys()]
    return gone, added


def unshared_named(
    old: ContentParts, new: ContentParts, names: Iterable[str]
) -> tuple[list[bytes], list[bytes]]:
    """`unshared(old, new)` when only the backends `names` can differ between them (the
    encoder's `SnapshotContent.derived`): O(len(names)). A backend's bytes hold its name,
    so one object is never under two names and comparing name by name gives the same
    two lists as the set difference."""
    gone: list[bytes] = []
    added: list[bytes] = []
    for name in names:
        before, after = old.backends.get(name), new.backends.get(name)
        if before is after:
            continue
        if before is not None:
            gone.append(before)
        if after is not None:
            added.append(after)
    return gone, added


def fixed_bytes(
    old: ContentParts,
    new: ContentParts,
    group_keys: Iterable[str] | None = None,
    replaced: int = 0,
) -> int:
    """Bytes of `old`'s parts other than backends that `new` does not share (a rotated
    certificate's and a changed route group's old bytes among them), and what of its
    backends and backend digests mappings it alone holds (`mapping_bytes`). `group_keys`:
    the only route groups that can differ between the two (the encoder's
    `Derived.groups`), so only those are compared: O(changed) instead of a pass over
    10,000 groups. `replaced`: how many of `old`'s backends `new` does not share. With
    them, `old`'s joined group and backend digests when `new` does not share them."""
    others = (
        (old.workload, new.workload),
        (old.peers, new.peers),
        (old.frontends, new.frontends),
        (old.warnings, new.warnings),
        (old.listeners, new.listeners),
        (old.tls_listeners, new.tls_listeners),
    )
    certificates = sum(
        len(framed)
        for name, framed in old.certificates.items()
        if new.certificates.get(name) is not framed
    )
    old_groups, new_groups = old.route_groups, new.route_groups
    keys = old_groups.keys() if group_keys is None else {k for k in group_keys if k in old_groups}
    groups = sum(
        len(framed) for key in keys if (framed := old_groups[key]) is not new_groups.get(key)
    )
    dicts = mapping_bytes(old.backends, new.backends, replaced) + mapping_bytes(
        old.backend_digests, new.backend_digests, replaced
    )
    # the group and backend digests joined (32 bytes each), spliced anew on a change
    spliced = sum(
        len(joined)
        for joined, kept in (
            (old.group_joined, new.group_joined),
            (old.backend_joined, new.backend_joined),
        )
        if joined is not None and joined is not kept
    )
    return sum(len(a) for a, b in others if a is not b) + certificates + groups + dicts + spliced


# A persistent map (`immutables.Map`): the bytes it takes per entry, and what patching one
# entry into it copies (the HAMT nodes on the entry's path, the new map object), as
# tracemalloc measured them at 8,000 entries (32 B and 0.9 KiB), rounded up.
MAP_ENTRY_BYTES = 40
MAP_PATCHED_ENTRY_BYTES = 1024


def mapping_bytes(old: Mapping[str, bytes], new: Mapping[str, bytes], replaced: int) -> int:
    """What `old` holds that `new` does not share: a dict, its whole table (never shared);
    a persistent map when `new` is one too (the encoder patched `new` from it for the
    `replaced` entries), the nodes the patch copied; else all its nodes."""
    if isinstance(old, dict):
        return sys.getsizeof(old)
    if isinstance(new, Map):
        return sys.getsizeof(old) + MAP_PATCHED_ENTRY_BYTES * replaced
    return sys.getsizeof(old) + MAP_ENTRY_BYTES * len(old)
