"""A listener's route rules sorted into host layers, and its route groups' layers joined
per listener in O(changed groups).

Pure. A route group (contract 2) holds the rules of one host of one listener, so its
layers (its host's, and for a wildcard the "**." one) are its own: no layer spans two
groups. Each group's `Layers` is kept by the group's framed bytes (an unchanged group is
neither parsed nor sorted again), and `GroupJoin` keeps every listener's layers joined
from its groups', moved by the groups a change set names: what changed is taken out and
put in, the rest is not looked at (docs/design.md, "Deltas on the agent side, and the
render cache"). The result is the `Layers` the listener's rules inline would give
(`tests/agent/test_route_groups.py`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from immutables import Map

from nodeagent.config.errors import RenderError
from nodeagent.config.rules import (
    RouteCache,
    Rule,
    checked_group,
    is_wildcard_token,
    layer_entries,
)
from peerplane.v1 import peerplane_pb2 as pb

MAX_RULES = 100_000
MAX_GROUP_LAYERS = 1 << 16
K = TypeVar("K")


def wildcard_depth(token: str) -> int:
    return token.count(".")  # "*.b.com", "**.b.com": 2 labels after the "*"


@dataclass(frozen=True, slots=True)
class Layers:
    """A listener's rules (or one route group's) sorted into host layers: the map
    entries (keys start with their layer's token, so no two layers share one), the
    backends they name, each layer's config rules (unnamed), every config rule in list
    order, the wildcard depths of its layers, the rules set aside for unknown fields and
    the number of rules."""

    exact: Mapping[str, str]  # a joined listener's: persistent maps (`_Joined`)
    prefix: Mapping[str, str]
    named: frozenset[str]
    in_config: dict[str, tuple[Rule, ...]]
    config: tuple[Rule, ...]
    depths: frozenset[int]
    aside: tuple[tuple[str, str], ...]
    rules: int = 0


def sort_layers(parsed: Sequence[Rule], cache: RouteCache) -> Layers:
    """Sort checked rules (in list order) into host layers."""
    layers: dict[str, list[Rule]] = {}
    for rule in parsed:
        for token in rule.tokens:
            layers.setdefault(token, []).append(rule)  # hostnames checked by _parse
    exact_map: dict[str, str] = {}
    prefix_map: dict[str, str] = {}
    in_config: dict[str, tuple[Rule, ...]] = {}
    named: set[str] = set()
    for token, rules in layers.items():
        layer = layer_entries(token, tuple(rules), cache)
        exact_map.update(layer.exact)  # keys start with the token: no two layers share one
        prefix_map.update(layer.prefix)
        named.update(layer.backends)
        if layer.config:
            in_config[token] = layer.config
    configured = {id(r) for rules in in_config.values() for r in rules}
    return Layers(
        exact_map,
        prefix_map,
        frozenset(named),
        in_config,
        tuple(r for r in parsed if id(r) in configured),
        frozenset(wildcard_depth(t) for t in layers if is_wildcard_token(t)),
        tuple((rule.rule.source, rule.aside) for rule in parsed if rule.aside),
        len(parsed),
    )


def group_layers(data: bytes, group: pb.RouteGroup, cache: RouteCache) -> Layers | None:
    """One route group's layers, kept by its framed bytes; None when one of its rules
    serves another host than the group's (its layers could be another group's too)."""
    found: Layers | None = cache.group_layers.get(data)
    if found is None:
        checked = checked_group(data, group, cache)
        own = (group.host,) if group.host else ()
        if any(tuple(r.hostnames) != own for r in checked.given):
            return None
        found = sort_layers(checked.rules, cache)
        if len(cache.group_layers) >= MAX_GROUP_LAYERS:
            cache.group_layers.clear()
        cache.group_layers[data] = found
    return found


class _Joined:
    """One listener's groups' layers joined: the merged map entries, how many groups
    name each backend and use each wildcard depth, and the groups with config rules or
    rules set aside (few: their order is the listener's, by key)."""

    __slots__ = ("depths", "exact", "groups", "last", "named", "prefix", "rules", "special")

    def __init__(self) -> None:
        self.groups: dict[str, Layers] = {}
        # Persistent maps: the layers handed out last stay as they were (the last render's
        # map files, compared with the next ones) and a change sets its group's entries,
        # no copy of 10,000 entries per render.
        self.exact: Map[str, str] = Map()
        self.prefix: Map[str, str] = Map()
        self.named: dict[str, int] = {}
        self.depths: dict[int, int] = {}
        self.special: dict[str, Layers] = {}
        self.rules = 0
        self.last: Layers | None = None

    def add(self, key: str, layers: Layers) -> None:
        self.groups[key] = layers
        if layers.exact:
            self.exact = self.exact.update(layers.exact)
        if layers.prefix:
            self.prefix = self.prefix.update(layers.prefix)
        for name in layers.named:
            self.named[name] = self.named.get(name, 0) + 1
        for depth in layers.depths:
            self.depths[depth] = self.depths.get(depth, 0) + 1
        if layers.config or layers.aside:
            self.special[key] = layers
        self.rules += layers.rules
        self.last = None

    def remove(self, key: str) -> None:
        layers = self.groups.pop(key)
        self.exact = _without(self.exact, layers.exact)
        self.prefix = _without(self.prefix, layers.prefix)
        _less(self.named, layers.named)
        _less(self.depths, layers.depths)
        self.special.pop(key, None)
        self.rules -= layers.rules
        self.last = None

    def layers(self) -> Layers:
        """The joined layers (their maps persistent: the next change makes new ones)."""
        if self.last is None:
            in_config: dict[str, tuple[Rule, ...]] = {}
            config: list[Rule] = []
            aside: list[tuple[str, str]] = []
            for key in sorted(self.special):
                special = self.special[key]
                in_config.update(special.in_config)
                config += special.config
                aside += special.aside
            self.last = Layers(
                self.exact,
                self.prefix,
                frozenset(self.named),
                in_config,
                tuple(config),
                frozenset(self.depths),
                tuple(aside),
                self.rules,
            )
        return self.last


def _without(entries: Map[str, str], gone: Collection[str]) -> Map[str, str]:
    """`entries` without the keys `gone` (each held)."""
    if not gone:
        return entries
    less = entries.mutate()
    for key in gone:
        del less[key]
    return less.finish()


def _less(counts: dict[K, int], items: Collection[K]) -> None:
    """One fewer group uses each of `items`; those no group uses any more go."""
    for item in items:
        left = counts[item] - 1
        if left:
            counts[item] = left
        else:
            del counts[item]


@dataclass
class GroupJoin:
    """Every listener's layers joined from its route groups', and the framed groups
    (`Held.parts.route_groups`, by identity) they reflect; travels in the `RouteCache`."""

    source: Mapping[str, bytes] | None = None
    listeners: dict[str, _Joined] = field(default_factory=dict)
    owner: dict[str, str] = field(default_factory=dict)  # group key -> listener name

    def layers(
        self,
        groups: Mapping[str, pb.RouteGroup],
        framed: Mapping[str, bytes],
        cache: RouteCache,
        changed: Collection[str] | None = None,
        base: Mapping[str, bytes] | None = None,
    ) -> dict[str, Layers] | None:
        """Each listener's joined layers by name. When `base` is the groups this join
        reflects and `changed` the keys of the groups added, changed or removed since,
        only those are moved; otherwise every group is joined again. None when a group's
        rules serve another host than its own (render rule by rule)."""
        incremental = changed is not None and base is not None and self.source is base
        self.source = None  # half moved until the end: an error means a rebuild next time
        if not incremental:
            self.listeners, self.owner = {}, {}
        elif base is not None and changed is not None:
            replaced = [(k, base[k]) for k in changed if k in base and base[k] is not framed.get(k)]
            cache.retire(framed, replaced)
        keys = changed if incremental and changed is not None else groups.keys()
        for key in keys:
            was = self.owner.pop(key, None)
            if was is not None:
                self.listeners[was].remove(key)
            group = groups.get(key)
            if group is None:
                continue
            data = framed.get(key)
            if data is None:
                data = group.SerializeToString(deterministic=True)
            found = group_layers(data, group, cache)
            if found is None:
                return None
            joined = self.listeners.get(group.listener)
            if joined is None:
                joined = self.listeners[group.listener] = _Joined()
            joined.add(key, found)
            self.owner[key] = group.listener
        out: dict[str, Layers] = {}
        for name, joined in self.listeners.items():
            if joined.groups:
                if joined.rules > MAX_RULES:
                    raise RenderError(f"listener {name}: more than {MAX_RULES} rules")
                out[name] = joined.layers()
        self.source = framed
        return out
