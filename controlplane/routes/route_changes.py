"""The HTTPRoutes and GRPCRoutes added and removed since a route table's memo (by
object identity), or None when more changed than an update covers (`MAX_CHANGED`).

Apart from the table's index (table_update.py) because finding what changed is its own
job, with its own shortcut: only the objects between the sequences' common ends are
compared (`sequences.common_ends`).
"""

from __future__ import annotations

from collections.abc import Sequence

from controlplane.model import ClusterState, GRPCRoute, HTTPRoute
from controlplane.routes.table_types import Memo
from controlplane.sequences import common_ends

MAX_CHANGED = 64
"""More changed routes than this: computed from scratch (the update is per route)."""

Routes = dict[int, HTTPRoute | GRPCRoute]


def changed_routes(
    state: ClusterState,
    reuse: Memo,
    last: tuple[Sequence[HTTPRoute], Sequence[GRPCRoute]] | None,
) -> tuple[Routes, set[int], set[int]] | None:
    """The HTTPRoutes and GRPCRoutes of `state` added and removed (by id) since those
    `reuse` holds, with the added ones by id; None past `MAX_CHANGED`. With `last` (the
    routes `reuse` was made from, in their order) only the objects between each kind's
    common prefix and suffix are compared (`sequences.common_ends`, by identity in C):
    a new route is one comparison per route instead of a dict of every route by id and
    two key differences (~2 ms at 10,000 routes). The same sets as comparing all: an
    object outside both windows is at the same place in both sequences."""
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
