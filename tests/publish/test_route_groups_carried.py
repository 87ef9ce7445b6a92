"""A listener regrouped from the hostnames the route table's update decided again
(`snapshot.EditedRules`, controlplane/publish/route_groups.py) instead of comparing its
rules with the last grouping's: the snapshots' bytes equal a fresh computation's over
random route changes, and a route change compares no rule by identity."""

from __future__ import annotations

import importlib
import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.compute import Computer
from controlplane.publish import Encoder, encode, route_groups
from controlplane.snapshot import EditedRules
from tests.helpers.route_builders import prefix_rule, route, to
from tests.helpers.route_walk import walk_against_fresh
from tests.routes.test_table_update import _cluster, _route

encode_module = importlib.import_module("controlplane.publish.encode")


@contextmanager
def _counted(name: str) -> Iterator[list[Any]]:
    """Each call of `route_groups.<name>`, its answer recorded."""
    answers: list[Any] = []
    original = getattr(route_groups, name)

    def counting(*args: Any) -> Any:
        answers.append(found := original(*args))
        return found

    setattr(route_groups, name, counting)
    try:
        yield answers
    finally:
        setattr(route_groups, name, original)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_groups_regrouped_from_the_tables_hostnames_equal_a_fresh_encoding(seed: int) -> None:
    """Random route changes through the incremental `Computer` and `Encoder`: the bytes
    equal a fresh `compute` and `encode` at every step (`walk_against_fresh`), the
    groups of each updated table regrouped from the hostnames it decided again."""
    rng = random.Random(seed)
    with _counted("_carried") as carried:
        computer, _ = walk_against_fresh(rng, lambda name: _route(rng, name), _cluster, steps=20)
    used = sum(found is not None for found in carried)
    assert used or not computer._routes.updated  # an update's listeners: regrouped so


def _one_host_routes(count: int) -> dict[str, Any]:
    return {
        f"r{i}": route(
            f"r{i}", [prefix_rule(f"/p{i}", [to("shop")])], hostnames=(f"b{i}.example.com",)
        )
        for i in range(count)
    }


def test_a_route_change_regroups_without_comparing_the_listeners_rules() -> None:
    """300 one-host routes on one listener, one added, one re-pointed, one removed: each
    is regrouped from the hostnames the table decided again, no rule of the listener
    compared by identity (before, all 300: `common_ends` over the last and new rules),
    and the bytes equal a fresh encoding."""
    routes = _one_host_routes(300)
    computer, encoder = Computer(), Encoder()
    result = computer.compute(_cluster(routes), {})
    encoder.encode(result.workloads)
    changes = (
        ("r300", route("r300", [prefix_rule("/n", [to("shop")])], hostnames=("n.example.com",))),
        ("r7", route("r7", [prefix_rule("/p7", [to("catalog")])], hostnames=("b7.example.com",))),
        ("r9", None),
    )
    for name, changed in changes:
        if changed is None:
            del routes[name]
        else:
            routes[name] = changed
        cluster_state = _cluster(routes)
        updated = computer._routes.updated
        result = computer.compute(cluster_state, result.assignment)
        assert computer._routes.updated == updated + 1
        (listener,) = (
            li for w in result.workloads.values() for li in w.http_listeners if li.port == 8080
        )
        assert isinstance(listener.rules, EditedRules)
        with _counted("common_ends") as compared:
            content = encoder.encode(result.workloads)
        assert compared == []
        assert content == encode(result.workloads)


def test_route_changes_that_add_no_group_splice_the_digests_with_the_key_order() -> None:
    """A route re-pointed three times at 300 one-host routes (no group added or removed):
    after the first change, each content's joined group digests are spliced with the
    key order of both versions at hand (before: `list(held)` and `list(digests)`, every
    key listed per change, while no change had added a group since a grouping from
    scratch)."""
    routes = _one_host_routes(300)
    computer, encoder = Computer(), Encoder()
    result = computer.compute(_cluster(routes), {})
    encoder.encode(result.workloads)
    orders: list[tuple[bool, bool]] = []
    spliced = getattr(encode_module, "spliced_group_digests")  # noqa: B009 (not exported)

    def recording(before: Any, digests: Any, order: Any, touched: Any) -> Any:
        orders.append((before.group_order is not None, order is not None))
        return spliced(before, digests, order, touched)

    setattr(encode_module, "spliced_group_digests", recording)  # noqa: B010
    try:
        for trial in range(3):
            backend = ("catalog", "shop")[trial % 2]
            routes["r7"] = route(
                "r7", [prefix_rule("/p7", [to(backend)])], hostnames=("b7.example.com",)
            )
            result = computer.compute(_cluster(routes), result.assignment)
            assert encoder.encode(result.workloads) == encode(result.workloads)
    finally:
        setattr(encode_module, "spliced_group_digests", spliced)  # noqa: B010
    assert len(orders) == 3 and orders[1:] == [(True, True)] * 2, orders
