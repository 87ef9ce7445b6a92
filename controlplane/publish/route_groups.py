"""A listener's rules as route groups (one per host, contract 2), regrouped in O(changed).

`Snapshot.route_groups` holds one group per listener and host, each host's rules in the
listener's order, groups in key order (`peerplane.parts.group_key`). Grouping all of a
listener's rules on every route change is one Python step per group: 10,000 steps at
10,000 HTTPRoutes of a host each. When the route table's update says which hostnames it
decided again (`snapshot.EditedRules`: each one's rules now, made from the rules of the
last grouping) `regroup` frames those hosts' groups alone, comparing no other rule.
Else it compares the listener's new rules with
those of its last grouping by identity, in C: past their common prefix and suffix, the
sets of their ids. It groups again only the hosts of the rules added or removed; every
other group is the same object, and the maps of bytes and digests the content needs are
patched. A rule that stayed keeps its place among its host's rules (its
precedence key is its route's: the same rule object, the same key), so the result equals
grouping from scratch (tests/publish/test_route_groups.py, over random sequences). A new
or removed host's key is put in or taken out of the sorted key list (`order`, bisect)
rather than the three dicts made again in key order (~2 ms at 10,000 hosts); the groups,
their bytes and digests are persistent maps (`immutables.Map`, a HAMT) once patched, so a
change sets its keys instead of copying three dicts of 10,000 entries, the key order kept
beside them (`ContentParts.group_order`), and the grouping says which keys it changed
(`touched`) for the delta and the store.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import compress, groupby
from operator import attrgetter, is_

from controlplane.sequences import common_ends
from controlplane.snapshot import EditedRules, RouteRule
from peerplane.parts import group_key
from peerplane.persistent import persistent

# Past this share of a listener's rules added or removed, group from scratch (reusing the
# groups whose rules did not change): patching would cost as much.
SCRATCH_SHARE = 8
SCRATCH_MIN = 64


@dataclass(frozen=True, slots=True)
class Group:
    """One route group's encoding: its rules (compared by identity), its framed
    `Snapshot.route_groups` entry and that entry's digest."""

    rules: tuple[RouteRule, ...]
    framed: bytes
    digest: bytes


# (listener name, host, rules) -> the group encoded
Frame = Callable[[str, str, tuple[RouteRule, ...]], Group]


@dataclass(frozen=True, slots=True)
class ListenerGroups:
    """One listener's grouping: the rules it was made from, and its groups, framed bytes
    and digests by key: dicts in key order from scratch, persistent maps (no order) once
    patched, with the keys sorted in `order`. `touched`: the keys whose group may differ
    from the grouping this one was patched from (added, changed or removed); None when
    not known (grouped from scratch). Never mutated: the next grouping copies what it
    changes."""

    rules: tuple[RouteRule, ...]
    groups: Mapping[str, Group]
    framed: Mapping[str, bytes]
    digests: Mapping[str, bytes]
    order: list[str] | None = None
    touched: tuple[str, ...] | None = None
    # The rules of the grouping this one was patched from that it no longer holds (by
    # identity; `replaced_rules` hands them on without comparing the rules again); None
    # when not known (grouped from scratch).
    replaced: tuple[RouteRule, ...] | None = None

    def keys(self) -> Sequence[str]:
        """The group keys in key order."""
        return self.order if self.order is not None else list(self.groups)


_HOSTNAMES = attrgetter("hostnames")


def host_of(rule: RouteRule) -> str:
    """The one hostname a rule serves ("" : any host); ValueError for more than one
    (compute gives every rule one: controlplane/routes/precedence.py)."""
    hostnames = rule.hostnames
    if len(hostnames) > 1:
        raise ValueError(f"a route rule serves {len(hostnames)} hostnames, not 1")
    return hostnames[0] if hostnames else ""


def grouped_rules(rules: tuple[RouteRule, ...]) -> Iterator[tuple[str, tuple[RouteRule, ...]]]:
    """The rules by host ("" : any host) in host order, each host's in the listener's
    order: a stable sort of the positions by hostnames and a `groupby`, both in C."""
    hosts = list(map(_HOSTNAMES, rules))
    for hostnames, positions in groupby(
        sorted(range(len(rules)), key=hosts.__getitem__), key=hosts.__getitem__
    ):
        held = tuple(map(rules.__getitem__, positions))
        yield host_of(held[0]) if hostnames else "", held


