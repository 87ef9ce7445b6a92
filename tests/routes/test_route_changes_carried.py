"""A route change found from the source's own change keys (`ChangeSet`, carried by the
state: controlplane/routes/route_changes.py `RouteKeys`) instead of an identity scan of
every route: the table updated so equals the table computed from scratch over random
sequences of route changes, states whose changes do not follow the last one's among them
(a version skipped, none carried, another state's carried); and no route is compared
by identity when they follow."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from immutables import Map

from controlplane.changes import ChangeKey, ChangeLog
from controlplane.model import ClusterState
from controlplane.routes import route_changes
from controlplane.routes.route_computer import RouteComputer
from tests.routes.test_table_update import (
    BASE,
    _assert_same,
    _cluster,
    _computed,
    _from_scratch,
    _route,
)

RouteKey = tuple[str, str, str]


def _keyed(routes: dict[str, Any]) -> dict[RouteKey, Any]:
    return {(type(r).__name__, r.namespace, r.name): r for r in routes.values()}


def _changes(before: dict[RouteKey, Any], after: dict[RouteKey, Any]) -> dict[ChangeKey, Any]:
    """The keys a source records between two states: each key whose object is another."""
    return {
        key: after.get(key)
        for key in before.keys() | after.keys()
        if before.get(key) is not after.get(key)
    }


@contextmanager
def _scanned() -> Iterator[list[int]]:
    """The routes `changed_routes` compares by identity (`common_ends`), counted."""
    counted: list[int] = []
    original = getattr(route_changes, "common_ends")  # noqa: B009 (not exported)

    def counting(old: Any, new: Any) -> tuple[int, int]:
        counted.append(len(old) + len(new))
        return original(old, new)

    setattr(route_changes, "common_ends", counting)  # noqa: B010
    try:
        yield counted
    finally:
        setattr(route_changes, "common_ends", original)  # noqa: B010


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), steps=st.integers(5, 30))
def test_carried_route_changes_equal_a_table_from_scratch(seed: int, steps: int) -> None:
    """Random route changes, each state stamped by a `ChangeLog` as a source stamps it:
    the incremental table equals the full recompute after every change. Now and then a
    state carries no changes, skips a version, or is another state with the changes of
    this one (`dataclasses.replace`): found by the scan, still equal."""
    rng = random.Random(seed)
    log = ChangeLog()
    names = [f"r{i}" for i in range(10)]
    routes: dict[str, Any] = {name: _route(rng, name) for name in names[:5]}
    computer = RouteComputer()
    keyed = _keyed(routes)
    cluster_state = dataclasses.replace(_cluster(routes), changes=log.stamp(keyed))
    _assert_same(_computed(computer, cluster_state), _from_scratch(cluster_state))
    carried = 0  # updates whose changes were found from the state's alone
    for step in range(steps):
        for _ in range(rng.choice((1, 1, 1, 2))):
            name = rng.choice(names)
            if name in routes and rng.random() < 0.3:
                del routes[name]
            else:
                routes[name] = _route(rng, name)
        now = _keyed(routes)
        stamped = log.stamp(_changes(keyed, now))
        keyed = now
        roll = rng.random()
        if roll < 0.08:
            log.stamp({})  # a version this computer never sees
            stamped = log.stamp(_changes({}, now) if rng.random() < 0.5 else {})
        cluster_state = _cluster(routes)  # the other routes keep their objects
        if roll < 0.16 and roll >= 0.08:
            cluster_state = dataclasses.replace(cluster_state, changes=None)
        elif roll < 0.22 and roll >= 0.16:  # this state's changes on a state without them
            _computed(computer, dataclasses.replace(BASE, changes=stamped))
            cluster_state = dataclasses.replace(cluster_state, changes=log.stamp({}))
        else:
            cluster_state = dataclasses.replace(cluster_state, changes=stamped)
        updated = computer.updated
        with _scanned() as counted:
            found = _computed(computer, cluster_state)
        carried += computer.updated > updated and not counted
        _assert_same(found, _from_scratch(cluster_state))
        if step % 3 == 0:
            computer.prepare()
    assert carried or computer.updated < 2  # the changes' keys were used


def test_a_carried_route_change_compares_no_route_by_identity() -> None:
    """With the state's changes following the last state's, one new route at 300 routes
    is an update that looks at its key alone: no route is compared by identity (before,
    every route was: `common_ends` over both tuples)."""
    rng = random.Random(7)
    log = ChangeLog()
    routes: dict[str, Any] = {f"r{i}": _route(rng, f"r{i}") for i in range(300)}
    computer = RouteComputer()
    keyed = _keyed(routes)
    cluster_state: ClusterState = dataclasses.replace(_cluster(routes), changes=log.stamp(keyed))
    _computed(computer, cluster_state)
    computer.prepare()
    for trial in range(5):
        routes[f"new{trial}"] = _route(rng, f"new{trial}")
        now = _keyed(routes)
        cluster_state = dataclasses.replace(
            _cluster(routes), changes=log.stamp(_changes(keyed, now))
        )
        keyed = now
        updated = computer.updated
        with _scanned() as counted:
            found = _computed(computer, cluster_state)
        if computer.updated == updated:  # one the update does not cover: from scratch
            continue
        assert sum(counted) == 0, counted
        _assert_same(found, _from_scratch(cluster_state))
    assert computer.updated >= 3


def test_an_updated_tables_routes_share_the_last_tables() -> None:
    """A route added to 300: the updated table's outcomes by route are a persistent map
    made from the last table's by setting one key (before: a dict copy of every route's
    outcome per change), and the last table's are left as they were (the status round
    reads both)."""
    rng = random.Random(3)
    routes: dict[str, Any] = {f"r{i}": _route(rng, f"r{i}") for i in range(300)}
    computer = RouteComputer()
    first = _computed(computer, _cluster(routes))
    before = dict(first.routes)
    for trial in range(4):
        routes[f"new{trial}"] = _route(rng, f"new{trial}")
        updated = computer.updated
        table = _computed(computer, _cluster(routes))
        if computer.updated > updated:
            assert isinstance(table.routes, Map)
    assert computer.updated >= 2
    assert dict(first.routes) == before
    _assert_same(table, _from_scratch(_cluster(routes)))
