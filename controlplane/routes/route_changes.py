"""The HTTPRoutes and GRPCRoutes added and removed since a route table's memo (by
object identity), or None when more changed than an update covers (`MAX_CHANGED`).

Apart from the table's index (table_update.py) because finding what changed is its own
job, with its shortcuts: the source's own change keys (`changes.ChangeSet`, carried by
the state) when they follow the state the memo was made from (`RouteKeys`: O(changed)),
else only the objects between the sequences' common ends are compared
(`sequences.common_ends`: an identity scan of every route, in C).
"""

from __future__ import annotations

from collections.abc import Sequence

from controlplane.changes import ChangeSet
from controlplane.model import ClusterState, GRPCRoute, HTTPRoute
from controlplane.routes.table_types import Memo
from controlplane.sequences import common_ends

MAX_CHANGED = 64
"""More changed routes than this: computed from scratch (the update is per route)."""

Routes = dict[int, HTTPRoute | GRPCRoute]
Found = tuple[Routes, set[int], set[int]]  # the added by id, the added ids, the removed ids
RouteKey = tuple[str, str, str]  # (kind, namespace, name), as the sources' change keys
KINDS = ("HTTPRoute", "GRPCRoute")


class RouteKeys:
    """The HTTPRoutes and GRPCRoutes a route table's memo was made from, by change key,
    and the source version of the state they are (`ChangeSet.origin`, `.version`; None:
    not known). Fed with the next state's `ChangeSet` (`carried`) a route change costs
    its keys, not an identity scan of every route; `moved` keeps it in step once the
    table is updated for them."""

    def __init__(
        self, http: Sequence[HTTPRoute], grpc: Sequence[GRPCRoute], seen: tuple[int, int] | None
    ) -> None:
        self.seen = seen
        self.count = len(http) + len(grpc)
        self._by_key: dict[RouteKey, HTTPRoute | GRPCRoute] = {
            **{("HTTPRoute", r.namespace, r.name): r for r in http},
            **{("GRPCRoute", r.namespace, r.name): r for r in grpc},
        }
        self._pending: dict[RouteKey, HTTPRoute | GRPCRoute | None] = {}

    def carried(self, state: ClusterState) -> Found | None:
        """What `changed_routes` answers, from `state.changes` alone: None when they do not
        follow the version these keys are of (or when more changed than `MAX_CHANGED`, or
        the count of routes does not add up: a state that carries another's changes)."""
        changes = state.changes
        if changes is None or self.seen != (changes.origin, changes.since):
            return None
        by_id: Routes = {}
        added: set[int] = set()
        removed: set[int] = set()
        pending: dict[RouteKey, HTTPRoute | GRPCRoute | None] = {}
        for kind in KINDS:
            for (namespace, name), now in changes.of(kind).items():
                key = (kind, namespace, name)
                before = self._by_key.get(key)
                if before is now:
                    continue
                if now is not None and not isinstance(now, HTTPRoute | GRPCRoute):
                    return None
                pending[key] = now
                if before is not None:
                    removed.add(id(before))
                if now is not None:
                    by_id[id(now)] = now
                    added.add(id(now))
        if len(added) + len(removed) > MAX_CHANGED:
            return None
        if self.count + len(added) - len(removed) != len(state.http_routes) + len(
            state.grpc_routes
        ):
            return None
        self._pending = pending
        return by_id, added, removed

    def scanned(self, reuse: Memo, found: Found) -> None:
        """The changes found by comparing objects instead (`changed_routes`' scan), for
        `moved` to apply."""
        by_id, added, removed = found
        pending: dict[RouteKey, HTTPRoute | GRPCRoute | None] = {}
        for route in (reuse[i][0] for i in removed):
            pending[_key(route)] = None
        for route in (by_id[i] for i in added):
            pending[_key(route)] = route
        self._pending = pending

    def moved(self, changes: ChangeSet | None) -> None:
        """The table was updated for the changes found last (`carried` or `scanned`; their
        state's version is `changes`'): these keys follow."""
        for key, now in self._pending.items():
            self.count += (now is not None) - (key in self._by_key)
            if now is None:
                self._by_key.pop(key, None)
            else:
                self._by_key[key] = now
        self._pending = {}
        self.seen = None if changes is None else (changes.origin, changes.version)


def changed_routes(
    state: ClusterState,
    reuse: Memo,
    last: tuple[Sequence[HTTPRoute], Sequence[GRPCRoute]] | None,
    keys: RouteKeys | None = None,
) -> Found | None:
    """The HTTPRoutes and GRPCRoutes of `state` added and removed (by id) since those
    `reuse` holds, with the added ones by id; None past `MAX_CHANGED`. With `last` (the
    routes `reuse` was made from, in their order) only the objects between each kind's
    common prefix and suffix are compared (`sequences.common_ends`, by identity in C):
    a new route is one comparison per route instead of a dict of every route by id and
    two key differences (~2 ms at 10,000 routes). The same sets as comparing all: an
    object outside both windows is at the same place in both sequences. With `keys`
    (the routes of `reuse` by change key) whose version `state.changes` follows, only the
    changed keys are looked at (`RouteKeys.carried`)."""
    if keys is not None:
        found = keys.carried(state)
        if found is not None and found[2] <= reuse.keys() and not found[1] & reuse.keys():
            return found
    found = _scanned(state, reuse, last)
    if found is not None and keys is not None:
        keys.scanned(reuse, found)
    return found


def _key(route: HTTPRoute | GRPCRoute) -> RouteKey:
    return (type(route).__name__, route.namespace, route.name)


def _scanned(
    state: ClusterState,
    reuse: Memo,
    last: tuple[Sequence[HTTPRoute], Sequence[GRPCRoute]] | None,
) -> Found | None:
    """`changed_routes` by comparing objects: between the common ends, else all."""
    if last is not None:
        by_id: Routes = {}
        gone: set[int] = set()
        for old, now in ((last[0], state.http_routes), (last[1], state.grpc_routes)):
            head, tail = common_ends(old, now)
            old_part, new_part = old[head : len(old) - tail], now[head : len(now) - tail]
            if len(old_part) + len(new_part) > 4 * MAX_CHANGED:
                break  # a reordering or a bulk change: compare all
            by_id.update(zip(map(id, new_part), new_part, strict=True))
            gone.update(map(id, old_part))
        else:
            added = by_id.keys() - gone
            removed = gone - by_id.keys()
            if len(added) + len(removed) > MAX_CHANGED:
                return None
            if removed <= reuse.keys() and not added & reuse.keys():
                return by_id, added, removed
            # else `last` is not what `reuse` was made from: compare all
    routes: list[HTTPRoute | GRPCRoute] = [*state.http_routes, *state.grpc_routes]
    by_id = dict(zip(map(id, routes), routes, strict=True))  # C speed, as the set ops
    added = by_id.keys() - reuse.keys()
    removed = reuse.keys() - by_id.keys()
    if len(added) + len(removed) > MAX_CHANGED:
        return None
    return by_id, added, removed
