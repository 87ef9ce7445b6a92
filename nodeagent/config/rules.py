"""A route rule of the snapshot, checked: every string matched whole against the shared
patterns (`peerplane.patterns`, `peerplane.names`, `peerplane.limits`), its path match,
precedence and map backend found, and its host layers' map entries.

Pure. What the last renders checked is kept in a `RouteCache` the caller passes (the
render cache carries it): every change re-renders a listener whole, and all but the
changed rules are those of the last render.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from nodeagent.config.errors import RenderError
from nodeagent.config.filters import RENDERERS, check_filters, map_entry_ok
from nodeagent.config.filters.base import refuse
from nodeagent.config.unknown import unknown_field_paths
from peerplane import limits, patterns
from peerplane.v1 import peerplane_pb2 as pb

ANY_HOST = "*"  # the layer token of rules for any host
# A wildcard's layer tokens: "*.suffix" is looked up for a host of exactly one label before
# the suffix, "**.suffix" for a deeper one; a rule whose wildcards take one label
# (`single_label_wildcards`, Ingress) joins only the first, any other rule both.
DEEP_PREFIX = "**."
# A map rule's precedence inside its layer: every Exact path above every prefix, a longer
# prefix above a shorter one (the Gateway API's order, and the Ingress one).
EXACT_STRENGTH = 2 * patterns.MAX_PATH


@dataclass(frozen=True, eq=False)
class Rule:
    rid: str  # "c<n>", a config rule's name once it won ("" until it is one)
    exact: bool
    path: str
    strength: int
    backend: str | None  # set when the rule is a map rule
    rule: pb.RouteRule
    tokens: tuple[str, ...] = ()  # the host layers it belongs to: its hostnames, or any host
    # Why the rule is set aside ("" : it is not): it carries fields this agent does not
    # know, so it keeps its match and answers 500 (`unknown_fields_aside`).
    aside: str = ""


K = TypeVar("K")
V = TypeVar("V")
_CACHE = 1 << 16
# Entries a route cache may grow by past twice its live size before it is swept.
SWEEP_SLACK = 1024
route_host = functools.lru_cache(_CACHE)(patterns.is_route_host)
_path = functools.lru_cache(_CACHE)(patterns.is_path)
_proxy_name = functools.lru_cache(_CACHE)(
    lambda name: limits.PROXY_NAME.fullmatch(name) is not None
)


def checked_backend_name(name: str) -> str:
    """`name` when it is a valid HAProxy proxy name (checks remembered); else RenderError."""
    if not _proxy_name(name):
        raise RenderError(f"invalid backend name: {name!r}")
    return name


def checked_rule(r: pb.RouteRule, cache: RouteCache) -> Rule:
    """`_parse`, remembered by the rule's bytes (bounded): a listener is rendered whole on
    every change, and all but the changed rules are those of the last render."""
    key = r.SerializeToString(deterministic=True)
    found = cache.rules.get(key)
    if found is None:
        found = _parse(pb.RouteRule.FromString(key))  # its own copy: callers may mutate theirs
        if len(cache.rules) >= _CACHE:
            cache.rules.clear()
        cache.rules[key] = found
    return found


def unknown_fields_aside(r: pb.RouteRule) -> tuple[pb.RouteRule, str]:
    """A rule carrying fields this agent does not know (a filter newer than the agent, or
    a new value of one) would be served without them: it keeps its match only, no
    backend and no filter, so its requests get a 500 rather than another rule's answer or
    the rule served without its filter; the reason says which fields ("" : none)."""
    unknown = unknown_field_paths(r)
    if not unknown:
        return r, ""
    kept = pb.RouteRule()
    kept.CopyFrom(r)
    kept.ClearField("backends")
    for renderer in RENDERERS:
        kept.ClearField(renderer.field)
    kept.DiscardUnknownFields()
    fields = ", ".join(unknown)
    return kept, (
        f"carries fields this agent does not know ({fields}): answered with a 500;"
        " upgrade the agent"
    )


def _parse(given: pb.RouteRule) -> Rule:
    """Check every string of one rule; its path match, precedence and map backend."""
    r, aside = unknown_fields_aside(given)
    src = r.source[:200]
    for host in r.hostnames:
        if not route_host(host):
            raise refuse("hostname", host, src)
    exact, path = False, "/"
    if r.HasField("path"):
        if r.path.type not in (pb.PathMatch.PATH_PREFIX, pb.PathMatch.EXACT):
            raise refuse("path match type", r.path.type, src)
        if not _path(r.path.value):
            raise refuse("path", r.path.value, src)
        exact = r.path.type == pb.PathMatch.EXACT
        path = r.path.value if exact else (r.path.value.rstrip("/") or "/")
    if r.method and not patterns.is_method(r.method):
        raise refuse("method", r.method, src)
    for h in r.headers:
        if not patterns.is_header_name(h.name) or not patterns.is_header_value(h.value):
            raise refuse("header match", f"{h.name}: {h.value}", src)
    for q in r.query_params:
        if not patterns.is_query_name(q.name) or not patterns.is_query_value(q.value):
            raise refuse("query match", f"{q.name}={q.value}", src)
    for b in r.backends:
        if b.backend:
            checked_backend_name(b.backend)
        if b.weight > patterns.MAX_WEIGHT:
            raise refuse("weight", b.weight, src)
    check_filters(r, src)
    # A map rule's one backend (map_entry_ok: its one served share, resolved).
    backend = next(b.backend for b in r.backends if b.weight > 0) if map_entry_ok(r) else None
    strength = (EXACT_STRENGTH if exact else 0) + len(path)
    tokens = tuple(dict.fromkeys(_tokens(r.hostnames, r.single_label_wildcards)))
    return Rule("", exact, path, strength, backend, r, tokens, aside)


def _tokens(hostnames: Sequence[str], single_label: bool) -> list[str]:
    """The host layers of a rule with these (checked) hostnames (`DEEP_PREFIX`)."""
    if not hostnames:
        return [ANY_HOST]
    out: list[str] = []
    for host in hostnames:
        out.append(host)
        if host.startswith(patterns.WILDCARD_PREFIX) and not single_label:
            out.append(f"*{host}")
    return out


def is_wildcard_token(token: str) -> bool:
    """Whether a layer token is a wildcard's (one label or deeper), not an exact host's."""
    return token.startswith((patterns.WILDCARD_PREFIX, DEEP_PREFIX))


@dataclass(frozen=True, slots=True)
class LayerEntries:
    """One host layer's map entries (in order, the first of a key winning), the backends
    they name, and the rules left to config lines."""

    rules: tuple[Rule, ...]
    exact: dict[str, str]
    prefix: dict[str, str]
    backends: frozenset[str]
    config: tuple[Rule, ...]


@dataclass(frozen=True)
class RouteCache:
    """What the last renders checked, kept for the next, each map bounded: every rule by
    its bytes (`checked_rule`) and every host layer's entries by its token (`layer_entries`).
    It travels with the render cache (`render.Frontends.route_cache`), from one render to
    the next; a new one checks everything again and gives the same output."""

    rules: dict[bytes, Rule] = field(default_factory=dict)
    layers: dict[str, LayerEntries] = field(default_factory=dict)
    # Each route group's checked rules by the group's framed bytes (`checked_group`): an
    # unchanged group is not parsed again, not even serialized.
    groups: dict[bytes, CheckedGroup] = field(default_factory=dict)
    # Each route group's host layers by its framed bytes (`layers.Layers`).
    group_layers: dict[bytes, Any] = field(default_factory=dict)
    # How many entries the maps held after the last `sweep` (one item, the cache is
    # frozen): the next sweep is due when they have grown past twice that.
    swept: list[int] = field(default_factory=lambda: [0])
    # The groups the last incremental join replaced or removed, (key, framed bytes): their
    # entries go at the next one (`retire`), once the classifier has compared them.
    retired: list[tuple[str, bytes]] = field(default_factory=list)

    def retire(self, held: Mapping[str, bytes], replaced: list[tuple[str, bytes]]) -> None:
        """Forget the groups the last join replaced, unless held again (a route
        re-pointed and back), and their rules; then remember `replaced` for the next
        join. O(changed groups): what a route change keys into the cache, the next one
        takes out (issue 33's soak: they stayed until `_CACHE` entries)."""
        for key, data in self.retired:
            now = held.get(key)
            if now is data or now == data:
                continue
            self.group_layers.pop(data, None)
            checked = self.groups.pop(data, None)
            current = self.groups.get(now) if now is not None else None
            kept = {id(r) for r in current.rules} if current is not None else set()
            for given, rule in zip(checked.given, checked.rules, strict=True) if checked else ():
                rule_key = given.SerializeToString(deterministic=True)
                if id(rule) not in kept and self.rules.get(rule_key) is rule:
                    del self.rules[rule_key]  # an unchanged rule stays with its group
        self.retired[:] = replaced

    def sweep_due(self, count: int) -> bool:
        """Whether the maps have grown past twice what the last sweep kept (or `count`,
        a bound on the live groups: the caller's mappings' sizes) plus `SWEEP_SLACK`:
        O(1), so a render that is not due pays nothing."""
        size = len(self.groups) + len(self.group_layers) + len(self.rules)
        return size > 2 * max(self.swept[0], count) + SWEEP_SLACK

    def sweep(self, live: Collection[bytes]) -> None:
        """Forget what no held route group uses any more. Each change keys new entries
        by the changed groups' and rules' new bytes; without a sweep the old ones stay
        until `_CACHE` entries (hundreds of MB at thousands of routes: issue 33's soak).
        O(cache), and due (`sweep_due`) only after at least as many changes. `live`: the
        framed bytes of the groups held now and of those rendered last (the classifier
        compares a changed group's old layers with its new). A rule stays while a kept
        group or a host layer (`layers`, the inline listeners' rules) holds it."""
        keep = live if isinstance(live, (set, frozenset)) else set(live)
        _keep(self.groups, lambda k, _: k in keep)
        _keep(self.group_layers, lambda k, _: k in keep)
        used = {id(r) for g in self.groups.values() for r in g.rules}
        used.update(id(r) for entries in self.layers.values() for r in entries.rules)
        _keep(self.rules, lambda _, v: id(v) in used)
        self.swept[0] = len(self.groups) + len(self.group_layers) + len(self.rules)


def _keep(into: dict[K, V], wanted: Callable[[K, V], bool]) -> None:
    """`into` with only the wanted items, rebuilt (a dict emptied by deletions keeps its
    table's size)."""
    kept = {k: v for k, v in into.items() if wanted(k, v)}
    into.clear()
    into.update(kept)


@dataclass(frozen=True, slots=True)
class CheckedGroup:
    """A route group's rules, checked, in order, and the snapshot's rules they were
    checked from (a rule set aside for unknown fields is checked as a copy)."""

    rules: tuple[Rule, ...]
    given: tuple[pb.RouteRule, ...]


def checked_group(framed: bytes, group: pb.RouteGroup, cache: RouteCache) -> CheckedGroup:
    """The group's rules checked (`checked_rule`), remembered by its framed bytes (the
    same object while a delta leaves it alone: one dict lookup)."""
    found = cache.groups.get(framed)
    if found is None:
        given = tuple(group.rules)
        found = CheckedGroup(tuple(checked_rule(r, cache) for r in given), given)
        if len(cache.groups) >= _CACHE:
            cache.groups.clear()
        cache.groups[framed] = found
    return found


def layer_entries(token: str, rules: tuple[Rule, ...], cache: RouteCache) -> LayerEntries:
    """`token`'s layer, remembered while its rules are the very same checked objects (a
    change re-renders a listener whole; with thousands of hosts, one host's layer moved)."""
    found = cache.layers.get(token)
    if found is not None and found.rules == rules:  # Rule compares by identity
        return found
    mapped = in_map_order(rules)
    exact: dict[str, str] = {}
    prefix: dict[str, str] = {}
    backends: set[str] = set()
    config: list[Rule] = []
    for rule in rules:
        if mapped and rule.backend is not None:
            key = f"{token}{rule.path}" if rule.exact else f"{token}{rule.path.rstrip('/')}/"
            target = exact if rule.exact else prefix
            target.setdefault(key, f"{rule.strength}:{rule.backend}")  # first one wins
            backends.add(rule.backend)
        else:
            config.append(rule)
    found = LayerEntries(rules, exact, prefix, frozenset(backends), tuple(config))
    if len(cache.layers) >= _CACHE:
        cache.layers.clear()
    cache.layers[token] = found
    return found


def in_map_order(rules: Sequence[Rule]) -> bool:
    """Whether map lookups and guarded config rules give this layer's first match in list
    order: no rule of higher precedence follows a map rule, none of lower precedence comes
    before one, and no config rule with the very same path match follows one (it would win
    the guard's tie). Rules of equal precedence but other paths never match one request."""
    lowest = None
    for rule in rules:  # forwards: what comes before a map rule ranks at least as high
        if rule.backend is not None and lowest is not None and lowest < rule.strength:
            return False
        lowest = rule.strength if lowest is None else min(lowest, rule.strength)
    highest, later_config = None, set()
    for rule in reversed(rules):  # backwards: what follows a map rule ranks no higher
        if rule.backend is not None:
            if highest is not None and highest > rule.strength:
                return False
            if (rule.exact, rule.path) in later_config:
                return False
        else:
            later_config.add((rule.exact, rule.path))
        highest = rule.strength if highest is None else max(highest, rule.strength)
    return True
