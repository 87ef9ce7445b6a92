"""Route groups regrouped in O(changed) (`controlplane/publish/route_groups.py`): over
random sequences of route changes, the grouping patched from the last one equals grouping
from scratch, and the encoder's content equals a fresh encoder's, byte for byte."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator

import pytest
from immutables import Map

from controlplane.compute import Computer
from controlplane.publish import Encoder
from controlplane.publish.delta import delta_bytes
from controlplane.publish.retention import fixed_bytes
from controlplane.publish.route_groups import (
    Group,
    ListenerGroups,
    regroup,
    replaced_rules,
    scratch,
)
from controlplane.snapshot import HttpListener, RoutePath, RouteRule, WorkloadSnapshot
from peerplane.parts import ContentParts
from tests.helpers.builders import WORKLOAD
from tests.publish.test_routes_encode import state

HOSTS = ("", "a.example", "b.example", "*.c.example", "d.example", "e.example")


def frame(name: str, host: str, held: tuple[RouteRule, ...]) -> Group:
    """A stand-in for the encoder's: bytes that name the listener, host and rules."""
    framed = repr((name, host, [rule.source for rule in held])).encode()
    return Group(held, framed, framed[:32])


def same(patched: ListenerGroups, fresh: ListenerGroups) -> None:
    """Equal groups, bytes and digests by key, the same keys in key order (the dicts of
    a patched grouping may hold a new key last: `order` then has them in key order)."""
    keys = list(patched.keys())
    assert keys == list(fresh.keys()) == sorted(fresh.groups)
    assert set(patched.groups) == set(patched.framed) == set(patched.digests) == set(keys)
    assert [patched.groups[k].rules for k in keys] == [g.rules for g in fresh.groups.values()]
    assert [(k, patched.framed[k]) for k in keys] == list(fresh.framed.items())
    assert [(k, patched.digests[k]) for k in keys] == list(fresh.digests.items())


def touched_all(now: ListenerGroups, last: ListenerGroups) -> None:
    """`touched` names every key whose group differs from `last`'s (added, changed or
    removed), so a delta and the store compare those alone."""
    differ = {k for k in {*now.groups, *last.groups} if now.groups.get(k) is not last.groups.get(k)}
    if now is last:
        return
    assert now.touched is not None
    assert differ <= set(now.touched), differ - set(now.touched)


def changed(rules: list[RouteRule], rng: random.Random, serial: list[int]) -> list[RouteRule]:
    """The next listener's rules: a few removed, replaced or added, survivors in order
    (a rule's place among its host's rules is its route's precedence: fixed)."""
    out = list(rules)
    for _ in range(rng.randint(0, 3)):
        roll = rng.random()
        if roll < 0.3 and out:
            del out[rng.randrange(len(out))]
        elif roll < 0.6 and out:
            i = rng.randrange(len(out))
            serial[0] += 1
            out[i] = dataclasses.replace(out[i], source=f"r{serial[0]}")
        else:
            serial[0] += 1
            host = rng.choice((*HOSTS, f"new{serial[0]}.example"))
            rule = RouteRule(f"r{serial[0]}", (host,) if host else (), RoutePath("Exact", "/"))
            out.insert(rng.randint(0, len(out)), rule)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_a_patched_grouping_equals_grouping_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    serial = [0]
    rules = changed([], rng, serial)
    last = regroup("8080", tuple(rules), None, frame)
    patched_some = 0
    for _ in range(60):
        rules = changed(rules, rng, serial)
        now = regroup("8080", tuple(rules), last, frame)
        same(now, scratch("8080", tuple(rules), None, frame))
        if now.touched is not None or now is last:
            touched_all(now, last)
        if now is not last and now.replaced is not None:  # what the encoder retires, once
            dropped = {id(r) for r in last.rules} - {id(r) for r in now.rules}
            assert sorted(map(id, now.replaced)) == sorted(dropped)
        kept = [k for k in now.groups if k in last.groups and now.groups[k] is last.groups[k]]
        patched_some += bool(kept)
        last = now
    assert patched_some > 30  # most steps reused groups: the patch path ran


def test_only_the_groups_of_changed_hosts_are_framed_again() -> None:
    rules = tuple(
        RouteRule(f"r{i}", (f"h{i}.example",), RoutePath("Exact", "/")) for i in range(200)
    )
    framed: list[str] = []

    def counting(name: str, host: str, held: tuple[RouteRule, ...]) -> Group:
        framed.append(host)
        return frame(name, host, held)

    last = regroup("80", rules, None, counting)
    assert len(framed) == 200
    framed.clear()
    moved = dataclasses.replace(rules[50], source="moved")
    now = regroup("80", (*rules[:50], moved, *rules[51:]), last, counting)
    assert framed == ["h50.example"]
    assert all(now.groups[k] is last.groups[k] for k in now.groups if k != "80/h50.example")
    framed.clear()
    added = RouteRule("new", ("h100x.example",), RoutePath("Exact", "/"))
    later = regroup("80", (*now.rules, added), now, counting)
    assert framed == ["h100x.example"]
    assert list(later.keys()) == sorted(later.groups)  # a new host's group in key order
    assert later.touched == ("80/h100x.example",)
    assert later.groups is not now.groups and later.order is not None