def _ordered(
    groups: dict[str, Group],
) -> tuple[dict[str, Group], dict[str, bytes], dict[str, bytes]]:
    keys = sorted(groups)
    ordered = dict(zip(keys, map(groups.__getitem__, keys), strict=True))
    framed = dict(zip(keys, map(attrgetter("framed"), ordered.values()), strict=True))
    digests = dict(zip(keys, map(attrgetter("digest"), ordered.values()), strict=True))
    return ordered, framed, digests


def scratch(
    name: str, rules: tuple[RouteRule, ...], last: ListenerGroups | None, frame: Frame
) -> ListenerGroups:
    """Every group of the listener, its bytes reused from `last` while its rules are equal
    (the group then holds the new rule objects: `regroup` compares by identity)."""
    reuse = last.groups if last is not None else {}
    groups: dict[str, Group] = {}
    for host, held in grouped_rules(rules):
        key = group_key(name, host)
        found = reuse.get(key)
        if found is None or found.rules != held:
            groups[key] = frame(name, host, held)
        else:  # equal rules, maybe other objects: the next regroup compares these by identity
            groups[key] = Group(held, found.framed, found.digest)
    ordered, framed, digests = _ordered(groups)
    return ListenerGroups(rules, ordered, framed, digests)


def _window(
    old: tuple[RouteRule, ...], new: tuple[RouteRule, ...]
) -> tuple[tuple[RouteRule, ...], tuple[RouteRule, ...]]:
    """The parts of `old` and `new` between their longest common prefix and suffix (by
    identity, scanned in C): where a route change put, moved or took its rules."""
    head, tail = common_ends(old, new)
    return old[head : len(old) - tail], new[head : len(new) - tail]


def _ordered_by(rules: tuple[RouteRule, ...], held: list[RouteRule]) -> tuple[RouteRule, ...]:
    """`held` (rules of `rules`) in the order of `rules`: a C search per rule for a small
    group, one index of every rule for a big one."""
    ids = list(map(id, rules))
    if len(held) <= SCRATCH_MIN:
        where = sorted(map(ids.index, map(id, held)))
    else:
        index = dict(zip(ids, range(len(ids)), strict=True))
        where = sorted(map(index.__getitem__, map(id, held)))
    return tuple(map(rules.__getitem__, where))


