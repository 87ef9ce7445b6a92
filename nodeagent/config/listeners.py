"""The route model's HTTP listeners -> HAProxy frontends and the map files they read.

Pure. One frontend per listener (address, port): a listener without an address binds every
address of its port, one with an address (a Gateway's own) binds that address only, so
requests on different addresses never meet. The Service annotations' host routes of the
same port join the every-address listener as a last layer. A request is served by the
first rule, in the snapshot's order, among the rules of the most specific host layer that
has a match: the exact host, then each `*.suffix` wildcard from the longest suffix (a
rule with `single_label_wildcards`, an Ingress rule's, only when one label precedes the
suffix: `rules.DEEP_PREFIX`), then the rules for any host, then the annotation host
routes, then `default_backend` or 404.
A layer of `closed_hosts` (its hostname held by another namespace than the next less
specific one's) ends the lookup of a request it has no match for with a 404: no less
specific layer, annotation host route or default backend answers it.

Within a layer, a rule that needs only a host and a path lookup and names one backend
(a "map rule", `filters.map_entry_ok`) is an entry of a map file (`map_str` for Exact
paths, `map_beg` for prefixes, keyed `<host><path>/` so that the longest prefix wins
element-wise); every other rule (method, header or query matches, filters, weights, an
unresolved backend) is rendered into the frontend as lines evaluated in order, each
guarded so that a map rule of higher precedence wins. Map content changes through the
runtime API without a reload; the frontend's text changes only when config-rendered
rules, wildcard depths, ports or the default backend do (docs/design.md, "Route
rendering and runtime updates").

Every string is re-checked against `peerplane.patterns` before it is written: those
patterns admit no space, quote, backslash or `#`, so no value needs quoting in a config
line or a map file; a `%` is doubled where HAProxy reads a log-format.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

from immutables import Map

from nodeagent.config.checked import DIRECTORY, check
from nodeagent.config.errors import RenderError
from nodeagent.config.filters import filter_lines
from nodeagent.config.filters.base import RuleOutcome
from nodeagent.config.layers import MAX_RULES, GroupJoin, Layers, sort_layers, wildcard_depth
from nodeagent.config.rules import (
    ANY_HOST,
    DEEP_PREFIX,
    RouteCache,
    Rule,
    checked_backend_name,
    checked_group,
    checked_rule,
    is_wildcard_token,
    route_host,
)
from peerplane import names
from peerplane.addresses import AddressError, canonical_address
from peerplane.parts import listener_name
from peerplane.v1 import peerplane_pb2 as pb

HTTP_FRONTEND = "fe_http"  # the annotation routes' frontend, merged or not
# Wildcard suffix depths (labels) looked up even when no rule uses them, so that a first
# `*.example.com` is a map change, not a reload.
WILDCARD_DEPTHS = (1, 2, 3)
_WEIGHT_TOTAL = 1 << 31

MapEntries = Mapping[str, str]  # key -> value; written in key order (`map_file`)


@dataclass(frozen=True)
class RoutedFrontends:
    """The HTTP frontends of the listeners: their config lines, the map files they read
    (path -> entries), the backends they name, and each frontend's text by listener key
    (what a change must compare to know whether it can go through the runtime API)."""

    lines: tuple[str, ...]
    maps: Mapping[str, MapEntries]
    backends: frozenset[str]
    texts: Mapping[str, str]
    # (source, reason) of each rule set aside for fields the agent does not know
    # (`rules.unknown_fields_aside`), in order
    unknown_aside: tuple[tuple[str, str], ...] = ()
    # Each frontend's config rules by their name in its lines ("c0"), by frontend name:
    # what a `haproxy -c` alert on one of those lines is about (nodeagent/apply/attribution.py).
    config_rules: Mapping[str, Mapping[str, pb.RouteRule]] = dataclasses.field(default_factory=dict)
    # Each listener's route map files (exact, prefix) by its name in route groups, when
    # every listener was rendered from its groups' layers (`layers.GroupJoin`): a
    # group's map entries are then those of its layers (`changes.group_map_updates`).
    group_maps: Mapping[str, tuple[str, str]] | None = None


def listener_key(listener: pb.HttpListener) -> str:
    """What names a listener's frontend and files: its port ("80"), or with an address
    `<address>_<port>` ("127.0.201.2_80"; an IPv6 address's colons as dashes), the
    address checked and canonical."""
    if not listener.address:
        return str(listener.port)
    try:
        address = canonical_address(listener.address)
    except AddressError as err:
        raise RenderError(f"listener {listener.port}: invalid address: {err}") from None
    return f"{address.replace(':', '-')}_{listener.port}"


def map_paths(maps_dir: str, key: str) -> tuple[str, str, str]:
    """The exact, prefix and annotation-host map files of one listener (`listener_key`)."""
    base = f"{maps_dir}/fe_{key}"
    return f"{base}.exact.map", f"{base}.prefix.map", f"{base}.hosts.map"


def closed_path(maps_dir: str, key: str) -> str:
    """The map file of one listener's closed host layers (`closed_hosts`)."""
    return f"{maps_dir}/fe_{key}.closed.map"


def frontend_name(key: str, merged: bool) -> str:
    return HTTP_FRONTEND if merged else f"fe_http_{key}"


def map_file(entries: MapEntries) -> bytes:
    """A map file's bytes: one `key value` line per entry, in key order whatever the
    order of `entries` (a render keeps them unsorted: sorting 20,000 keys per route change
    would delay the runtime commands; the files are written after them). HAProxy's map
    lookups are trees, so the order is for people and diffs."""
    keys = sorted(entries)
    return "".join([f"{k} {entries[k]}\n" for k in keys]).encode()


def rule_fingerprint(rule: pb.RouteRule) -> str:
    """A route rule's identity across versions: SHA-256 hex of its deterministic bytes."""
    return hashlib.sha256(rule.SerializeToString(deterministic=True)).hexdigest()


def render_listeners(
    listeners: Sequence[pb.HttpListener],
    annotation: pb.HttpFrontend | None,
    maps_dir: str,
    bind: Callable[[pb.HttpListener], str],
    cache: RouteCache,
    rules_aside: frozenset[str] = frozenset(),
    groups: Mapping[str, pb.RouteGroup] | None = None,
    framed_groups: Mapping[str, bytes] | None = None,
    changed: Collection[str] | None = None,
    base: Mapping[str, bytes] | None = None,
    join: GroupJoin | None = None,
) -> RoutedFrontends:
    """The listeners' frontends; `annotation` is the HTTP frontend of the Service
    annotations when it shares a listener's port (its routes become the last layer).
    A listener's rules are its own (a contract-1 snapshot's) followed by those of its
    route `groups` (by key, taken in key order; `framed_groups` their framed bytes, what the
    cache knows them by).
    `cache` holds what the last renders checked (`RouteCache`): the caller passes the
    previous render's, or a new one. The rules whose `rule_fingerprint` is in
    `rules_aside` are not rendered (the applier's choice: rules HAProxy refused).
    `changed` (the keys of the groups added, changed or removed since the render whose
    groups were `base`) lets the groups' joined layers move in O(changed groups)
    (`join`, the previous render's `layers.GroupJoin`; None: a new one)."""
    groups = groups if groups is not None else {}
    framed = framed_groups if framed_groups is not None else {}
    names = {listener_name(li.port, li.address) for li in listeners}
    joined: dict[str, Layers] | None = None
    if not rules_aside and not any(li.rules for li in listeners):
        joined = (join or GroupJoin()).layers(groups, framed, cache, changed, base)
    by_listener: dict[str, list[tuple[bytes, pb.RouteGroup]]] = {}
    if joined is None:  # rule by rule: one pass over the groups, in key order
        for key in sorted(groups):  # (a held snapshot appends the groups deltas add)
            group = groups[key]
            data = framed.get(key)
            if data is None:
                data = group.SerializeToString(deterministic=True)
            by_listener.setdefault(group.listener, []).append((data, group))
    if listeners or groups:
        check(DIRECTORY, maps_dir, "maps directory")
    for name in sorted((joined if joined is not None else by_listener).keys() - names):
        raise RenderError(f"route group of listener {name!r}, which the snapshot does not have")
    group_maps: dict[str, tuple[str, str]] | None = {} if joined is not None else None
    lines: list[str] = []
    maps: dict[str, MapEntries] = {}
    backends: set[str] = set()
    texts: dict[str, str] = {}
    aside: list[tuple[str, str]] = []
    config_rules: dict[str, Mapping[str, pb.RouteRule]] = {}
    for listener in sorted(listeners, key=lambda li: (li.port, li.address)):
        port = listener.port
        if not 1 <= port <= 65535:
            raise RenderError(f"invalid listener port: {port}")
        key = listener_key(listener)
        if key in texts:
            where = f" address {listener.address}" if listener.address else ""
            raise RenderError(f"two listeners on port {port}{where}")
        shared = annotation is not None and annotation.port == port and not listener.address
        hosts = annotation if shared else None
        name = listener_name(port, listener.address)
        if group_maps is not None:
            group_maps[name] = map_paths(maps_dir, key)[:2]
        if joined is not None:
            layers = joined.get(name, _NO_LAYERS)
        else:
            layers = _flat_layers(listener, by_listener.get(name, ()), cache, rules_aside)
        section, files, named, rids, refused = _listener(
            listener, layers, key, hosts, maps_dir, bind
        )
        aside += refused
        lines += section
        maps.update(files)
        backends |= named
        texts[key] = "\n".join(section)
        config_rules[frontend_name(key, hosts is not None)] = rids
    return RoutedFrontends(
        tuple(lines), maps, frozenset(backends), texts, tuple(aside), config_rules, group_maps
    )


# Every change re-renders a listener's frontend; its rules are mostly those of the last
# render: a bounded cache of checked values keeps 6,000 rules from costing 6,000 host
# parses per change, and a route group's layers are kept by the group's bytes
# (`layers.group_layers`). Only whether a string passed is kept, never a string that
# failed.

_NO_LAYERS = Layers({}, {}, frozenset(), {}, (), frozenset(), ())


def _flat_layers(
    listener: pb.HttpListener,
    groups: Sequence[tuple[bytes, pb.RouteGroup]],
    cache: RouteCache,
    rules_aside: frozenset[str],
) -> Layers:
    """The layers of the listener's own rules followed by its groups' (one Python step
    per rule): a contract-1 snapshot, rules set aside, or groups whose rules are not all
    of the group's host."""
    parsed = [checked_rule(r, cache) for r in listener.rules]
    given = list(listener.rules)
    for data, group in groups:
        checked = checked_group(data, group, cache)
        parsed += checked.rules
        if rules_aside:
            given += checked.given
    if len(parsed) > MAX_RULES:
        raise RenderError(f"listener {listener.port}: more than {MAX_RULES} rules")
    if rules_aside:
        parsed = [
            r for r, g in zip(parsed, given, strict=True) if rule_fingerprint(g) not in rules_aside
        ]
    return sort_layers(parsed, cache)


def _listener(
    listener: pb.HttpListener,
    layers: Layers,
    key: str,
    annotation: pb.HttpFrontend | None,
    maps_dir: str,
    bind: Callable[[pb.HttpListener], str],
) -> tuple[
    list[str], dict[str, MapEntries], set[str], dict[str, pb.RouteRule], list[tuple[str, str]]
]:
    """One listener's frontend lines, map files, the backends it names, its config rules by
    name and the rules it sets aside for unknown fields (source, reason), from its rules'
    host `layers`."""
    port = listener.port
    aside = list(layers.aside)
    named = set(layers.named)
    # Config rules are named by their order among config rules only: a map rule added or
    # removed before them leaves the frontend's text, and so the runtime path, alone.
    order = {id(r): n for n, r in enumerate(layers.config)}
    in_config = {
        token: [dataclasses.replace(r, rid=f"c{order[id(r)]}") for r in rules]
        for token, rules in layers.in_config.items()
    }
    exact_path, prefix_path, hosts_path = map_paths(maps_dir, key)
    # Unsorted (`map_file` sorts when the file is written, after the runtime commands);
    # a joined listener's are persistent maps the next change leaves as they are, other
    # layers' dicts are copied.
    files: dict[str, MapEntries] = {
        exact_path: _kept(layers.exact),
        prefix_path: _kept(layers.prefix),
    }
    merged = annotation is not None
    lines = [f"frontend {frontend_name(key, merged)}", "  mode http", f"  bind {bind(listener)}"]
    lines += [
        "  http-request set-var(txn.h) req.hdr(host),field(1,:),lower",
        "  http-request set-var(txn.p) path",
        "  http-request set-var(txn.k) var(txn.h) if !{ var(txn.h) -m sub * }",
    ]
    closed = _closed_hosts(listener)
    close: list[str] = []
    if closed:
        closed_file = closed_path(maps_dir, key)
        # a closed wildcard ends the lookup of deeper names too (its "**." layer)
        files[closed_file] = {token: "1" for host in closed for token in _closed_tokens(host)}
        close = [
            f"  http-request set-var(txn.r) str({CLOSED}) if {_UNDECIDED}"
            f" {{ var(txn.k),map_str({closed_file}) -m found }}"
        ]
    # Only a layer with config rules has lines of its own (`_layer`).
    exact_tokens = sorted(t for t in in_config if t != ANY_HOST and not is_wildcard_token(t))
    lines += _layer(exact_tokens, in_config, exact_path, prefix_path) + close
    wildcards = [t for t in in_config if is_wildcard_token(t)]
    depths = {*WILDCARD_DEPTHS, *layers.depths}
    depths.update(wildcard_depth(t) for t in closed if t.startswith("*."))
    for depth in sorted(depths, reverse=True):
        lines += [
            "  http-request unset-var(txn.k)",
            "  http-request unset-var(txn.w)",
            f"  http-request set-var(txn.w) var(txn.h),field(-1,.,{depth}) if {_UNDECIDED}"
            f" {{ var(txn.h),field(-{depth + 1},.) -m len gt 0 }}",
            # one label before the suffix: the "*." layer; more: the "**." one
            f"  http-request set-var(txn.k) str(*.),concat(,txn.w,) if {_UNDECIDED}"
            f" {{ var(txn.w) -m found }} !{{ var(txn.h),field(-{depth + 2},.) -m len gt 0 }}",
            f"  http-request set-var(txn.k) str({DEEP_PREFIX}),concat(,txn.w,) if {_UNDECIDED}"
            f" {{ var(txn.w) -m found }} {{ var(txn.h),field(-{depth + 2},.) -m len gt 0 }}",
        ]
        tokens = sorted(t for t in wildcards if wildcard_depth(t) == depth)
        lines += _layer(tokens, in_config, exact_path, prefix_path) + close
    lines.append(f"  http-request set-var(txn.k) str({ANY_HOST}) if {_UNDECIDED}")
    lines += _layer([ANY_HOST] if ANY_HOST in in_config else [], in_config, exact_path, prefix_path)
    if annotation is not None:
        hosts: dict[str, str] = {}
        for route in sorted(annotation.routes, key=lambda r: (r.host, r.backend)):
            if not names.is_host_name(route.host):
                raise RenderError(f"invalid host: {route.host!r}")
            hosts.setdefault(route.host, checked_backend_name(route.backend))
        files[hosts_path] = hosts
        named.update(hosts.values())
        lines += [
            f"  http-request set-var(txn.be) var(txn.h),map_str({hosts_path}) if {_UNDECIDED}",
            f"  http-request set-var(txn.r) str(a) if {_UNDECIDED} {{ var(txn.be) -m found }}",
        ]
    once = {r.rid: r for rules in in_config.values() for r in rules}  # a rule in two layers
    scheme = "https" if listener.HasField("tls") else "http"  # what a client came with
    for rule in sorted(once.values(), key=lambda r: int(r.rid[1:])):
        lines += _outcome(rule, port, scheme, named)
    default = listener.default_backend
    lines.append("  http-request return status 500 if { var(txn.st) -m found }")
    if closed:  # stopped at a closed host layer: not another namespace's default backend
        lines.append(f"  http-request return status 404 if {{ var(txn.r) -m str {CLOSED} }}")
    if not default:
        lines.append("  http-request return status 404 if !{ var(txn.be) -m found }")
    lines.append("  use_backend %[var(txn.be)] if { var(txn.be) -m found }")
    if default:
        lines.append(f"  default_backend {checked_backend_name(default)}")
        named.add(default)
    return [*lines, ""], files, named, {rid: rule.rule for rid, rule in once.items()}, aside


_UNDECIDED = "!{ var(txn.r) -m found }"
CLOSED = "x"  # `txn.r` of a request stopped at a closed host layer


def _kept(entries: Mapping[str, str]) -> MapEntries:
    """`entries` to keep in a render: a persistent map itself, else a copy."""
    return entries if isinstance(entries, Map) else dict(entries)


def _closed_tokens(host: str) -> tuple[str, ...]:
    """The layer tokens a closed host stops: a wildcard's one-label and deeper layers."""
    return (host, f"*{host}") if is_wildcard_token(host) else (host,)


def _closed_hosts(listener: pb.HttpListener) -> tuple[str, ...]:
    """The listener's closed host layers, checked (exact names and wildcards), sorted."""
    for host in listener.closed_hosts:
        if not route_host(host):
            raise RenderError(f"listener {listener.port}: invalid closed host: {host!r}")
    return tuple(sorted(set(listener.closed_hosts)))


def _layer(
    tokens: Sequence[str], in_config: Mapping[str, list[Rule]], exact_path: str, prefix_path: str
) -> list[str]:
    """One host layer: the map lookups for the host token in `txn.k`, the layer's config
    rules (in list order, each losing to a map hit of higher precedence), then the map
    hit if no config rule won."""
    lines = [
        f"  http-request set-var(txn.s) var(txn.k),concat(,txn.p,),map_str({exact_path})"
        f" if {_UNDECIDED}",
        f"  http-request set-var(txn.s) var(txn.k),concat(,txn.p,/),map_beg({prefix_path})"
        f" if {_UNDECIDED} !{{ var(txn.s) -m found }}",
    ]
    for token in tokens:
        for rule in in_config.get(token, ()):
            lines.append(
                f"  http-request set-var(txn.r) str({rule.rid}) if {_UNDECIDED}"
                f" {{ var(txn.k) -m str {token} }}{_conditions(rule)}"
                f" !{{ var(txn.s),field(1,:) -m int gt {rule.strength} }}"
            )
    found = "{ var(txn.s) -m found }"
    return [
        *lines,
        f"  http-request set-var(txn.be) var(txn.s),field(2,:) if {_UNDECIDED} {found}",
        f"  http-request set-var(txn.r) str(s) if {_UNDECIDED} {found}",
    ]


def _conditions(rule: Rule) -> str:
    """The ACLs of a config rule beyond its host: path, method, headers, query."""
    r = rule.rule
    out = []
    if rule.exact:
        out.append(f"{{ var(txn.p) -m str {rule.path} }}")
    elif rule.path != "/":
        out.append(f"{{ var(txn.p),concat(,,/) -m beg {rule.path}/ }}")
    if r.method:
        out.append(f"{{ method {r.method} }}")
    for h in r.headers:
        out.append(_equals(f"req.fhdr({h.name})", h.value))
    for q in r.query_params:
        out.append(_equals(f"url_param({q.name})", q.value))
    return "".join(f" {c}" for c in out)


def _equals(fetch: str, value: str) -> str:
    if value:
        return f"{{ {fetch} -m str {value} }}"
    return f"{{ {fetch} -m found }} {{ {fetch} -m len 0 }}"


def _outcome(rule: Rule, port: int, scheme: str, named: set[str]) -> list[str]:
    """What a config rule does once it won: its backend (by weight; 500 for an
    unresolved share or none) after its filters' lines (`nodeagent/config/filters`; a
    filter that answers, a redirect, ends it)."""
    r, won = rule.rule, f"{{ var(txn.r) -m str {rule.rid} }}"
    lines, answered = filter_lines(r, RuleOutcome(port, scheme, won))
    if answered:
        return lines
    served = [b for b in r.backends if b.weight > 0]
    total = sum(b.weight for b in served)
    if total == 0 or total >= _WEIGHT_TOTAL:
        return [*lines, f"  http-request set-var(txn.st) int(500) if {won}"]
    if len(served) == 1:
        return lines + _share(served[0].backend, won, named)
    lines.append(f"  http-request set-var(txn.rnd) rand({total}) if {won}")
    upto = 0
    for b in served:
        upto += b.weight
        share = f"{won} {{ var(txn.rnd) -m int lt {upto} }} !{{ var(txn.be) -m found }}"
        lines += _share(b.backend, f"{share} !{{ var(txn.st) -m found }}", named)
    return lines


def _share(backend: str, condition: str, named: set[str]) -> list[str]:
    if not backend:
        return [f"  http-request set-var(txn.st) int(500) if {condition}"]
    named.add(backend)
    return [f"  http-request set-var(txn.be) str({backend}) if {condition}"]