class CountedRules(tuple[RouteRule, ...]):
    """A listener's rules that count the elements anyone iterates over (slices and
    indexing are not counted: C copies and lookups)."""

    visited = 0

    def __iter__(self) -> Iterator[RouteRule]:
        for rule in super().__iter__():
            type(self).visited += 1
            yield rule


def test_a_new_host_is_grouped_without_walking_the_listeners_rules() -> None:
    """A new HTTPRoute of its own host (the route propagation benchmark's change): its
    group and the rules it replaced come from the window the change touched, not from an
    index of the listener's 2,000 rules (issue 33: O(changed), ~1 ms at 10,000 routes
    for the index alone, and the window compared a second time for the replaced rules)."""
    rules = tuple(
        RouteRule(f"r{i}", (f"h{i:04}.example",), RoutePath("Exact", "/")) for i in range(2000)
    )
    last = regroup("80", rules, None, frame)
    added = RouteRule("new", ("h0000x.example",), RoutePath("Exact", "/"))
    repointed = dataclasses.replace(rules[2], source="repointed")
    for listener in ((rules[0], added, *rules[1:]), (*rules[:2], repointed, *rules[3:])):
        counted = CountedRules(listener)
        CountedRules.visited = 0
        now = regroup("80", counted, last, frame)
        gone = list(replaced_rules({"80": last}, {"80": now}))
        same(now, scratch("80", listener, None, frame))
        assert gone == [r for r in rules if r not in listener]
        assert CountedRules.visited < 10, CountedRules.visited


def test_equal_rules_made_again_are_the_ones_the_next_change_is_compared_with() -> None:
    """A computation from scratch makes equal rules as new objects: the grouping that
    reuses their bytes must hold the new objects, or the next change looks for rules the
    listener no longer has (found by the route propagation benchmark: a ValueError that
    failed the computation)."""
    made = [
        RouteRule(f"r{i}", (f"h{i % 3}.example",), RoutePath("Exact", f"/{i}")) for i in range(9)
    ]
    last = regroup("80", tuple(made), None, frame)
    again = tuple(dataclasses.replace(rule) for rule in made)  # equal, not the same
    assert again == tuple(made) and again[0] is not made[0]
    bulk = scratch("80", again, last, frame)
    assert all(group.framed is last.groups[key].framed for key, group in bulk.groups.items())
    moved = (*again[:4], dataclasses.replace(again[4], source="moved"), *again[5:])
    now = regroup("80", moved, bulk, frame)
    same(now, scratch("80", moved, None, frame))


def test_a_rule_with_two_hostnames_is_refused_as_before() -> None:
    two = RouteRule("r", ("a.example", "b.example"), None)
    with pytest.raises(ValueError, match="serves 2 hostnames"):
        regroup("80", (two,), None, frame)
    one = RouteRule("s", ("a.example",), None)
    last = regroup("80", (one,), None, frame)
    with pytest.raises(ValueError, match="serves 2 hostnames"):
        regroup("80", (one, two), last, frame)


@pytest.mark.parametrize("seed", range(3))
def test_the_encoder_patching_groups_equals_a_fresh_encoder(seed: int) -> None:
    rng = random.Random(seed)
    serial = [0]
    base: WorkloadSnapshot = Computer().compute(state("/"), {}).workloads[WORKLOAD]
    encoder = Encoder()
    rules: list[RouteRule] = []
    patched_some = 0
    for _ in range(25):
        rules = changed(rules, rng, serial)
        listeners = (HttpListener(8080, tuple(rules)), HttpListener(9090, tuple(rules[:3])))
        snapshot = dataclasses.replace(base, http_listeners=listeners)
        content = encoder.encode({WORKLOAD: snapshot})[WORKLOAD]
        fresh = Encoder().encode({WORKLOAD: snapshot})[WORKLOAD]
        assert content.payload == fresh.payload
        assert content.content_hash == fresh.content_hash
        derived = content.derived
        if derived is not None:  # what the store and the delta compare alone
            old = derived.parts
            assert fixed_bytes(old, content.parts, derived.groups) == fixed_bytes(
                old, content.parts
            )
            assert delta_bytes(
                old, content.parts, "a", "b", 2, derived.backends, derived.groups
            ) == delta_bytes(old, content.parts, "a", "b", 2)
            assert delta_bytes(old, content.parts, "a", "b", 2) == delta_bytes(
                old, fresh.parts, "a", "b", 2
            )
            patched_some += derived.groups is not None
    assert patched_some > 10