def regroup(
    name: str, rules: tuple[RouteRule, ...], last: ListenerGroups | None, frame: Frame
) -> ListenerGroups:
    """The listener's grouping for `rules`, from its last one: only the hosts of the rules
    added or removed (by identity, within the window a change touched) are grouped and
    framed again."""
    if last is None:
        return scratch(name, rules, None, frame)
    if rules is last.rules:
        return last
    carried = _carried(name, rules, last)
    if carried is not None:
        return _patched(name, rules, last, frame, *carried)
    old_part, new_part = _window(last.rules, rules)
    old_ids = set(map(id, old_part))
    new_ids = set(map(id, new_part))
    removed_ids = old_ids - new_ids
    added_ids = new_ids - old_ids
    if len(added_ids) + len(removed_ids) > max(SCRATCH_MIN, len(rules) // SCRATCH_SHARE):
        return scratch(name, rules, last, frame)
    if not added_ids and not removed_ids:
        if old_part:  # the same rules in another order: not a route change's
            return scratch(name, rules, last, frame)
        return ListenerGroups(rules, last.groups, last.framed, last.digests, last.order, (), ())
    added = compress(new_part, map(added_ids.__contains__, map(id, new_part)))
    removed = tuple(compress(old_part, map(removed_ids.__contains__, map(id, old_part))))
    touched: dict[str, list[RouteRule]] = {}  # host -> its rules added
    for rule in added:
        touched.setdefault(host_of(rule), []).append(rule)
    for rule in removed:
        touched.setdefault(host_of(rule), [])
    hosts: dict[str, tuple[RouteRule, ...]] = {}
    for host, new_rules in touched.items():
        before = last.groups.get(group_key(name, host))
        kept = [r for r in before.rules if id(r) not in removed_ids] if before else []
        # The added rules come from one slice of `rules`, in its order: with no rule kept
        # (a new host, or a route's rules replaced) they are the group in order already,
        # and the listener's 10,000 rules need no index.
        hosts[host] = _ordered_by(rules, kept + new_rules) if kept else tuple(new_rules)
    return _patched(name, rules, last, frame, hosts, removed)


def _carried(
    name: str, rules: tuple[RouteRule, ...], last: ListenerGroups
) -> tuple[dict[str, tuple[RouteRule, ...]], tuple[RouteRule, ...]] | None:
    """The hosts a route change regrouped with their rules now, and the rules it took out,
    when `rules` says so (`EditedRules` made from the rules of `last`) and the count of
    rules adds up; else None (compare the rules)."""
    if not isinstance(rules, EditedRules) or rules.edited_from != id(last.rules):
        return None
    count = len(last.rules)
    removed: list[RouteRule] = []
    for host, held in rules.hosts.items():
        if any(host_of(rule) != host for rule in held):
            return None
        before = last.groups.get(group_key(name, host))
        if before is not None:
            kept = set(map(id, held))
            removed.extend(rule for rule in before.rules if id(rule) not in kept)
            count -= len(before.rules)
        count += len(held)
    if count != len(rules):
        return None
    return rules.hosts, tuple(removed)


def _patched(
    name: str,
    rules: tuple[RouteRule, ...],
    last: ListenerGroups,
    frame: Frame,
    hosts: Mapping[str, tuple[RouteRule, ...]],
    removed: tuple[RouteRule, ...],
) -> ListenerGroups:
    """`last` with the groups of `hosts` (each host's rules now, in the listener's order)
    framed again where their rules differ, and those left without rules taken out."""
    # Persistent maps: the last grouping's stay as they are (the store's retained versions
    # read them) and this one's share all but the changed keys' paths.
    groups, framed, digests = (
        persistent(last.groups).mutate(),
        persistent(last.framed).mutate(),
        persistent(last.digests).mutate(),
    )
    # The keys sorted: the maps hold no order. Made once from a grouping from scratch
    # (its dicts are in key order), then copied only when a key comes or goes.
    order = list(last.keys()) if last.order is None else last.order
    own = last.order is None  # whether `order` is this grouping's own list
    keys: list[str] = []
    for host, held in hosts.items():
        key = group_key(name, host)
        before = groups.get(key)
        if before is None and not held:
            continue  # decided again, no rules before or after
        same = before is not None and len(before.rules) == len(held)
        if same and before is not None and all(map(is_, before.rules, held)):
            continue  # decided again, the same rules
        keys.append(key)
        if before is None or not held:
            order, own = (order, own) if own else (list(order), True)
        if not held:
            del groups[key], framed[key], digests[key]
            del order[bisect_left(order, key)]
            continue
        group = groups[key] = frame(name, host, held)
        framed[key], digests[key] = group.framed, group.digest
        if before is None:
            insort(order, key)
    return ListenerGroups(
        rules,
        groups.finish(),
        framed.finish(),
        digests.finish(),
        order,
        tuple(keys),
        removed,
    )


def replaced_rules(
    last: Mapping[str, ListenerGroups], now: Mapping[str, ListenerGroups]
) -> Iterator[RouteRule]:
    """The rules of the listeners' `last` groupings that their groupings `now` no longer
    hold (by identity): what a route change replaced, within the window it touched, and
    every rule of a listener gone. O(changed) for a route change."""
    for name, before in last.items():
        after = now.get(name)
        if after is before or (after is not None and after.rules is before.rules):
            continue
        if after is None:
            yield from before.rules
            continue
        if after.replaced is not None:  # patched from `before`: it knows what it dropped
            yield from after.replaced
            continue
        old_part, new_part = _window(before.rules, after.rules)
        kept = set(map(id, new_part))
        yield from (rule for rule in old_part if id(rule) not in kept)