def test_a_new_host_is_hashed_without_looking_up_every_group_digest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new HTTPRoute of its own host, then a route re-pointed, at 2,000 groups: the
    content hash's joined group digests are the last version's with the changed group
    spliced in, not a look-up of every group's digest in key order and a join (issue 33:
    ~0.6 ms of each encode at 10,000 routes). The content equals a fresh encoder's."""
    base: WorkloadSnapshot = Computer().compute(state("/"), {}).workloads[WORKLOAD]
    rules = [
        RouteRule(f"r{i}", (f"h{i:04}.example",), RoutePath("Exact", "/")) for i in range(2000)
    ]
    added = RouteRule("new", ("h0000x.example",), RoutePath("Exact", "/"))
    repointed = dataclasses.replace(rules[2], source="repointed")
    versions = [
        rules,
        [rules[0], added, *rules[1:]],
        [rules[0], added, *rules[1:2], repointed, *rules[3:]],
    ]
    snapshots = [
        dataclasses.replace(base, http_listeners=(HttpListener(8080, tuple(v)),)) for v in versions
    ]
    encoder = Encoder()
    encoder.encode({WORKLOAD: snapshots[0]})

    def every_group(*_: object) -> None:
        raise AssertionError("every group digest looked up")

    for snapshot in snapshots[1:]:
        with monkeypatch.context() as patched:
            patched.setattr(ContentParts, "in_key_order", every_group)
            content = encoder.encode({WORKLOAD: snapshot})[WORKLOAD]
        fresh = Encoder().encode({WORKLOAD: snapshot})[WORKLOAD]
        assert content.content_hash == fresh.content_hash
        assert content.parts.joined_group_digests() == fresh.parts.joined_group_digests()


def test_a_replaced_version_counts_the_joined_group_digests_it_alone_holds() -> None:
    """The store's retention budget (`retention.fixed_bytes`) counts the joined group
    digests of a replaced version: spliced anew for its successor, they are its own (32
    bytes a group: 320 KB at 10,000 routes), with the old bytes of the group that changed."""
    base: WorkloadSnapshot = Computer().compute(state("/"), {}).workloads[WORKLOAD]
    rules = [RouteRule(f"r{i}", (f"h{i:03}.example",), RoutePath("Exact", "/")) for i in range(300)]
    repointed = dataclasses.replace(rules[2], source="repointed")
    encoder = Encoder()
    old, new = (
        encoder.encode(
            {WORKLOAD: dataclasses.replace(base, http_listeners=(HttpListener(8080, tuple(r)),))}
        )[WORKLOAD]
        for r in (rules, [*rules[:2], repointed, *rules[3:]])
    )
    old.parts.content_hash(), new.parts.content_hash()
    assert new.derived is not None and new.derived.groups == ("8080/h002.example",)
    joined = old.parts.joined_group_digests()
    assert len(joined) == 32 * 300 and joined is not new.parts.joined_group_digests()
    # the same parts but sharing the old joined digests: all else counted alike
    shared = dataclasses.replace(new.parts, group_joined=joined)
    for keys in (new.derived.groups, None):
        alone = fixed_bytes(old.parts, new.parts, keys)
        assert alone - fixed_bytes(old.parts, shared, keys) == len(joined)
        assert alone > len(old.parts.route_groups["8080/h002.example"]) + len(joined)


def test_a_patched_grouping_shares_the_last_ones_maps_and_leaves_them_as_they_were() -> None:
    """A new host at 2,000 groups: the patched grouping's groups, bytes and digests are
    persistent maps made from the last grouping's by setting the new key (no copy of
    2,000 entries each; before, three dicts were copied per change), and the last
    grouping's, which the store's retained versions read, are unchanged."""
    rules = tuple(
        RouteRule(f"r{i}", (f"h{i:05}.example",), RoutePath("Exact", "/")) for i in range(2000)
    )
    first = regroup("80", rules, None, frame)
    added = RouteRule("new", ("h00100x.example",), RoutePath("Exact", "/"))
    second = regroup("80", (*rules, added), first, frame)
    third = regroup("80", (*rules, added, dataclasses.replace(added, source="n2")), second, frame)
    for patched, last in ((second, first), (third, second)):
        for field in ("groups", "framed", "digests"):
            assert isinstance(getattr(patched, field), Map), field
        assert len(last.framed) == len(last.rules) and "80/h00100x.example" not in first.framed
    assert len(second.framed) == 2001 and second.order == sorted(second.framed)
    same(third, scratch("80", third.rules, None, frame))
